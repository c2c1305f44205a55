"""The ``statestore`` command line: each command resolves the settings, calls one library function
and hands the result to the render layer. Errors become a message and an exit code in one place:
``StateStoreGroup`` hands every ``StateStoreError`` to ``cli.failure``; a command whose result must not
exit 0 (a clean stopped early) returns it as an ``Outcome``, and the group exits with its code."""

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import typer
from typer.core import TyperGroup

from statestore_cli import __version__
from statestore_cli.cli.failure import FLAGS, closed_pipe, finish, message, report, report_error, warn
from statestore_cli.cli.modes import OutputMode
from statestore_cli.cli.render import Output
from statestore_cli.cli.safe_text import safe_text, warning_line
from statestore_cli.cli.scope_options import as_filter, scope_of, with_scope_options
from statestore_cli.cli.stopping import StopOnSignal, Terminated, terminate_on_sigterm
from statestore_cli.cli.values import read_value
from statestore_cli.config import Settings, load_settings
from statestore_cli.entries import KeyFilter, Timeouts
from statestore_cli.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SKIPPED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    InterruptedByUser,
    InvalidInputError,
    NotConfirmedError,
    Outcome,
    StateStoreError,
    first_line,
)
from statestore_cli.retention import parse_age, parse_duration, parse_instant, parse_retention, utcnow

if TYPE_CHECKING:  # loaded by `clean` only when it runs
    from statestore_cli.cleanup import CleanReport
    from statestore_cli.metrics import CleanRecorder

try:  # typer >= 0.24 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef, import-not-found, unused-ignore]

_NoArgsIsHelp = getattr(click_exceptions, "NoArgsIsHelpError", None)


