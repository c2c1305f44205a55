"""``get``, ``set``, ``delete``, ``clear``, ``list`` and ``stats``."""

import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from statestore_cli.cli.backup_option import BackupOpt, backup_sentence, close_backup, name_restore, open_backup
from statestore_cli.cli.command_groups import app
from statestore_cli.cli.confirm import confirm_delete, key_count
from statestore_cli.cli.context import metrics_labels, store_of
from statestore_cli.cli.failure import warn
from statestore_cli.cli.help_text import TASK_EXAMPLE, examples, section
from statestore_cli.cli.options import (
    HeaderOpt,
    KeyOpt,
    LockTimeoutOpt,
    MetricsLabelOpt,
    OutputOpt,
    StoreOpt,
    batch_size_option,
    choose_output,
)
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.render import Output
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.cli.scope_options import as_filter, scope_of, with_scope_options
from statestore_cli.cli.values import read_value
from statestore_cli.errors import (
    InvalidInputError,
)
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.retention import parse_instant, parse_retention
from statestore_cli.model.scopes import StoreScope, TaskScope

if TYPE_CHECKING:  # loaded only when --backup is given, and when the command opens the store
    from statestore_cli.backends.store import Store
    from statestore_cli.ops.backup_file import BackupFile


# -- keys -------------------------------------------------------------------------------------------
@app.command(
    "get",
    epilog=examples(
        f"get {TASK_EXAMPLE} job_id", "get --asset-name orders watermark -o json", f"get {TASK_EXAMPLE} job_id --raw"
    ),
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

    from statestore_cli.backends.accessors import StateReferenceWarning
    from statestore_cli.ops import commands

    out = choose_output(output)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StateReferenceWarning)
        entry = commands.get_entry(store_of(ctx, writes=False), scope_of(scope_args), key, raw=raw)
    for warning in caught:
        if issubclass(warning.category, StateReferenceWarning):
            warn(str(warning.message))
        else:  # not ours to word: shown as Python would have
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    out.value(entry)


