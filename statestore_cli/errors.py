"""The one error family of statestore.

Every failure a user can cause or meet is a ``StateStoreError``; the CLI turns it into a one-line
message and the exit code carried by its class, in exactly one place (``statestore_cli.cli.app``).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_OPERATIONAL = 3
EXIT_STOPPED = 4  # a clean stopped by --max-runtime before it was done
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)


class StateStoreError(Exception):
    """Base class of every error statestore raises on purpose."""

    exit_code = EXIT_OPERATIONAL


class ConfigError(StateStoreError):
    """A configuration value is missing, malformed or out of range."""

    exit_code = EXIT_USAGE


class InvalidInputError(StateStoreError):
    """A value given by the caller (key, scope, JSON value, duration) is not acceptable."""

    exit_code = EXIT_USAGE


class NotFoundError(StateStoreError):
    """A key, run or asset the caller named does not exist."""

    exit_code = EXIT_NOT_FOUND


class BackendError(StateStoreError):
    """A store backend failed or cannot do what was asked."""

    exit_code = EXIT_OPERATIONAL


class DatabaseError(BackendError):
    """The database is unreachable, refused a statement, or lacks the schema."""


class CleanRunningError(BackendError):
    """``clean --exclusive`` found another exclusive clean running on the same database."""


class SchemaMissingError(DatabaseError):
    """The state store tables do not exist yet (``statestore db init`` creates them)."""


def first_line(exc: BaseException) -> str:
    """An exception's message reduced to one line, for one-line error reports."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