class StateStoreGroup(TyperGroup):
    """Turns every error into one line on stderr and a documented exit code (see the README), a
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

    def main(  # type: ignore[override]  # same parameters, but standalone handling is ours
        self,
        args: Any = None,
        prog_name: Any = None,
        complete_var: Any = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            with terminate_on_sigterm():
                result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Terminated:
            _fail("terminated (SIGTERM)", EXIT_TERMINATED)
        except _PipeClosed as exc:
            sys.exit(closed_pipe(exc.exit_code))
        except _Reported as exc:
            sys.exit(report_error(exc.error))
        except click_exceptions.UsageError as exc:
            if _NoArgsIsHelp is not None and isinstance(exc, _NoArgsIsHelp):
                sys.exit(_print(exc.format_message()))  # rich help is printed already; plain help is here
            argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
            placement = _placement_hint(self, exc, argv) if isinstance(exc, click_exceptions.NoSuchOption) else None
            if placement:
                _fail(f"{exc.format_message()}; {placement}", EXIT_USAGE)
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


def _print(text: str) -> int:
    try:
        sys.stdout.write(text)
    except BrokenPipeError:
        return closed_pipe()
    return finish(EXIT_OK)


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


# Help is rich on a terminal and plain (click's layout) into a pipe or a file, as command output is:
# typer's rich help layer loads rich.markdown, rich.syntax and pygments, a third of a `--help` run.
_RICH_HELP = sys.stdout.isatty()


def _section(name: str) -> str:
    """A config section as help shows it: rich help reads [...] as markup."""
    return f"\\[{name}]" if _RICH_HELP else f"[{name}]"


def _examples(*lines: str) -> str:
    """A help epilog of example command lines, each on its own line in plain and rich help."""
    body = "Examples:\n" + "\n".join(f"  statestore {line}" for line in lines)
    return body if _RICH_HELP else "\b\n" + body  # \b: click keeps the lines as they are


_DATABASE = _section("database")
_TASK = "--dag-id etl --run-id manual__1 --task-id submit"

app = typer.Typer(
    cls=StateStoreGroup,
    name="statestore",
    help="Read, write and garbage-collect Airflow's task and asset state store.\n\n"
    "Root options (--config, --conn, --debug) go before the command; the command's own options after it.",
    epilog=_examples(
        "db check",
        f"get {_TASK} job_id",
        "clean --dry-run",
        "--config /opt/airflow/airflow.cfg clean --batch-size 10000",
    ),
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion and _STATESTORE_COMPLETE
    rich_markup_mode="rich" if _RICH_HELP else None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(
    help="Create and check the state store schema.",
    epilog=_examples("db init", "db check", "--conn postgresql+psycopg://airflow@db/airflow db check -o json"),
    no_args_is_help=True,
)
backend_app = typer.Typer(
    help="Check custom backends.",
    epilog=_examples("backend check", "backend check -o json"),
    no_args_is_help=True,
)
config_app = typer.Typer(
    help="Show the effective configuration.",
    epilog=_examples("config show", "--config /opt/airflow/airflow.cfg config show -o json"),
    no_args_is_help=True,
)
assets_app = typer.Typer(
    help="Sweep the keys of inactive assets; delete an asset of a standalone store.",
    epilog=_examples("assets sweep --dry-run", "assets sweep", "assets delete --asset-name orders --yes"),
    no_args_is_help=True,
)
runs_app = typer.Typer(
    help="Delete a dag run of a standalone store, with its keys.",
    epilog=_examples("runs delete --dag-id etl --run-id manual__1 --yes"),
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")
app.add_typer(backend_app, name="backend")
app.add_typer(config_app, name="config")
app.add_typer(assets_app, name="assets")
app.add_typer(runs_app, name="runs")


@dataclass
class CliState:
    config_path: Optional[Path] = None
    conn: Optional[str] = None
    debug: bool = False
    connect_timeout: Optional[str] = None
    _settings: Optional[Settings] = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config_path, self.conn, connect_timeout_override=self.connect_timeout)
            for note in self._settings.warnings:  # a typo in an option name must not pass unnoticed
                warn(note.worded(FLAGS))
        return self._settings


# The filters `list` and `stats` take beside the scope options.
KeyOpt = Annotated[Optional[str], typer.Option("--key", help="Only this key.")]
StoreOpt = Annotated[Optional[str], typer.Option("--store", help="task or asset (default: both).")]
OutputOpt = Annotated[
    OutputMode,
    typer.Option(
        "--output",
        "-o",
        metavar="MODE",
        help="auto, table, plain or json; auto gives tables on a terminal, plain lines otherwise.",
    ),
]
HeaderOpt = Annotated[
    bool, typer.Option("--header", help="Plain output: start with a line naming the tab-separated columns.")
]


def _output(requested: OutputMode, header: bool = False) -> Output:
    return Output.choose(requested.value, header)


def _settings(ctx: typer.Context) -> Settings:
    state: CliState = ctx.find_root().obj
    return state.settings


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"statestore {__version__}\n")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    config: Annotated[
        Optional[Path],
        typer.Option(
            "--config",
            metavar="PATH",
            help="airflow.cfg-style file (default: $AIRFLOW_CONFIG, else $AIRFLOW_HOME/airflow.cfg).",
        ),
    ] = None,
    conn: Annotated[
        Optional[str],
        typer.Option(
            "--conn", metavar="URL", help=f"SQLAlchemy URL of the database; overrides {_DATABASE} sql_alchemy_conn."
        ),
    ] = None,
    connect_timeout: Annotated[
        Optional[str],
        typer.Option(
            "--connect-timeout",
            metavar="DURATION",
            help="Give up when the database server does not accept a connection within this time (5s, 1m). "
            f"Default: {_section('state_store')} connect_timeout (10s unless configured).",
        ),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show the Python traceback of an error.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    ctx.obj = CliState(config_path=config, conn=conn, debug=debug, connect_timeout=connect_timeout)


# -- db ---------------------------------------------------------------------------------------------
@db_app.command("init", epilog=_examples("db init", "--conn postgresql+psycopg://airflow@db/airflow db init"))
def db_init(ctx: typer.Context, output: OutputOpt = OutputMode.auto, header: HeaderOpt = False) -> None:
    """Create the state store schema (idempotent).

    Refuses to touch an Airflow database older than 3.3."""
    from statestore_cli import commands  # here, not at the top: `--help` need not load SQLAlchemy

    out = _output(output, header)
    out.db_report(commands.db_init(_settings(ctx)), created=True)


@db_app.command("check", epilog=_examples("db check", "db check -o json"))
def db_check(ctx: typer.Context, output: OutputOpt = OutputMode.auto, header: HeaderOpt = False) -> None:
    """Report engine, schema state and mode.

    Exits 0 only when the store is usable, else 3 with the reason."""
    from statestore_cli import commands

    out = _output(output, header)
    checked = commands.db_check(_settings(ctx))
    problem = checked.problem()
    decided(ctx, problem)
    out.db_report(checked)
    if problem is not None:
        raise problem


# -- keys -------------------------------------------------------------------------------------------
@app.command(
    "get",
    epilog=_examples(f"get {_TASK} job_id", "get --asset-name orders watermark -o json", f"get {_TASK} job_id --raw"),
)
@with_scope_options
def get(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The key.")],
    scope_args: KeyFilter,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Print what the database holds (a worker-side reference as it is stored), "
            "without calling the worker-side backend.",
        ),
    ] = False,
    output: OutputOpt = OutputMode.auto,
) -> None:
    """Print a key's value as JSON.

    A missing key exits 1. A value that does not match the worker-side backend setting (a plain
    value where one is set, a reference where none is) is printed as stored, with a warning on stderr."""
    import warnings

    from statestore_cli import commands
    from statestore_cli.accessors import StateReferenceWarning

    out = _output(output)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StateReferenceWarning)
        entry = commands.get_entry(_settings(ctx), scope_of(scope_args), key, raw=raw)
    for warning in caught:
        if issubclass(warning.category, StateReferenceWarning):
            sys.stderr.write(warning_line(str(warning.message)))
        else:  # not ours to word: shown as Python would have
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    out.value(entry)


@app.command(
    "set",
    epilog=_examples(
        f'set {_TASK} job_id \'{{"id": "j-123"}}\' --retention 6h',
        "set --asset-name orders watermark 2026-11-30 --string",
    ),
)
@with_scope_options
def set_(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The key.")],
    value: Annotated[str, typer.Argument(metavar="VALUE", help="A JSON value, or - to read it from stdin.")],
    scope_args: KeyFilter,
    retention: Annotated[
        Optional[str],
        typer.Option(
            "--retention",
            metavar="DURATION",
            help="never, or a duration: 90s, 15m, 6h, 7d, 1d12h, P7D (task keys only). "
            f"Default: {_section('state_store')} default_retention_days (30 unless configured).",
        ),
    ] = None,
    string: Annotated[
        bool, typer.Option("--string", help="Store VALUE as a JSON string instead of parsing it.")
    ] = False,
    keep_expiry: Annotated[
        bool,
        typer.Option(
            "--keep-expiry", help="Replace the value of an existing key and keep its expiry; a missing key exits 1."
        ),
    ] = False,
    expires_at: Annotated[
        Optional[str],
        typer.Option(
            "--expires-at",
            metavar="TIMESTAMP",
            help="Expire at this instant, ISO 8601 with a time zone (2026-12-01T00:00:00Z); task keys only.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="With --expires-at: accept an instant in the past.")] = False,
) -> None:
    """Write a key (insert or replace).

    Keys may hold any characters, `/` and spaces included; a value is refused when it is JSON null,
    NaN or Infinity, or larger than max_value_storage_bytes (exit 2)."""
    from statestore_cli import commands

    scope = scope_of(scope_args)
    _check_expiry_options(retention, keep_expiry, expires_at, force)
    parsed_retention = parse_retention(retention) if retention is not None else None
    instant = parse_instant(expires_at, "--expires-at") if expires_at is not None else None
    document = read_value(value, as_string=string)
    if keep_expiry:
        commands.replace_value(_settings(ctx), scope, key, document)
        Output.choose().line(f"replaced '{safe_text(key)}' for {safe_text(scope.describe())} (expiry kept)")
        return
    stored: Optional[datetime]
    if instant is not None:
        stored = commands.set_value_until(_settings(ctx), scope, key, document, instant, force=force)
    else:
        stored = commands.set_value(_settings(ctx), scope, key, document, parsed_retention)
    expiry = "never expires" if stored is None else f"expires {stored:%Y-%m-%d %H:%M:%S} UTC"
    Output.choose().line(f"set '{safe_text(key)}' for {safe_text(scope.describe())} ({expiry})")


def _check_expiry_options(retention: Optional[str], keep_expiry: bool, expires_at: Optional[str], force: bool) -> None:
    given = [
        flag
        for flag, on in (("--retention", retention), ("--keep-expiry", keep_expiry), ("--expires-at", expires_at))
        if on
    ]
    if len(given) > 1:
        raise InvalidInputError(f"{' and '.join(given)} each decide the expiry; give one of them")
    if force and expires_at is None:
        raise InvalidInputError("--force goes with --expires-at (to accept an instant in the past)")


@app.command("delete", epilog=_examples(f"delete {_TASK} job_id"))
@with_scope_options
def delete(
    ctx: typer.Context, key: Annotated[str, typer.Argument(metavar="KEY", help="The key.")], scope_args: KeyFilter
) -> None:
    """Delete one key.

    A key that is not there is not an error."""
    from statestore_cli import commands

    scope = scope_of(scope_args)
    removed = commands.delete_key(_settings(ctx), scope, key)
    what = "deleted" if removed != 0 else "no such key, nothing deleted:"
    Output.choose().line(f"{what} '{safe_text(key)}' for {safe_text(scope.describe())}")


@app.command(
    "clear",
    epilog=_examples(
        f"clear {_TASK}",
        "clear --dag-id etl --run-id manual__1 --task-id load --all-map-indices --yes",
        "clear --dag-id etl --run-id manual__1 --yes",
        "clear --dag-id etl --batch-size 10000 --yes",
    ),
)
@with_scope_options
def clear(
    ctx: typer.Context,
    scope_args: KeyFilter,
    all_map_indices: Annotated[
        bool, typer.Option("--all-map-indices", help="Clear every map index of the task.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    batch_size: Annotated[
        Optional[int],
        typer.Option(
            "--batch-size",
            min=0,
            metavar="N",
            help="A whole run or dag: keys per committed batch; 0 = one statement. "
            f"Default: {_section('state_store')} state_cleanup_batch_size.",
        ),
    ] = None,
) -> None:
    """Delete every key of a scope, of a whole run, or of a whole dag.

    --dag-id with --run-id and no --task-id clears every task key of the run; --dag-id alone every
    task key of the dag, in batches of --batch-size.
    Counts the keys first: with none it says so and exits 0.
    Then it asks on a terminal; anywhere else it needs --yes.
    Answering no, or no answer (end of input), exits 1; Ctrl-C at the question exits 130."""
    from statestore_cli import commands
    from statestore_cli.scopes import describe_keys_of

    settings = _settings(ctx)
    dag_id = _whole_run_or_dag(scope_args, all_map_indices)
    if dag_id is not None:
        _clear_run_or_dag(settings, dag_id, scope_args.run_id, yes, batch_size)
        return
    if batch_size is not None:
        raise InvalidInputError("--batch-size applies to a whole run or dag (--dag-id [--run-id] without --task-id)")
    scope = scope_of(scope_args)
    where = safe_text(describe_keys_of(scope, all_map_indices=all_map_indices))
    count = commands.count_keys(settings, scope, all_map_indices=all_map_indices)  # None: the backend cannot count
    if count == 0:
        Output.choose().line(f"nothing to clear: no keys for {where}")
        return
    _confirm_delete(yes, "clear deletes keys", f"Delete {'all keys' if count is None else _keys(count)} of {where}?")
    removed = commands.clear_scope(settings, scope, all_map_indices=all_map_indices)
    Output.choose().line(f"deleted {'keys' if removed is None else _keys(removed)} of {where}")


def _whole_run_or_dag(given: KeyFilter, all_map_indices: bool) -> Optional[str]:
    """The dag id when ``clear`` was given a run (--dag-id --run-id) or a dag (--dag-id) rather than a
    task or an asset, else None."""
    if given.dag_id is None or given.task_id is not None or given.has_asset_fields:
        return None
    if given.map_index is not None or all_map_indices:
        flag = "--map-index" if given.map_index is not None else "--all-map-indices"
        raise InvalidInputError(f"{flag} needs --task-id; without it clear takes every task of the run or dag")
    return given.dag_id


def _clear_run_or_dag(
    settings: Settings, dag_id: str, run_id: Optional[str], yes: bool, batch_size: Optional[int]
) -> None:
    from statestore_cli import lifecycle

    if batch_size is not None and batch_size > _MAX_BATCH_SIZE:
        raise InvalidInputError(f"--batch-size {batch_size} is too large; the largest is {_MAX_BATCH_SIZE}")
    where = safe_text(lifecycle.describe_run_or_dag(dag_id, run_id))
    whole = "every task of the run" if run_id is not None else "every run and task of the dag"
    count = lifecycle.count_task_keys(settings, dag_id, run_id)
    if count == 0:
        Output.choose().line(f"nothing to clear: no task keys for {where}")
        return
    _confirm_delete(yes, "clear deletes keys", f"Delete {_keys(count)} of {where} ({whole})?")
    removed, batches = lifecycle.clear_task_keys(settings, dag_id, run_id, batch_size)
    plural = "es" if batches != 1 else ""
    Output.choose().line(f"deleted {_keys(removed)} of {where} ({whole}) in {batches:,} batch{plural}")


def _confirm_delete(yes: bool, action: str, question: str) -> None:
    """The confirmation rule of every deleting command: --yes, or y/yes typed at a terminal."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InvalidInputError(f"{action} and stdin is not a terminal to confirm on; pass --yes")
    if not _confirm(f"{question} [y/N] "):
        raise NotConfirmedError("nothing deleted (not confirmed)")


