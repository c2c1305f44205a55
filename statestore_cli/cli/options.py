"""The options several commands share, as annotated types (``output: OutputOpt = OutputMode.auto``),
and what turns their values into what the commands use."""

from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from statestore_cli.cli.context import take_lock_timeout
from statestore_cli.cli.help_text import section
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.render import Output
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.retention import parse_duration

MAX_BATCH_SIZE = 2_147_483_647  # the widest INTEGER every engine takes in a LIMIT
MAX_IMPORT_BATCH_SIZE = 100_000  # ops.transfer.MAX_BATCH_SIZE, without importing SQLAlchemy for --help

# The filters `list` and `stats` take beside the scope options.
KeyOpt = Annotated[Optional[str], typer.Option("--key", help="Only this key.")]
STORES = ("task", "dag_run", "asset")


def complete_store(incomplete: str) -> list[str]:
    """What shell completion offers after --store (not file names)."""
    return [name for name in STORES if name.startswith(incomplete)]


StoreOpt = Annotated[
    Optional[str],
    typer.Option("--store", help="task, dag_run (Airflow 3.4) or asset (default: all).", autocompletion=complete_store),
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
# Every command that writes (set, delete, clear, import, db init, runs delete, assets delete,
# assets sweep, clean): read-only commands wait for no row lock.
LockTimeoutOpt = Annotated[
    Optional[str],
    typer.Option(
        "--lock-timeout",
        metavar="DURATION",
        callback=take_lock_timeout,
        help="Give up (exit 3) when a lock another session holds is not granted within this time (5s, 2m). "
        f"Default: {section('state_store')} lock_timeout (30s unless configured).",
    ),
]


def batch_size_option(help: str, *, smallest: int = 0, largest: int = MAX_BATCH_SIZE) -> Any:
    """``--batch-size N`` of every command that writes in batches (clean, clear, assets sweep, import), with
    its own help. click refuses a value below ``smallest`` or not a number; one over ``largest`` is refused
    as the command starts, before anything is read or written, in one wording for every command."""
    return typer.Option("--batch-size", min=smallest, metavar="N", callback=_at_most(largest), help=help)


def _at_most(largest: int) -> Callable[[Optional[int]], Optional[int]]:
    def check(value: Optional[int]) -> Optional[int]:
        if value is not None and value > largest:
            raise InvalidInputError(f"--batch-size {value} is too large; the largest is {largest}")
        return value

    return check


def choose_output(requested: OutputMode, header: bool = False) -> Output:
    """The output of a command given ``--output`` (and ``--header``)."""
    return Output.choose(requested.value, header)


def seconds(text: str, option: str) -> float:
    """A duration option's value (``90s``, ``2h``) in seconds; exit 2 naming ``option`` when it is none."""
    return parse_duration(text, option).total_seconds()
