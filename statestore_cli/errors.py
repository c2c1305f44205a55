"""The one error family of statestore.

Every failure a user can cause or meet is a ``StateStoreError``; the CLI turns it into a one-line
message and the exit code carried by its class, in exactly one place (``statestore_cli.cli.failure``,
called by the full CLI's ``StateStoreGroup`` and by the fast ``get`` path). A command that finishes
but must not exit 0 (a clean stopped early) returns an ``Outcome``, whose ``exit_code`` the same place
uses.

An error about one of the caller's arguments names it by the library's parameter name
(``parameter``); its message holds ``PARAMETER`` where that name goes, so a caller with other names
for its arguments (the CLI's flags) can word the same message in its own terms (``worded``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from statestore_cli.masking import mask_text  # the same (shared) layer

# Where an argument's name goes in a message; NUL, so no path, URL or quoted value can contain it.
PARAMETER = "\x00parameter\x00"

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_NOT_CONFIRMED = 1  # a confirmation question was answered no
EXIT_USAGE = 2
EXIT_OPERATIONAL = 3
EXIT_STOPPED = 4  # a clean stopped at its deadline (max runtime) before it was done
EXIT_SKIPPED = 5  # a clean skipped (custom backend) when asked to fail on a skip
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)


class StateStoreError(Exception):
    """Base class of every error statestore raises on purpose."""

    exit_code = EXIT_OPERATIONAL
    answer = False  # the user's own answer (a question answered no), said plainly rather than as an error
    problem_template: str | None = None  # the problem alone, when a ``hint`` follows it

    def __init__(self, message: str, *, parameter: str | None = None, hint: str | None = None) -> None:
        """``message`` says what is wrong. ``hint`` (what to do about it) follows it as ``message: hint``,
        and a terminal shows it on a line of its own; a message written ``problem; detail; fix`` needs no
        ``hint``, as a terminal starts a line at each "; " outside quotes and brackets already."""
        self.template = message if hint is None else f"{message}: {hint}"
        self.problem_template = None if hint is None else message
        self.parameter = parameter
        super().__init__(_word(self.template, parameter, {}))

    def worded(self, names: Mapping[str, str]) -> str:
        """The message with the parameter spelled as ``names`` calls it (else by its library name)."""
        return _word(self.template, self.parameter, names)

    def worded_problem(self, names: Mapping[str, str]) -> str | None:
        """The problem alone, worded as ``worded`` words the message, when a ``hint`` follows it."""
        return None if self.problem_template is None else _word(self.problem_template, self.parameter, names)


class ConfigError(StateStoreError):
    """A configuration value is missing, malformed or out of range."""

    exit_code = EXIT_USAGE


class ConfigSourceError(StateStoreError):
    """A configuration value's command (``..._cmd``) failed or timed out, or the secrets backend that
    holds it (``..._secret``) raised: the configuration may be right, the source is not answering."""

    exit_code = EXIT_OPERATIONAL


class InvalidInputError(StateStoreError):
    """A value given by the caller (key, scope, JSON value, duration) is not acceptable."""

    exit_code = EXIT_USAGE


class NotFoundError(StateStoreError):
    """A key, run or asset the caller named does not exist."""

    exit_code = EXIT_NOT_FOUND


class NotConfirmedError(StateStoreError):
    """A destructive action was not confirmed; nothing was done. The user's answer, not a failure:
    the CLI says it without "error:" (``answer``), and exits 1 so that a script sees nothing was done."""

    exit_code = EXIT_NOT_CONFIRMED
    answer = True


class InterruptedByUser(StateStoreError):
    """Ctrl-C ended a command (a question, a dry run) before it was done; the message says what was done."""

    exit_code = EXIT_INTERRUPTED


class BackendError(StateStoreError):
    """A store backend failed or cannot do what was asked."""

    exit_code = EXIT_OPERATIONAL


class DatabaseError(BackendError):
    """The database is unreachable, refused a statement, or lacks the schema."""


class IntegrityConflictError(DatabaseError):
    """The database refused a write for a key or reference another writer holds (a unique or foreign key)."""


class CleanRunningError(BackendError):
    """An exclusive clean found another exclusive clean running on the same database."""


class MetricsFileError(BackendError):
    """A clean's metrics file could not be written when the clean ended (what it deleted stays deleted)."""


class SchemaMissingError(DatabaseError):
    """The state store tables do not exist yet (``statestore db init`` creates them)."""


class Note(NamedTuple):
    """Something a caller should know that is not an error (a timeout the engine cannot apply);
    worded like errors: ``PARAMETER`` in the text stands for the parameter it is about."""

    template: str
    parameter: str | None = None

    def worded(self, names: Mapping[str, str]) -> str:
        return _word(self.template, self.parameter, names)

    def __str__(self) -> str:
        return self.worded({})


def _word(template: str, parameter: str | None, names: Mapping[str, str]) -> str:
    if parameter is None:
        return template
    return template.replace(PARAMETER, names.get(parameter, parameter))


class StopReason(StrEnum):
    """Why a clean stopped before every expired key was deleted; each reason has its exit code."""

    INTERRUPTED = "interrupted"  # Ctrl-C
    TERMINATED = "terminated"  # SIGTERM
    MAX_RUNTIME = "max_runtime"  # the clean's deadline passed

    @property
    def exit_code(self) -> int:
        return _STOP_EXIT_CODES[self]


_STOP_EXIT_CODES = {
    StopReason.INTERRUPTED: EXIT_INTERRUPTED,
    StopReason.TERMINATED: EXIT_TERMINATED,
    StopReason.MAX_RUNTIME: EXIT_STOPPED,
}


@runtime_checkable
class Outcome(Protocol):
    """A result that decides its command's exit status (``CleanReport``: non-zero when stopped early)."""

    @property
    def exit_code(self) -> int: ...


_E = TypeVar("_E", bound=StateStoreError)


def failed_midway(exc: _E, command: str, deleted: int, batches: int, kind: str = "") -> _E:
    """``exc`` of a batched delete, saying how far ``command`` got: its committed batches stay deleted."""
    if not deleted:
        return exc
    keys = f"{deleted:,} {kind}key{'s' if deleted != 1 else ''}"
    done = f"{keys} in {batches:,} committed batch{'es' if batches != 1 else ''}"
    return type(exc)(
        f"{exc.template} (the {command} had deleted {done}; they stay deleted: run {command} again to finish)",
        parameter=exc.parameter,
    )


def first_line(exc: BaseException) -> str:
    """An exception's message reduced to one line, for one-line error reports, masked (``masking``): the
    text of a driver's, a backend's or an import's exception may quote a password."""
    lines = str(exc).strip().splitlines()
    return mask_text(lines[0]) if lines else type(exc).__name__