def _keys(count: int) -> str:
    return f"{count:,} key{'s' if count != 1 else ''}"


def _confirm(question: str) -> bool:
    """Ask ``question`` on the terminal (stderr, so stdout keeps only results): only y or yes confirms.
    Ctrl-C and end of input (Ctrl-D) end the command with their own error, on a line of their own."""
    sys.stdout.flush()
    try:  # from before the question shows: a Ctrl-C typed as soon as it appears lands here too
        sys.stderr.write(question)
        sys.stderr.flush()
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        sys.stderr.write("\n")  # the terminal shows ^C after the question: the error goes below it
        raise InterruptedByUser("interrupted at the question; nothing deleted") from None
    if not answer:  # end of input: no line was typed, so the cursor is still after the question
        sys.stderr.write("\n")
        raise NotConfirmedError("no answer (end of input); nothing deleted")
    return answer.strip().lower() in ("y", "yes")


@app.command(
    "list", epilog=_examples("list --dag-id etl", "list --store asset -o json", "list --limit 50 --offset 100")
)
@with_scope_options
def list_(
    ctx: typer.Context,
    scope_args: KeyFilter,
    key: KeyOpt = None,
    store: StoreOpt = None,
    limit: Annotated[
        Optional[int], typer.Option("--limit", min=0, help="Show at most N keys (after --offset).", metavar="N")
    ] = None,
    offset: Annotated[
        int, typer.Option("--offset", min=0, help="Skip the first N keys of the listing's order.", metavar="N")
    ] = 0,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> None:
    """List keys with their scope, updated_at and expires_at.

    Ordered by scope and key; any scope option filters."""
    from statestore_cli import commands

    out = _output(output, header)
    filt = as_filter(scope_args, store, key)
    out.entries(commands.list_entries(_settings(ctx), filt, limit=limit, offset=offset), filt)


@app.command("stats", epilog=_examples("stats", "stats --dag-id etl -o json"))
@with_scope_options
def stats(
    ctx: typer.Context,
    scope_args: KeyFilter,
    key: KeyOpt = None,
    store: StoreOpt = None,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> None:
    """Count keys per store, by expiry, per dag and per asset.

    On a terminal it also charts when task keys expire."""
    from statestore_cli import commands

    out = _output(output, header)
    filt = as_filter(scope_args, store, key)
    out.stats(commands.stats(_settings(ctx), filt))


# -- export and import ------------------------------------------------------------------------------
_MAX_IMPORT_BATCH = 100_000  # transfer.MAX_BATCH_SIZE, without importing SQLAlchemy for --help


@app.command(
    "export",
    epilog=_examples(
        "export --file /backup/statestore-2026-11-30.jsonl", "export --dag-id etl > etl.jsonl", "export --store asset"
    ),
)
@with_scope_options
def export(
    ctx: typer.Context,
    scope_args: KeyFilter,
    key: KeyOpt = None,
    store: StoreOpt = None,
    file: Annotated[
        Optional[Path],
        typer.Option(
            "--file", metavar="PATH", help="Write to PATH (complete or not at all: a temporary file, then renamed)."
        ),
    ] = None,
) -> None:
    """Write keys as JSON Lines, one key per line.

    Each line has the key's scope, value, updated_at and expires_at; assets are named by name and uri.
    Takes the filters of list and keeps its order. Writes to stdout unless --file;
    `statestore import` reads it back."""
    from statestore_cli import transfer

    filt = as_filter(scope_args, store, key)
    settings = _settings(ctx)
    if file is None:
        summary = transfer.write_export(settings, filt, sys.stdout)
    else:
        summary = transfer.export_file(settings, filt, file)
    Output.choose("plain").export_summary(summary, "stdout" if file is None else str(file))


@app.command(
    "import",
    epilog=_examples(
        "import --dry-run /backup/statestore-2026-11-30.jsonl",
        "import /backup/statestore-2026-11-30.jsonl",
        "--conn postgresql+psycopg://airflow@db/airflow export | statestore import -",
    ),
)
def import_(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(metavar="FILE", help="JSON Lines from `statestore export`; - reads stdin.")],
    batch_size: Annotated[
        int,
        typer.Option("--batch-size", min=1, max=_MAX_IMPORT_BATCH, metavar="N", help="Keys per transaction."),
    ] = 1000,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check every line against the database; write nothing.")
    ] = False,
    output: OutputOpt = OutputMode.auto,
) -> None:
    """Upsert keys from JSON Lines, keeping their timestamps.

    One transaction per batch. A bad line stops the import before its batch is written;
    earlier batches stay (the error says which lines): run --dry-run first for all or nothing.
    On a standalone store missing dag runs and assets are created; an Airflow database must have them.
    The summary goes to stderr (-o json: to stdout)."""
    from statestore_cli import transfer

    out = _output(output)
    settings = _settings(ctx)
    try:
        stream = sys.stdin.buffer if source == "-" else open(source, "rb")  # noqa: SIM115  (closed below)
    except OSError as exc:
        raise InvalidInputError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        summary = transfer.import_records(settings, stream, batch_size=batch_size, dry_run=dry_run)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    out.import_summary(summary, "stdin" if source == "-" else source)


