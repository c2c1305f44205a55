"""The root command group: turns a ``StateStoreError`` into one line on stderr and an exit code,
and a misplaced option into a hint naming where it goes."""

import re
import sys
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from statestore_cli.cli.failure import closed_pipe, finish, report, report_error, warnings_as_lines
from statestore_cli.cli.stopping import Terminated, terminate_on_sigterm
from statestore_cli.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    InterruptedByUser,
    Outcome,
    StateStoreError,
    first_line,
)

try:  # typer >= 0.24 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef, import-not-found, unused-ignore]

_NoArgsIsHelp = getattr(click_exceptions, "NoArgsIsHelpError", None)


class StateStoreGroup(TyperGroup):
    """Turns every error into one line on stderr and a documented exit code (docs/reference/commands.md), a
    command's ``Outcome`` into its exit code, and a closed pipe into a quiet end (``cli.failure``)."""

    def make_context(self, info_name: Any, args: Any, parent: Any = None, **extra: Any) -> Any:
        try:  # root options are parsed here: `--help` and `--version` print from inside
            return super().make_context(info_name, args, parent=parent, **extra)
        except BrokenPipeError:
            raise _PipeClosed(EXIT_OK) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except StateStoreError as exc:
            if ctx.params.get("debug"):
                raise
            raise _Reported(exc) from None
        except BrokenPipeError:
            # The reader went away: the output ends, the outcome decided before it stands.
            outcome = ctx.meta.get(_DECIDED)
            if isinstance(outcome, StateStoreError):
                raise _Reported(outcome) from None
            raise _PipeClosed(_exit_code(outcome)) from None
        except (click_exceptions.ClickException, typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:  # typer would exit 130 without a word
            if ctx.params.get("debug"):
                raise
            raise _Reported(InterruptedByUser("interrupted")) from None
        except Exception as exc:  # a bug of ours: still no traceback unless --debug asks for it
            if ctx.params.get("debug"):
                raise
            message = f"unexpected {type(exc).__name__}: {first_line(exc)} (rerun with --debug for the traceback)"
            raise _Reported(StateStoreError(message)) from None
        except SystemExit as exc:
            # No command of ours exits by SystemExit (typer.Exit is not one): code it ran did, a backend
            # calling sys.exit(); left to click, sys.exit(0) would end a failed command with exit 0.
            if ctx.params.get("debug"):  # its traceback, and exit 1: re-raised it would exit with its code
                raise RuntimeError(f"code the command ran raised SystemExit({exc.code!r})") from exc
            message = (
                f"unexpected SystemExit({exc.code!r}) raised by code the command ran (a backend or a module a "
                "dotted path names); the command did not finish (rerun with --debug for the traceback)"
            )
            raise _Reported(StateStoreError(message)) from None

    def main(  # type: ignore[override]  # same parameters, but standalone handling is ours
        self,
        args: Any = None,
        prog_name: Any = None,
        complete_var: Any = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            with terminate_on_sigterm(), warnings_as_lines():
                result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Terminated:
            _fail("terminated (SIGTERM)", EXIT_TERMINATED)
        except _PipeClosed as exc:
            sys.exit(closed_pipe(exc.exit_code))
        except _Reported as exc:
            sys.exit(report_error(exc.error))
        except click_exceptions.UsageError as exc:
            if _NoArgsIsHelp is not None and isinstance(exc, _NoArgsIsHelp):
                # A group without its command: its help on stdout (rich help is printed already; plain
                # help here, ending its line), then one error line naming the commands, exit 2.
                sys.exit(_missing_command(exc))
            argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
            placement = _placement_hint(self, exc, argv) if isinstance(exc, click_exceptions.NoSuchOption) else None
            if placement:
                _fail(f"{exc.format_message()}; {placement}", EXIT_USAGE)
            negative = _negative_value_hint(exc, argv) if isinstance(exc, click_exceptions.NoSuchOption) else None
            if negative:
                _fail(negative, EXIT_USAGE)
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _fail(f"{exc.format_message()}{hint}", EXIT_USAGE)
        except click_exceptions.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except typer.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # click has ended the ^C line already
                _fail("interrupted", EXIT_INTERRUPTED)
            _fail("aborted", 1)
        code = finish(_exit_code(result))
        if standalone_mode:
            sys.exit(code)
        return code


def _placement_hint(root: Any, exc: Any, argv: list[str]) -> str | None:
    """Where an option given on the wrong side of the command name goes, with the corrected command:
    root options (``--conn``, ``--config``, ``--debug``) before it, the command's own after it."""
    name = exc.option_name
    words = [a for a in argv if not a.startswith("-")]
    path: list[str] = []
    command = root
    for word in words:  # the command the user meant: `list`, or `db check`
        sub = command.commands.get(word) if hasattr(command, "commands") else None
        if sub is None:
            if path:
                break
            continue
        path.append(word)
        command = sub
    if not path:
        return None
    failed_in_root = exc.ctx is not None and exc.ctx.command is root
    owner = command if failed_in_root else root
    param = next((p for p in owner.params if name in (*p.opts, *p.secondary_opts)), None)
    if param is None:
        return None
    given = [name]
    at = next((i for i, a in enumerate(argv) if a == name or a.startswith(name + "=")), None)
    if at is not None and "=" in argv[at]:
        given = [argv[at]]
    elif at is not None and not getattr(param, "is_flag", False) and at + 1 < len(argv):
        given.append(argv[at + 1])
    spelled = "/".join(param.opts)
    if failed_in_root:
        return f"{spelled} goes after the command: statestore {' '.join([*path, *given])}"
    return f"{spelled} goes before the command: statestore {' '.join([*given, *path])}"


def _negative_value_hint(exc: Any, argv: list[str]) -> str | None:
    """A negative number given as a value (``set SCOPE k -1``) reads as an option: after ``--`` it is
    an argument. Names the word as typed, with the corrected command (the value last, after ``--``)."""
    if not re.fullmatch(r"-[0-9.]", exc.option_name or ""):
        return None
    at = next((i for i, a in enumerate(argv) if a.startswith(exc.option_name)), None)
    if at is None or "--" in argv[:at]:
        return None
    fixed = [*argv[:at], *argv[at + 1 :], "--", argv[at]]
    return f"No such option: {argv[at]}; a value starting with - goes after --: statestore {' '.join(fixed)}"


def _exit_code(result: object) -> int:
    """A command's ``Outcome`` decides its exit code; ``typer.Exit`` (``--version``) gives an int."""
    if isinstance(result, Outcome):
        return result.exit_code
    return result if isinstance(result, int) else EXIT_OK


# Where a command records its outcome before writing its output (``decided``), in the context's meta,
# which every context of one run shares.
_DECIDED = "statestore.decided"


def decided(ctx: typer.Context, outcome: Outcome | StateStoreError | None) -> None:
    """Record the command's outcome before its output is written: a reader that closes the pipe
    early cuts the output short, and the exit code is still this outcome's (an error: its line and code)."""
    ctx.meta[_DECIDED] = outcome


def _missing_command(exc: Any) -> int:
    text = exc.format_message()
    try:
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    except BrokenPipeError:
        closed_pipe(EXIT_USAGE)
    names = exc.ctx.command.list_commands(exc.ctx) if exc.ctx is not None else []
    path = exc.ctx.command_path if exc.ctx is not None else "statestore"
    which = ", ".join(names) if 0 < len(names) <= 6 else "the commands listed above"
    return report(f"missing command: {path} takes one of {which}", EXIT_USAGE)


class _PipeClosed(Exception):
    """stdout's reader went away; not an OSError, so click passes it through to ``StateStoreGroup.main``."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


class _Reported(click_exceptions.ClickException):
    """A ``StateStoreError`` on its way through click to ``StateStoreGroup.main``."""

    def __init__(self, error: StateStoreError) -> None:
        super().__init__(str(error))
        self.error = error
        self.exit_code = error.exit_code


def _fail(message: str, code: int) -> NoReturn:
    sys.exit(report(message, code))
