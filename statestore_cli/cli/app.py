"""The ``statestore`` command line: each command resolves the settings, calls one library function
and hands the result to the render layer. Errors become a message and an exit code in one place:
``StateStoreGroup`` hands every ``StateStoreError`` to ``cli.failure``; a command whose result must not
exit 0 (a clean stopped early) returns it as an ``Outcome``, and the group exits with its code."""

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer
from typer.core import TyperGroup

from statestore_cli import __version__
from statestore_cli.cli.failure import report, report_error
from statestore_cli.cli.modes import OutputMode
from statestore_cli.cli.render import Output
from statestore_cli.cli.safe_text import safe_text
from statestore_cli.cli.scope_options import as_filter, scope_of, with_scope_options
from statestore_cli.cli.stopping import StopOnSignal
from statestore_cli.cli.values import read_value
from statestore_cli.config import Settings, load_settings
from statestore_cli.entries import KeyFilter, Timeouts
from statestore_cli.errors import (
    EXIT_OK,
    EXIT_USAGE,
    InvalidInputError,
    NotConfirmedError,
    Outcome,
    StateStoreError,
    first_line,
)
from statestore_cli.retention import parse_duration, parse_retention, utcnow

try:  # typer >= 0.24 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef, import-not-found, unused-ignore]

_NoArgsIsHelp = getattr(click_exceptions, "NoArgsIsHelpError", None)


class StateStoreGroup(TyperGroup):
    """Turns every error into one line on stderr and a documented exit code (see the README), and a
    command's ``Outcome`` into its exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except StateStoreError as exc:
            if ctx.params.get("debug"):
                raise
            raise _Reported(exc) from None
        except (click_exceptions.ClickException, typer.Exit, typer.Abort):
            raise
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
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _Reported as exc:
            sys.exit(report_error(exc.error))
        except click_exceptions.UsageError as exc:
            if _NoArgsIsHelp is not None and isinstance(exc, _NoArgsIsHelp):
                sys.stdout.write(exc.format_message())  # rich help is printed already; plain help is here
                sys.exit(0)
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _fail(f"{exc.format_message()}{hint}", EXIT_USAGE)
        except click_exceptions.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except typer.Abort:
            _fail("aborted", 1)
        code = _exit_code(result)
        if standalone_mode:
            sys.exit(code)
        return code


def _exit_code(result: object) -> int:
    """A command's ``Outcome`` decides its exit code; ``typer.Exit`` (``--version``) gives an int."""
    if isinstance(result, Outcome):
        return result.exit_code
    return result if isinstance(result, int) else EXIT_OK


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
_DATABASE = "\\[database]" if _RICH_HELP else "[database]"  # rich help reads [...] as markup

app = typer.Typer(
    cls=StateStoreGroup,
    name="statestore",
    help="Manage Apache Airflow's task and asset state store: read, write and garbage-collect keys.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion and _STATESTORE_COMPLETE
    rich_markup_mode="rich" if _RICH_HELP else None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(help="Create and check the state store schema.", no_args_is_help=True)
config_app = typer.Typer(help="Show the effective configuration.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")


@dataclass
class CliState:
    config_path: Optional[Path] = None
    conn: Optional[str] = None
    debug: bool = False
    _settings: Optional[Settings] = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config_path, self.conn)
        return self._settings


OutputOpt = Annotated[
    OutputMode,
    typer.Option("--output", "-o", help="auto (tables on a terminal, plain lines otherwise), table, plain or json."),
]