@app.command(
    "set",
    epilog=examples(
        f'set {TASK_EXAMPLE} job_id \'{{"id": "j-123"}}\' --retention 6h',
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
            f"Default: {section('state_store')} default_retention_days (30 unless configured).",
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
    lock_timeout: LockTimeoutOpt = None,
) -> None:
    """Write a key (insert or replace).

    Keys may hold any characters, `/` and spaces included; a value is refused when it is JSON null,
    NaN or Infinity, or larger than max_value_storage_bytes (exit 2)."""
    from statestore_cli.ops import commands

    scope = scope_of(scope_args)
    _check_expiry_options(retention, keep_expiry, expires_at, force)
    parsed_retention = parse_retention(retention) if retention is not None else None
    instant = parse_instant(expires_at, "--expires-at") if expires_at is not None else None
    document = read_value(value, as_string=string)
    if keep_expiry:
        commands.replace_value(store_of(ctx), scope, key, document)
        Output.choose().line(f"replaced '{safe_text(key)}' for {safe_text(scope.describe())} (expiry kept)")
        return
    stored: Optional[datetime]
    if instant is not None:
        stored = commands.set_value_until(store_of(ctx), scope, key, document, instant, force=force)
    else:
        stored = commands.set_value(store_of(ctx), scope, key, document, parsed_retention)
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


@app.command("delete", epilog=examples(f"delete {TASK_EXAMPLE} job_id"))
@with_scope_options
def delete(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The key.")],
    scope_args: KeyFilter,
    lock_timeout: LockTimeoutOpt = None,
) -> None:
    """Delete one key.

    A key that is not there is not an error."""
    from statestore_cli.ops import commands

    scope = scope_of(scope_args)
    store = store_of(ctx)
    removed = commands.delete_key(store, scope, key)
    what = "deleted" if removed != 0 else "no such key, nothing deleted:"
    line = f"{what} '{safe_text(key)}' for {safe_text(scope.describe())}"
    if removed == 0:
        line += _elsewhere(store, scope, key)
    Output.choose().line(line)


def _elsewhere(store: "Store", scope: StoreScope, key: Optional[str] = None) -> str:
    """What a delete or clear that found nothing adds when the task's keys are at other map indices."""
    from statestore_cli.model.scopes import at_other_map_indices
    from statestore_cli.ops import commands

    found = commands.keys_elsewhere(store, scope, key)
    if not found or not isinstance(scope, TaskScope):
        return ""
    flags = "--map-index N" if key is not None else "--map-index N or --all-map-indices"
    return f"; {safe_text(at_other_map_indices(scope, found, key))}: give {flags}"


@app.command(
    "clear",
    epilog=examples(
        f"clear {TASK_EXAMPLE}",
        "clear --dag-id etl --run-id manual__1 --task-id load --all-map-indices --yes",
        "clear --dag-id etl --run-id manual__1 --yes",
        "clear --dag-id etl --batch-size 10000 --yes",
        "clear --dag-id etl --run-id manual__1 --backup /var/backups/etl-manual__1.jsonl --yes",
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
        batch_size_option(
            "A whole run or dag: keys per committed batch; 0 = one statement. "
            f"Default: {section('state_store')} state_cleanup_batch_size."
        ),
    ] = None,
    backup: BackupOpt = None,
    lock_timeout: LockTimeoutOpt = None,
) -> None:
    """Delete every key of a scope, of a whole run, or of a whole dag.

    --dag-id with --run-id and no --task-id clears every task key of the run; --dag-id alone every
    task key of the dag, in batches of --batch-size.
    Counts the keys first: with none it says so and exits 0.
    Then it asks on a terminal; anywhere else it needs --yes.
    Answering no, or no answer (end of input), exits 1; Ctrl-C at the question exits 130.

    --backup FILE first writes every key it deletes to FILE (the export format, each batch synced to disk
    before it commits); `statestore import FILE` puts them back. FILE must be new or empty, its folder
    writable (else exit 2, nothing deleted); left empty when there is nothing to clear. A worker-side
    backend's objects are then kept: the backup's references point at them."""
    from statestore_cli.model.scopes import describe_keys_of
    from statestore_cli.ops import commands

    saved = open_backup(backup)  # checked before anything is counted, asked or deleted
    store = store_of(ctx)
    name_restore(saved, store.settings)
    try:
        dag_id = _whole_run_or_dag(scope_args, all_map_indices)
        if dag_id is not None:
            _clear_run_or_dag(store, dag_id, scope_args.run_id, yes, batch_size, saved)
            return
        if batch_size is not None:
            raise InvalidInputError(
                "--batch-size applies to a whole run or dag (--dag-id [--run-id] without --task-id)"
            )
        scope = scope_of(scope_args)
        where = safe_text(describe_keys_of(scope, all_map_indices=all_map_indices))
        if saved is not None:
            commands.backup_metastore(
                store
            )  # a custom backend's keys are not in the tables: refused before the question
        count = commands.count_keys(store, scope, all_map_indices=all_map_indices)  # None: the backend cannot count
        if count == 0:
            hint = "" if all_map_indices else _elsewhere(store, scope)
            Output.choose().line(f"nothing to clear: no keys for {where}{hint}")
            _empty_backup(saved)
            return
        question = f"Delete {'all keys' if count is None else key_count(count)} of {where}?"
        confirm_delete(yes, "clear deletes keys", question)
        removed = commands.clear_scope(store, scope, all_map_indices=all_map_indices, backup=saved)
        removed = count if removed is None else removed  # the REST API deletes without a count: the one before
        Output.choose().line(f"deleted {'keys' if removed is None else key_count(removed)} of {where}")
        _said_backup(store, saved)
    finally:
        close_backup(saved)


def _empty_backup(saved: "Optional[BackupFile]") -> None:
    """Nothing to delete: the backup is left as a valid empty file, as a run that deleted nothing leaves it."""
    if saved is not None:
        saved.start()
        Output.choose().line(backup_sentence(saved))


def _said_backup(store: "Store", saved: "Optional[BackupFile]") -> None:
    """The backup's line after a clear; with a worker-side backend, that its objects were kept."""
    if saved is None:
        return
    out = Output.choose()
    out.line(backup_sentence(saved))
    if store.settings.worker_backend and saved.lines:
        out.line(
            f"kept the objects of [workers] state_store_backend behind the {key_count(saved.lines)}, so that the "
            "backup's references restore; `statestore orphans` lists them meanwhile"
        )


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
    store: "Store",
    dag_id: str,
    run_id: Optional[str],
    yes: bool,
    batch_size: Optional[int],
    saved: "Optional[BackupFile]" = None,
) -> None:
    from statestore_cli.ops import lifecycle

    where = safe_text(lifecycle.describe_run_or_dag(dag_id, run_id))
    whole = "every task of the run" if run_id is not None else "every run and task of the dag"
    out = Output.choose()
    with out.walk_progress(store):  # through the REST API, the count walks the task instances
        count = lifecycle.count_task_keys(store, dag_id, run_id)
    if count == 0:
        out.line(f"nothing to clear: no task keys for {where}")
        out.api_requests(store.api_requests())
        _empty_backup(saved)
        return
    confirm_delete(yes, "clear deletes keys", f"Delete {key_count(count)} of {where} ({whole})?")
    removed, batches = lifecycle.clear_task_keys(store, dag_id, run_id, batch_size, backup=saved)
    plural = "es" if batches != 1 else ""
    out.line(f"deleted {key_count(removed)} of {where} ({whole}) in {batches:,} batch{plural}")
    out.api_requests(store.api_requests())
    _said_backup(store, saved)