# -- clean ------------------------------------------------------------------------------------------
@app.command(
    "clean",
    epilog=_examples("clean --dry-run", "clean --batch-size 10000 --max-runtime 2h --exclusive", "clean -o json"),
)
def clean(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")] = False,
    batch_size: Annotated[
        Optional[int],
        typer.Option(
            "--batch-size",
            min=0,
            metavar="N",
            help="Rows per committed batch; 0 = one statement. "
            f"Default: {_section('state_store')} state_cleanup_batch_size (0 unless configured).",
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="With --dry-run on a terminal: list every row, not the first 100.")
    ] = False,
    lock_timeout: Annotated[
        str,
        typer.Option(
            "--lock-timeout", metavar="DURATION", help="Give up when a lock is not granted within this time (30s, 2m)."
        ),
    ] = "30s",
    statement_timeout: Annotated[
        Optional[str],
        typer.Option(
            "--statement-timeout", metavar="DURATION", help="Cancel one statement after this long (default: none)."
        ),
    ] = None,
    max_runtime: Annotated[
        Optional[str],
        typer.Option(
            "--max-runtime",
            metavar="DURATION",
            help="Start no new batch after this long (e.g. 10m); exit 4 if not done.",
        ),
    ] = None,
    exclusive: Annotated[
        bool, typer.Option("--exclusive", help="Refuse to start while another --exclusive clean runs on the database.")
    ] = False,
    older_than: Annotated[
        Optional[str],
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Only keys that expired at least this long ago (e.g. 1d): a grace window for retries. "
            f"Default: {_section('state_store')} state_cleanup_older_than (0 unless configured).",
        ),
    ] = None,
    metrics_file: Annotated[
        Optional[Path],
        typer.Option(
            "--metrics-file",
            metavar="PATH",
            help="Write Prometheus metrics of the run here (node-exporter textfile collector), "
            "also when it fails or stops early.",
        ),
    ] = None,
    fail_on_skip: Annotated[
        bool,
        typer.Option("--fail-on-skip", help=f"With a custom {_section('state_store')} backend, exit 5 instead of 0."),
    ] = False,
    backend_cleanup: Annotated[
        bool,
        typer.Option(
            "--backend-cleanup", help=f"Run the custom {_section('state_store')} backend's cleanup() and report it."
        ),
    ] = False,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> Optional[Outcome]:
    """Delete expired task keys.

    Deletes task keys whose expires_at is before now (minus --older-than);
    asset keys and keys that never expire stay.
    Ctrl-C stops after the current batch (exit 130), SIGTERM too (exit 143). A custom backend is
    skipped with a message: exit 0, or 5 with --fail-on-skip; --backend-cleanup runs its own cleanup() instead."""
    if batch_size is not None and batch_size > _MAX_BATCH_SIZE:
        raise InvalidInputError(f"--batch-size {batch_size} is too large; the largest is {_MAX_BATCH_SIZE}")
    grace = None if older_than is None else parse_age(older_than, "--older-than")
    out = _output(output, header)
    if backend_cleanup:
        _backend_cleanup(ctx, out, dry_run, older_than, metrics_file)
        return None
    if dry_run:
        if metrics_file is not None:
            raise InvalidInputError(
                "--metrics-file records what a clean deleted and a --dry-run deletes nothing; drop one of them"
            )
        skipped = _clean_dry_run(_settings(ctx), out, grace, show_all)
        return None if skipped is None else _skipped(skipped, fail_on_skip)
    timeouts = Timeouts(
        lock_seconds=_seconds(lock_timeout, "--lock-timeout"),
        statement_seconds=None if statement_timeout is None else _seconds(statement_timeout, "--statement-timeout"),
    )
    runtime = None if max_runtime is None else _seconds(max_runtime, "--max-runtime")
    recorder = None
    if metrics_file is not None:
        from statestore_cli.metrics import CleanRecorder

        recorder = CleanRecorder(metrics_file)  # an unwritable path fails here, before anything is deleted
    try:
        result, remaining = _clean_run(ctx, out, batch_size, grace, timeouts, runtime, exclusive, recorder)
    except BaseException as exc:
        if recorder is not None:
            _record_failure(recorder, exc, out)
        raise
    # The metrics first: a report that cannot be shown (a closed pipe) must not cost the monitoring its file.
    unwritten = _record(recorder, result, remaining, EXIT_SKIPPED if fail_on_skip else EXIT_OK)
    if isinstance(result, str):
        out.clean_skipped(result, dry_run=False)
    else:
        decided(ctx, result)  # the deletion is done: a reader closing the pipe does not change its exit code
        out.clean_report(result)
    if unwritten is not None:
        raise unwritten  # the clean is done; exit 3 tells the scheduler its monitoring is stale
    # a clean stopped early exits with its reason's code; a skip with 5 under --fail-on-skip
    return _skipped(result, fail_on_skip) if isinstance(result, str) else result