def _output(requested: OutputMode) -> Output:
    return Output.choose(requested.value)


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
            "--config", help="airflow.cfg-style file (default: $AIRFLOW_CONFIG, else $AIRFLOW_HOME/airflow.cfg)."
        ),
    ] = None,
    conn: Annotated[
        Optional[str],
        typer.Option("--conn", help=f"SQLAlchemy URL of the database; overrides {_DATABASE} sql_alchemy_conn."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show the Python traceback of an error.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    ctx.obj = CliState(config_path=config, conn=conn, debug=debug)


# -- db ---------------------------------------------------------------------------------------------
@db_app.command("init")
def db_init(ctx: typer.Context, output: OutputOpt = OutputMode.auto) -> None:
    """Create the state store schema on the configured database (idempotent)."""
    from statestore_cli import commands  # here, not at the top: `--help` need not load SQLAlchemy

    out = _output(output)
    out.db_report(commands.db_init(_settings(ctx)), created=True)


@db_app.command("check")
def db_check(ctx: typer.Context, output: OutputOpt = OutputMode.auto) -> None:
    """Connect and report engine, schema state and mode; exit 0 only when the store is usable."""
    from statestore_cli import commands

    out = _output(output)
    checked = commands.db_check(_settings(ctx))
    out.db_report(checked)
    problem = checked.problem()
    if problem is not None:
        raise problem


# -- keys -------------------------------------------------------------------------------------------
@app.command("get")
@with_scope_options
def get(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="The key.")],
    scope_args: KeyFilter,
    output: OutputOpt = OutputMode.auto,
) -> None:
    """Print a key's value as JSON; a missing key exits 1."""
    from statestore_cli import commands

    out = _output(output)
    entry = commands.get_entry(_settings(ctx), scope_of(scope_args), key)
    out.value(entry)


@app.command("set")
@with_scope_options
def set_(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="The key.")],
    value: Annotated[str, typer.Argument(help="A JSON value, or - to read it from stdin.")],
    scope_args: KeyFilter,
    retention: Annotated[
        Optional[str],
        typer.Option("--retention", help="never, or a duration: 90s, 15m, 6h, 7d, 1d12h, P7D (task keys only)."),
    ] = None,
    string: Annotated[
        bool, typer.Option("--string", help="Store VALUE as a JSON string instead of parsing it.")
    ] = False,
) -> None:
    """Write a key (insert or replace)."""
    from statestore_cli import commands

    scope = scope_of(scope_args)
    parsed_retention = parse_retention(retention) if retention is not None else None
    document = read_value(value, as_string=string)
    expires_at = commands.set_value(_settings(ctx), scope, key, document, parsed_retention)
    expiry = "never expires" if expires_at is None else f"expires {expires_at:%Y-%m-%d %H:%M:%S} UTC"
    Output.choose().line(f"set '{safe_text(key)}' for {safe_text(scope.describe())} ({expiry})")


@app.command("delete")
@with_scope_options
def delete(ctx: typer.Context, key: Annotated[str, typer.Argument(help="The key.")], scope_args: KeyFilter) -> None:
    """Delete one key; a key that is not there is not an error."""
    from statestore_cli import commands

    scope = scope_of(scope_args)
    removed = commands.delete_key(_settings(ctx), scope, key)
    what = "deleted" if removed != 0 else "no such key, nothing deleted:"
    Output.choose().line(f"{what} '{safe_text(key)}' for {safe_text(scope.describe())}")