@app.command("list", epilog=examples("list --dag-id etl", "list --store asset -o json", "list --limit 50 --offset 100"))
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
    from statestore_cli.ops import commands

    out = choose_output(output, header)
    filt = as_filter(scope_args, store, key)
    opened = store_of(ctx, writes=False)
    with out.walk_progress(opened):
        shown = out.entries(commands.list_entries(opened, filt, limit=limit, offset=offset), filt)
    out.api_requests(opened.api_requests())
    if shown == 0 and offset == 0:
        _near_misses(opened, filt)


@app.command(
    "stats",
    epilog=examples(
        "stats", "stats --dag-id etl -o json", "stats --largest 20", "stats --metrics-file statestore_stats.prom"
    ),
)
@with_scope_options
def stats(
    ctx: typer.Context,
    scope_args: KeyFilter,
    key: KeyOpt = None,
    store: StoreOpt = None,
    metrics_file: Annotated[
        Optional[Path],
        typer.Option(
            "--metrics-file",
            metavar="PATH",
            help="Also write the store's figures as Prometheus gauges here (node-exporter textfile collector).",
        ),
    ] = None,
    metrics_label: MetricsLabelOpt = None,
    largest: Annotated[
        Optional[int],
        typer.Option(
            "--largest",
            metavar="N",
            help="Also list the N largest values (1-1000), with their keys and sizes in bytes as stored.",
        ),
    ] = None,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> None:
    """Count keys per store, by expiry, per dag and per asset.

    On a terminal it also charts when task keys expire. --largest N lists the N largest values of the keys
    selected, largest first."""
    from statestore_cli.ops import commands

    out = choose_output(output, header)
    filt = as_filter(scope_args, store, key)
    if largest is not None:
        from statestore_cli.ops.largest import check_count

        check_count(largest)
    if metrics_label and metrics_file is None:
        raise InvalidInputError("--metrics-label labels the samples of --metrics-file; give --metrics-file PATH too")
    target = None
    if metrics_file is not None:
        from statestore_cli.ops.metrics import check_writable

        labels = metrics_labels(ctx, metrics_label)  # a bad label or path fails before anything is counted
        target = metrics_file.expanduser()
        check_writable(target)
    opened = store_of(ctx, writes=False)
    figures = commands.stats(opened, filt, largest=largest)
    if target is not None:
        from statestore_cli.ops.metrics import write_file

        write_file(target, commands.stats_metrics(opened, figures, labels).render())
    out.stats(figures)
    worker_backend = opened.settings.worker_backend
    if largest is not None and worker_backend and out.mode == "table":
        _note_references(worker_backend)
    stores = (figures.task, figures.asset, figures.dag_run)
    if not any(part is not None and part.rows for part in stores):
        _near_misses(opened, filt)


def _note_references(worker_backend: str) -> None:
    """At a terminal, below ``stats --largest``: with a worker-side backend the rows hold its references, and
    their sizes are what the database measured (scripts have the documented rule instead of a note)."""
    from statestore_cli.masking import mask_text

    sys.stdout.flush()  # after the table
    note = (
        f"[workers] state_store_backend is {worker_backend}: the rows hold its references, so --largest shows "
        "the sizes of the references, not of the values behind them"
    )
    sys.stderr.write(f"statestore: note: {safe_text(mask_text(note))}\n")


def _near_misses(store: "Store", filt: KeyFilter) -> None:
    """A listing that found nothing: a note on stderr for each id that matches nothing but is close to one."""
    from statestore_cli.ops import commands

    sys.stdout.flush()  # after what the command printed
    for note in commands.near_misses(store, filt):
        sys.stderr.write(f"statestore: note: {safe_text(note)}\n")