def _skipped(reason: str, fail_on_skip: bool) -> Outcome:
    from statestore_cli import commands

    return commands.CleanSkipped(reason, fail_on_skip)


def _backend_cleanup(
    ctx: typer.Context, out: Output, dry_run: bool, older_than: Optional[str], metrics_file: Optional[Path]
) -> None:
    from statestore_cli import commands

    for given, flag in (
        (dry_run, "--dry-run"),
        (older_than is not None, "--older-than"),
        (metrics_file, "--metrics-file"),
    ):
        if given:
            raise InvalidInputError(
                f"--backend-cleanup runs the backend's own cleanup(), which takes no {flag}; drop it"
            )
    out.backend_cleanup(commands.backend_cleanup(_settings(ctx)))


def _clean_dry_run(settings: Settings, out: Output, grace: Optional[timedelta], show_all: bool) -> Optional[str]:
    """Show what a clean would delete; returns the reason when a custom backend makes it skip."""
    from statestore_cli import commands

    now = utcnow()
    plan = commands.plan_clean(settings, now, grace)
    if plan.skipped_reason:
        out.clean_skipped(plan.skipped_reason, dry_run=True)
        return plan.skipped_reason
    total = commands.count_expired_keys(settings, now, grace) if out.shows_progress else None
    out.clean_plan(plan, limit=None if show_all else 100, total=total)
    return None