@app.command("clear")
@with_scope_options
def clear(
    ctx: typer.Context,
    scope_args: KeyFilter,
    all_map_indices: Annotated[
        bool, typer.Option("--all-map-indices", help="Clear every map index of the task.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every key of a scope; asks first on a terminal, needs --yes otherwise."""
    from statestore_cli import commands

    scope = scope_of(scope_args)
    settings = _settings(ctx)
    where = safe_text(scope.describe()) + (" (all map indices)" if all_map_indices else "")
    if not yes:
        if not sys.stdin.isatty():
            raise InvalidInputError("clear deletes keys and stdin is not a terminal to confirm on; pass --yes")
        count = commands.count_keys(settings, scope, all_map_indices=all_map_indices)
        what = "all keys" if count is None else f"{count} key{'s' if count != 1 else ''}"
        if not typer.confirm(f"Delete {what} of {where}?", default=False):
            raise NotConfirmedError("nothing deleted (not confirmed)")
    removed = commands.clear_scope(settings, scope, all_map_indices=all_map_indices)
    what = "keys" if removed is None else f"{removed} key{'s' if removed != 1 else ''}"
    Output.choose().line(f"deleted {what} of {where}")


@app.command("list")
@with_scope_options
def list_(
    ctx: typer.Context,
    scope_args: KeyFilter,
    key: Annotated[Optional[str], typer.Option("--key", help="Only this key.")] = None,
    store: Annotated[Optional[str], typer.Option("--store", help="task or asset (default: both).")] = None,
    limit: Annotated[
        Optional[int], typer.Option("--limit", min=0, help="Show at most N keys (after --offset).", metavar="N")
    ] = None,
    offset: Annotated[
        int, typer.Option("--offset", min=0, help="Skip the first N keys of the listing's order.", metavar="N")
    ] = 0,
    output: OutputOpt = OutputMode.auto,
) -> None:
    """List keys with their scope, updated_at and expires_at, ordered by scope and key; scope options filter."""
    from statestore_cli import commands

    out = _output(output)
    if store not in (None, "task", "asset"):
        raise InvalidInputError(f"unknown --store {store!r}: use task or asset")
    filt = as_filter(scope_args, store, key)
    out.entries(commands.list_entries(_settings(ctx), filt, limit=limit, offset=offset))


@app.command("stats")
@with_scope_options
def stats(
    ctx: typer.Context,
    scope_args: KeyFilter,
    key: Annotated[Optional[str], typer.Option("--key", help="Only this key.")] = None,
    store: Annotated[Optional[str], typer.Option("--store", help="task or asset (default: both).")] = None,
    output: OutputOpt = OutputMode.auto,
) -> None:
    """Count keys per store, by expiry, per dag and per asset; on a terminal, chart when task keys expire."""
    from statestore_cli import commands

    out = _output(output)
    if store not in (None, "task", "asset"):
        raise InvalidInputError(f"unknown --store {store!r}: use task or asset")
    out.stats(commands.stats(_settings(ctx), as_filter(scope_args, store, key)))


# -- clean ------------------------------------------------------------------------------------------
@app.command("clean")
def clean(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")] = False,
    batch_size: Annotated[
        Optional[int],
        typer.Option(
            "--batch-size",
            min=0,
            max=2_147_483_647,
            help="Rows per committed batch; 0 = one statement (default: state_cleanup_batch_size).",
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="With --dry-run on a terminal: list every row, not the first 100.")
    ] = False,
    lock_timeout: Annotated[
        str, typer.Option("--lock-timeout", help="Give up when a lock is not granted within this time (e.g. 30s, 2m).")
    ] = "30s",
    statement_timeout: Annotated[
        Optional[str], typer.Option("--statement-timeout", help="Cancel one statement after this long (default: none).")
    ] = None,
    max_runtime: Annotated[
        Optional[str],
        typer.Option("--max-runtime", help="Start no new batch after this long (e.g. 10m); exit 4 if not done."),
    ] = None,
    exclusive: Annotated[
        bool, typer.Option("--exclusive", help="Refuse to start while another --exclusive clean runs on the database.")
    ] = False,
    output: OutputOpt = OutputMode.auto,
) -> Optional[Outcome]:
    """Delete expired task keys (expires_at before now); asset keys and keys that never expire stay."""
    from statestore_cli import commands
    from statestore_cli.cleanup import CleanControl

    out = _output(output)
    settings = _settings(ctx)
    if dry_run:
        plan = commands.plan_clean(settings)
        if plan.skipped_reason:
            out.clean_skipped(plan.skipped_reason, dry_run=True)
            return None
        total = commands.count_expired_keys(settings, plan.cutoff) if out.shows_progress else None
        out.clean_plan(plan, limit=None if show_all else 100, total=total)
        return None
    timeouts = Timeouts(
        lock_seconds=_seconds(lock_timeout, "--lock-timeout"),
        statement_seconds=None if statement_timeout is None else _seconds(statement_timeout, "--statement-timeout"),
    )
    deadline = None if max_runtime is None else time.monotonic() + _seconds(max_runtime, "--max-runtime")
    cutoff = utcnow()
    total = commands.count_expired_keys(settings, cutoff) if out.shows_progress else None
    with StopOnSignal() as stop, out.progress("deleting expired keys", total) as advance:
        control = CleanControl(timeouts, exclusive, deadline, stop.reason, advance)
        result = commands.clean(settings, batch_size, now=cutoff, control=control)
    if isinstance(result, str):
        out.clean_skipped(result, dry_run=False)
        return None
    out.clean_report(result)
    return result  # a clean stopped early exits with its reason's code


def _seconds(text: str, option: str) -> float:
    return parse_duration(text, option).total_seconds()


# -- config -----------------------------------------------------------------------------------------
@config_app.command("show")
def config_show(ctx: typer.Context, output: OutputOpt = OutputMode.auto) -> None:
    """Show every effective setting and where it came from (secrets masked)."""
    from statestore_cli import commands

    out = _output(output)
    settings = _settings(ctx)
    config_file = str(settings.config_file) if settings.config_file else None
    out.config(commands.config_rows(settings), config_file, str(settings.airflow_home))
