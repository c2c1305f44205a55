"""``export`` and ``import``."""

import sys
from pathlib import Path
from typing import Annotated, BinaryIO, Optional

import typer

from statestore_cli.cli.command_groups import app
from statestore_cli.cli.context import store_of
from statestore_cli.cli.help_text import examples
from statestore_cli.cli.options import (
    MAX_IMPORT_BATCH_SIZE,
    HeaderOpt,
    KeyOpt,
    LockTimeoutOpt,
    OutputOpt,
    StoreOpt,
    batch_size_option,
    choose_output,
)
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.render import Output
from statestore_cli.cli.scope_options import as_filter, with_scope_options
from statestore_cli.errors import (
    InvalidInputError,
    Outcome,
)
from statestore_cli.model.entries import KeyFilter

# -- export and import ------------------------------------------------------------------------------


@app.command(
    "export",
    epilog=examples(
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
    On Airflow 3.4 a task key in a region has its region_id, and dag-run keys are lines of store dag_run.
    Takes the filters of list and keeps its order. Writes to stdout unless --file;
    `statestore import` reads it back."""
    from statestore_cli.ops import transfer

    filt = as_filter(scope_args, store, key)
    opened = store_of(ctx, writes=False)
    out = Output.choose("plain")
    with out.walk_progress(opened, to_stdout=file is None):
        if file is None:
            summary = transfer.write_export(opened, filt, sys.stdout)
        else:
            summary = transfer.export_file(opened, filt, file)
    out.export_summary(summary, "stdout" if file is None else str(file))


@app.command(
    "import",
    epilog=examples(
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
        batch_size_option(
            f"Keys per transaction, at most {MAX_IMPORT_BATCH_SIZE:,}.", smallest=1, largest=MAX_IMPORT_BATCH_SIZE
        ),
    ] = 1000,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check every line against the database; write nothing.")
    ] = False,
    lock_timeout: LockTimeoutOpt = None,
    output: OutputOpt = OutputMode.auto,
) -> None:
    """Upsert keys from JSON Lines, keeping their timestamps.

    One transaction per batch. A bad line stops the import before its batch is written;
    earlier batches stay (the error says which lines): run --dry-run first for all or nothing.
    On a standalone store missing dag runs and assets are created; an Airflow database must have them.
    Keys in a region and dag-run keys need a database with Airflow 3.4's tables.
    The summary goes to stderr (-o json: to stdout)."""
    from statestore_cli.ops import transfer

    out = choose_output(output)
    store = store_of(ctx)
    try:
        stream = sys.stdin.buffer if source == "-" else open(source, "rb")  # noqa: SIM115  (closed below)
    except OSError as exc:
        raise InvalidInputError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        with out.stderr_progress("checking lines" if dry_run else "importing keys", _lines(stream)) as advance:
            summary = transfer.import_records(
                store, stream, batch_size=batch_size, dry_run=dry_run, on_progress=advance
            )
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    out.import_summary(summary, "stdin" if source == "-" else source)


def _lines(stream: BinaryIO) -> int | None:
    """How many lines a regular file holds, for the progress bar's total (a pipe: unknown); only on a
    terminal, where the bar is shown. The file is read once more, at the speed of the disk cache."""
    if not sys.stderr.isatty() or not stream.seekable():
        return None
    count, last = 0, b"\n"
    for chunk in iter(lambda: stream.read(1 << 20), b""):
        count, last = count + chunk.count(b"\n"), chunk
    stream.seek(0)
    return count + (not last.endswith(b"\n"))  # a last line without its line feed


@app.command(
    "diff",
    epilog=examples(
        "diff /backup/statestore-2026-11-30.jsonl",
        "diff --dag-id etl etl.jsonl -o json",
        "--conn postgresql+psycopg://airflow@db/airflow export | statestore diff -",
    ),
)
@with_scope_options
def diff(
    ctx: typer.Context,
    scope_args: KeyFilter,
    source: Annotated[
        str, typer.Argument(metavar="FILE", help="JSON Lines from `statestore export` or a backup; - reads stdin.")
    ],
    key: KeyOpt = None,
    store: StoreOpt = None,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> Outcome:
    """Compare the store with an export file: keys added, removed or changed.

    Added: in the store, not in the file; removed: in the file, not in the store; changed: in both with
    another value (compared as JSON) or expires_at. updated_at and updated_by are not compared.
    Takes the filters of export, applied to both sides. Values are never shown.
    Exit 0 when the two are the same, 1 when they differ (as diff), 2 for a bad file line."""
    from statestore_cli.ops.diff import DiffRun

    out = choose_output(output, header)
    filt = as_filter(scope_args, store, key)
    opened = store_of(ctx, writes=False)
    run = DiffRun(opened, filt, source, sys.stdin.buffer if source == "-" else None)
    with out.walk_progress(opened):  # through the REST API, the store's side walks the task instances
        out.diff(run.differences())
    summary = run.summary()
    out.diff_summary(summary)
    out.api_requests(opened.api_requests())
    return summary