def _clean_run(
    ctx: typer.Context,
    out: Output,
    batch_size: Optional[int],
    grace: Optional[timedelta],
    timeouts: Timeouts,
    runtime: Optional[float],
    exclusive: bool,
    recorder: Optional["CleanRecorder"],
) -> tuple["CleanReport | str", Optional[int]]:
    """The clean itself, and (for ``--metrics-file``) how many expired keys it left: not counted after
    a signal, which asks for a quick exit."""
    from statestore_cli import commands
    from statestore_cli.cleanup import CleanControl
    from statestore_cli.errors import StopReason

    settings = _settings(ctx)  # inside the recorded run: a broken config is a failed clean too
    now = utcnow()
    deadline = None if runtime is None else time.monotonic() + runtime
    total = commands.count_expired_keys(settings, now, grace) if out.shows_progress else None
    with StopOnSignal() as stop:
        with out.progress("deleting expired keys", total) as advance:
            on_progress = advance if recorder is None else _both(advance, recorder.on_progress)
            # Until the clean is connected a signal stops it at once; from then on, after the current batch.
            control = CleanControl(timeouts, exclusive, deadline, stop.reason, on_progress, on_connected=stop.defer)
            result = commands.clean(settings, batch_size, now=now, control=control, older_than=grace)
        if recorder is None or isinstance(result, str):
            return result, None
        if result.stopped in (StopReason.INTERRUPTED, StopReason.TERMINATED):
            return result, None
        try:
            return result, commands.count_expired_keys(settings, now, grace)
        except StateStoreError as exc:
            out.note(f"--metrics-file: the expired keys left were not counted: {message(exc)}")
            return result, None


