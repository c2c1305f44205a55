"""The ``statestore`` command line: each command resolves the settings, calls one library function
and hands the result to the render layer. Errors become a message and an exit code in one place:
``StateStoreGroup`` hands every ``StateStoreError`` to ``cli.failure``; a command whose result must not
exit 0 (a clean stopped early) returns it as an ``Outcome``, and the group exits with its code."""

import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

from statestore_cli import __version__
from statestore_cli.cli.failure import FLAGS, warn
from statestore_cli.cli.group import StateStoreGroup
from statestore_cli.cli.modes import OutputMode
from statestore_cli.cli.render import Output
from statestore_cli.config import Settings, load_settings
from statestore_cli.errors import (
    InterruptedByUser,
    InvalidInputError,
    NotConfirmedError,
    StateStoreError,
)
from statestore_cli.retention import parse_duration

# Help is rich on a terminal and plain (click's layout) into a pipe or a file, as command output is:
# typer's rich help layer loads rich.markdown, rich.syntax and pygments, a third of a `--help` run.
_RICH_HELP = sys.stdout.isatty()


def _section(name: str) -> str:
    """A config section as help shows it: rich help reads [...] as markup."""
    return f"\\[{name}]" if _RICH_HELP else f"[{name}]"


_EXAMPLE_WIDTH = 76  # an example line fits an 80-column terminal with rich help's margins


def _examples(*lines: str) -> str:
    """A help epilog of example command lines, each on its own line in plain and rich help; a long one
    is continued on the next line with a backslash, between words and never inside a quoted one, so it
    neither wraps in the middle of its JSON nor stops being a command to paste."""
    body = "Examples:\n" + "\n".join(_example(f"statestore {line}") for line in lines)
    return body if _RICH_HELP else "\b\n" + body  # \b: click keeps the lines as they are


def _example(command: str) -> str:
    words = re.findall(r"(?:'[^']*'|\"[^\"]*\"|\S)+", command)  # a quoted word ('{"id": 1}') is one word
    for at in range(len(words) - 2, -1, -1):  # an option and its value stay on one line (-o json)
        if words[at].startswith("-") and not words[at + 1].startswith("-") and "=" not in words[at]:
            words[at : at + 2] = [f"{words[at]} {words[at + 1]}"]
    lines, line = [], "  "
    for at, word in enumerate(words):
        continued = 2 if at < len(words) - 1 else 0  # room for " \\" unless it is the last word
        if line.strip() and len(line) + 1 + len(word) + continued > _EXAMPLE_WIDTH:
            lines.append(line + " \\")
            line = "      "
        line += ("" if not line.strip() else " ") + word
    return "\n".join([*lines, line])