def _both(*calls: Callable[[int], None]) -> Callable[[int], None]:
    def call(done: int) -> None:
        for each in calls:
            each(done)

    return call


def _record(
    recorder: Optional["CleanRecorder"], result: "CleanReport | str", remaining: Optional[int], skip_code: int
) -> Optional[StateStoreError]:
    """Write the metrics of a clean that ended (done, skipped or stopped early); the error when it cannot."""
    if recorder is None:
        return None
    try:
        if isinstance(result, str):
            recorder.finish(skip_code)
        else:
            recorder.finish(result.exit_code, rows_deleted=result.deleted, batches=result.batches, remaining=remaining)
    except StateStoreError as exc:
        return exc
    return None


def _record_failure(recorder: "CleanRecorder", exc: BaseException, out: Output) -> None:
    """Write the metrics of a clean that failed; the failure itself is what the user hears about."""
    from statestore_cli.metrics import exit_status_of

    try:
        recorder.finish(exit_status_of(exc))
    except StateStoreError as write_error:
        out.note(message(write_error))


_MAX_BATCH_SIZE = 2_147_483_647  # the widest INTEGER every engine takes in a LIMIT


def _seconds(text: str, option: str) -> float:
    return parse_duration(text, option).total_seconds()


# -- backends ---------------------------------------------------------------------------------------
@app.command(
    "orphans",
    epilog=_examples("orphans", "orphans --older-than 7d -o json", "orphans --delete --older-than 7d"),
)
def orphans(
    ctx: typer.Context,
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete the orphans at least --older-than old (needs --older-than).")
    ] = False,
    older_than: Annotated[
        Optional[str],
        typer.Option("--older-than", metavar="DURATION", help="Only orphans at least this old (7d, 12h)."),
    ] = None,
    grace: Annotated[
        str,
        typer.Option("--grace", metavar="DURATION", help="Younger objects may be writes in flight: never deleted."),
    ] = "1h",
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> Outcome:
    """List objects of the worker-side backend that no database row points to.

    Needs a worker-side backend that implements list_refs() (and delete_ref() for --delete).
    Objects younger than --grace are shown but never deleted. Exit 3 if a delete failed."""
    from statestore_cli.orphans import find_orphans

    out = _output(output, header)
    report = find_orphans(
        _settings(ctx),
        utcnow(),
        grace=parse_duration(grace, "--grace"),
        older_than=None if older_than is None else parse_duration(older_than, "--older-than"),
        delete=delete,
    )
    decided(ctx, report)  # deletions are done: a reader closing the pipe does not change the exit code
    out.orphans(report)
    return report


@backend_app.command("check", epilog=_examples("backend check", "backend check -o json"))
def backend_check(ctx: typer.Context, output: OutputOpt = OutputMode.auto, header: HeaderOpt = False) -> Outcome:
    """Check the configured custom backends as Airflow uses them.

    Checks the custom store backend and the worker-side backend: the class loads and is complete,
    references are deterministic and distinct, values round-trip, delete and clear work, the async
    methods do not block the event loop, JSON null is refused. Writes and removes keys of the dag
    and asset named statestore_backend_check. Exit 0 only when every check passes, else 3."""
    from statestore_cli.backend_check import check_backends

    out = _output(output, header)
    report = check_backends(_settings(ctx))
    decided(ctx, report)
    out.backend_check(report)
    return report