def _reflow(doc: str) -> str:
    """A docstring's paragraphs as one line each: rich help keeps the line breaks of the source, which
    then fall anywhere in the terminal's lines; the terminal's width decides alone."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


_DATABASE = _section("database")
_TASK = "--dag-id etl --run-id manual__1 --task-id submit"

app = typer.Typer(
    cls=StateStoreGroup,
    name="statestore",
    help="Read, write and garbage-collect Airflow's task and asset state store.\n\n"
    "Root options (--config, --conn, --connect-timeout, --debug, --version) go before the command; "
    "the command's own options after it.",
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
    lock_timeout: Optional[str] = None  # a writing command's --lock-timeout (``LockTimeoutOpt``)
    _settings: Optional[Settings] = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(
                self.config_path,
                self.conn,
                connect_timeout_override=self.connect_timeout,
                lock_timeout_override=self.lock_timeout,
            )
            for note in self._settings.warnings:  # a typo in an option name must not pass unnoticed
                warn(note.worded(FLAGS))
        return self._settings


# The filters `list` and `stats` take beside the scope options.
KeyOpt = Annotated[Optional[str], typer.Option("--key", help="Only this key.")]
STORES = ("task", "dag_run", "asset")


def _complete_store(incomplete: str) -> list[str]:
    """What shell completion offers after --store (not file names)."""
    return [name for name in STORES if name.startswith(incomplete)]


StoreOpt = Annotated[
    Optional[str],
    typer.Option(
        "--store", help="task, dag_run (Airflow 3.4) or asset (default: all).", autocompletion=_complete_store
    ),
]
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
# The rehearsal of a command that deletes (clean, assets sweep).
DeleteDryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")]
MetricsLabelOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--metrics-label",
        metavar="NAME=VAL",
        help="With --metrics-file: a label on every sample (repeatable), e.g. region=eu-west-1; "
        "database=NAME replaces the default (the URL's host/database, or the SQLite file's name).",
    ),
]


def _metrics_labels(ctx: typer.Context, given: Optional[list[str]]) -> dict[str, str]:
    """The labels of a metrics file: the pairs ``given`` (checked first: a bad one writes nothing), and
    the ``database`` the configured URL names unless one of them does. A configuration that cannot be
    read names no database (``unknown``); the run fails on it and records that."""
    from statestore_cli.metrics import DATABASE, database_label, metric_labels

    labels = metric_labels(given or [], "unknown")
    if any(pair.partition("=")[0] == DATABASE for pair in given or []):
        return labels
    try:
        database = database_label(_settings(ctx).sql_alchemy_conn)
    except StateStoreError:
        database = "unknown"
    return {**labels, DATABASE: database}


def _take_lock_timeout(ctx: typer.Context, value: Optional[str]) -> Optional[str]:
    """Hand a writing command's --lock-timeout to the settings as it is parsed: however the command
    reaches them, they are read with it (and check it, exit 2 when it is no duration)."""
    state = ctx.find_root().obj
    if value is not None and isinstance(state, CliState):  # not set while the shell completes a word
        state.lock_timeout = value
    return value


# Every command that writes (set, delete, clear, import, db init, runs delete, assets delete,
# assets sweep, clean): read-only commands wait for no row lock.
LockTimeoutOpt = Annotated[
    Optional[str],
    typer.Option(
        "--lock-timeout",
        metavar="DURATION",
        callback=_take_lock_timeout,
        help="Give up (exit 3) when a lock another session holds is not granted within this time (5s, 2m). "
        f"Default: {_section('state_store')} lock_timeout (30s unless configured).",
    ),
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


# -- helpers shared by the command modules --------------------------------------------------------
_MAX_BATCH_SIZE = 2_147_483_647  # the widest INTEGER every engine takes in a LIMIT


def _seconds(text: str, option: str) -> float:
    return parse_duration(text, option).total_seconds()


def _confirm_delete(yes: bool, action: str, question: str) -> None:
    """The confirmation rule of every deleting command: --yes, or y/yes typed at a terminal."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InvalidInputError(f"{action} and stdin is not a terminal to confirm on; pass --yes")
    if not _confirm(f"{question} [y/N] "):
        raise NotConfirmedError("nothing deleted (answered no)")


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
        raise NotConfirmedError("nothing deleted (no answer: end of input)")
    return answer.strip().lower() in ("y", "yes")


# The command modules register their commands on the apps above when imported; typer lists the
# commands in registration order, so this order is the order --help shows.
# isort: off
from statestore_cli.cli import db_config_commands  # noqa: E402, F401
from statestore_cli.cli import keys_commands  # noqa: E402, F401
from statestore_cli.cli import transfer_commands  # noqa: E402, F401
from statestore_cli.cli import clean_command  # noqa: E402, F401
from statestore_cli.cli import backend_commands  # noqa: E402, F401
from statestore_cli.cli import lifecycle_commands  # noqa: E402, F401
# isort: on

for _typer in (app, db_app, backend_app, config_app, assets_app, runs_app):
    for _command in _typer.registered_commands:
        if _command.callback is not None and _command.callback.__doc__:
            _command.callback.__doc__ = _reflow(_command.callback.__doc__)