# -- assets and runs --------------------------------------------------------------------------------
@assets_app.command(
    "sweep", epilog=_examples("assets sweep --dry-run", "assets sweep --batch-size 1000", "assets sweep -o json")
)
def assets_sweep(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")] = False,
    batch_size: Annotated[
        Optional[int],
        typer.Option(
            "--batch-size",
            min=0,
            max=_MAX_BATCH_SIZE,
            metavar="N",
            help="Keys per committed batch; 0 = one statement per asset. "
            f"Default: {_section('state_store')} state_cleanup_batch_size.",
        ),
    ] = None,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> None:
    """Delete the keys of assets that are no longer active.

    An asset is inactive when it has no asset_active row (Airflow removes that row when no dag
    uses the asset any more). Active assets' keys stay. Listed and deleted grouped by asset."""
    from statestore_cli import lifecycle

    out = _output(output, header)
    settings = _settings(ctx)
    if dry_run:
        out.sweep_plan(lifecycle.plan_sweep(settings))
        return
    out.sweep_report(lifecycle.sweep(settings, batch_size))


@assets_app.command("delete", epilog=_examples("assets delete --asset-name orders", "assets delete --asset-id 7 --yes"))
def assets_delete(
    ctx: typer.Context,
    asset_name: Annotated[Optional[str], typer.Option("--asset-name", help="Asset name.")] = None,
    asset_uri: Annotated[Optional[str], typer.Option("--asset-uri", help="Asset URI.")] = None,
    asset_id: Annotated[Optional[int], typer.Option("--asset-id", help="Asset id (as in the asset table).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete an asset of a standalone store; its keys go with it.

    Active or not. Refused on an Airflow database (exit 2): there Airflow owns its assets.
    Asks on a terminal; anywhere else it needs --yes."""
    from statestore_cli import lifecycle
    from statestore_cli.scopes import AssetScope

    settings = _settings(ctx)
    if asset_name is None and asset_uri is None and asset_id is None:
        raise InvalidInputError("assets delete needs --asset-name, --asset-uri or --asset-id")
    scope = AssetScope(asset_id=asset_id, name=asset_name, uri=asset_uri)
    lifecycle.require_standalone(settings, "delete assets")
    found = lifecycle.find_asset(settings, scope)
    where = safe_text(f"asset_id={found.asset_id} name={found.name} uri={found.uri}")
    _confirm_delete(yes, "assets delete deletes an asset", f"Delete {where} and its {_keys(found.keys)}?")
    gone = lifecycle.delete_asset(settings, scope)
    Output.choose().line(f"deleted {where} and its {_keys(gone.keys)}")


@runs_app.command("delete", epilog=_examples("runs delete --dag-id etl --run-id manual__1 --yes"))
def runs_delete(
    ctx: typer.Context,
    dag_id: Annotated[str, typer.Option("--dag-id", help="DAG id of the run.")],
    run_id: Annotated[str, typer.Option("--run-id", help="Run id.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a dag run of a standalone store; its task keys go with it.

    A run that does not exist exits 1. Refused on an Airflow database (exit 2): there Airflow owns
    its runs. Asks on a terminal; anywhere else it needs --yes."""
    from statestore_cli import lifecycle
    from statestore_cli.errors import NotFoundError

    settings = _settings(ctx)
    where = safe_text(lifecycle.describe_run_or_dag(dag_id, run_id))
    lifecycle.require_standalone(settings, "delete dag runs")
    keys = lifecycle.count_run_keys(settings, dag_id, run_id)
    if keys is None:
        raise NotFoundError(f"no dag run {where}")
    _confirm_delete(yes, "runs delete deletes a run", f"Delete the dag run {where} and its {_keys(keys)}?")
    removed = lifecycle.delete_run(settings, dag_id, run_id)
    Output.choose().line(f"deleted the dag run {where} and its {_keys(removed)}")


# -- config -----------------------------------------------------------------------------------------
@config_app.command("show", epilog=_examples("config show", "--config /opt/airflow/airflow.cfg config show -o json"))
def config_show(ctx: typer.Context, output: OutputOpt = OutputMode.auto, header: HeaderOpt = False) -> None:
    """Show every effective setting and where it came from.

    Secrets are masked."""
    from statestore_cli import commands

    out = _output(output, header)
    settings = _settings(ctx)
    config_file = str(settings.config_file) if settings.config_file else None
    searched = settings.config_search.worded(FLAGS) if settings.config_search else None
    out.config(commands.config_rows(settings), config_file, str(settings.airflow_home), searched)
