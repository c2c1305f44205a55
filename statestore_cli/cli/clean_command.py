"""``clean``: its options, its dry run, and the run itself under a progress bar."""

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from statestore_cli.cli.backup_option import BackupOpt, close_backup, name_restore, open_backup, refuse_with_dry_run
from statestore_cli.cli.command_groups import app
from statestore_cli.cli.context import metrics_labels, store_of
from statestore_cli.cli.errors_to_exits import decided
from statestore_cli.cli.failure import message
from statestore_cli.cli.help_text import examples, section
from statestore_cli.cli.options import (
    DeleteDryRunOpt,
    HeaderOpt,
    LockTimeoutOpt,
    MetricsLabelOpt,
    OutputOpt,
    batch_size_option,
    choose_output,
    seconds,
)
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.render import Output
from statestore_cli.cli.stopping import StopOnSignal
from statestore_cli.errors import (
    EXIT_OK,
    EXIT_SKIPPED,
    InvalidInputError,
    Outcome,
)
from statestore_cli.model.entries import Timeouts
from statestore_cli.model.retention import clean_cutoff, parse_age, utcnow

if TYPE_CHECKING:  # loaded by `clean` only when it runs
    from contextlib import AbstractContextManager

    from statestore_cli.backends.store import Store
    from statestore_cli.cli.output.progress import Advance
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.clean_run import CleanRun
    from statestore_cli.ops.cleanup import CleanReport
    from statestore_cli.ops.commands import CleanSkipped


# -- clean ------------------------------------------------------------------------------------------
@app.command(
    "clean",
    epilog=examples(
        "clean --dry-run",
        "clean --batch-size 10000 --max-runtime 2h --exclusive",
        "clean --older-than 1d --backup /var/backups/statestore/clean-2026-11-30.jsonl",
        "clean --dry-run --include-unfinished",
        "clean -o json",
    ),
)
def clean(
    ctx: typer.Context,
    dry_run: DeleteDryRunOpt = False,
    batch_size: Annotated[
        Optional[int],
        batch_size_option(
            "Rows per committed batch; 0 = one statement. "
            f"Default: {section('state_store')} state_cleanup_batch_size (0 unless configured)."
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="With --dry-run on a terminal: list every row, not the first 100.")
    ] = False,
    lock_timeout: LockTimeoutOpt = None,
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
            f"Default: {section('state_store')} state_cleanup_older_than (0 unless configured).",
        ),
    ] = None,
    include_unfinished: Annotated[
        bool,
        typer.Option(
            "--include-unfinished",
            help="Delete the expired keys of task instances that have not finished too (running, up_for_retry, "
            "deferred, queued, ...), as Airflow's own clean does; a retry then finds no job id.",
        ),
    ] = False,
    metrics_file: Annotated[
        Optional[Path],
        typer.Option(
            "--metrics-file",
            metavar="PATH",
            help="Write Prometheus metrics of the run here (node-exporter textfile collector), "
            "also when it fails or stops early.",
        ),
    ] = None,
    metrics_label: MetricsLabelOpt = None,
    backup: BackupOpt = None,
    dag_ids: Annotated[
        Optional[list[str]],
        typer.Option(
            "--dag-id",
            metavar="DAG_ID",
            help="Through the REST API (--api-url): walk only this dag's task instances (repeatable). A clean of "
            "the database takes every dag at once.",
        ),
    ] = None,
    fail_on_skip: Annotated[
        bool,
        typer.Option("--fail-on-skip", help=f"With a custom {section('state_store')} backend, exit 5 instead of 0."),
    ] = False,
    backend_cleanup: Annotated[
        bool,
        typer.Option(
            "--backend-cleanup", help=f"Run the custom {section('state_store')} backend's cleanup() and report it."
        ),
    ] = False,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> Optional[Outcome]:
    """Delete expired task keys (and Airflow 3.4's dag-run keys).

    Deletes task and dag-run keys that have expired (at least --older-than ago,
    when given); asset keys and keys that never expire stay.
    Ctrl-C stops after the current batch (exit 130), SIGTERM too (exit 143). A custom backend is
    skipped with a message: exit 0, or 5 with --fail-on-skip; --backend-cleanup runs its own cleanup() instead.

    On an Airflow database the expired keys of a task instance that has not finished (its state is not
    success, failed, skipped, upstream_failed or removed) stay too: a task waiting for its retry finds the job
    id its earlier try stored there. The dry run and the report count them; --include-unfinished deletes them.

    --backup FILE first writes every key it deletes to FILE (the export format, each batch synced to disk
    before it commits, so FILE holds them also after a stop or a failure); `statestore import FILE` puts
    them back. FILE must be new or empty, its folder writable (else exit 2, nothing deleted); left empty
    when nothing expired. A dry run refuses it."""
    grace = None if older_than is None else parse_age(older_than, "--older-than")
    if grace is not None:
        clean_cutoff(utcnow(), grace)  # an age reaching before the year 1 fails here, before any metrics file
    out = choose_output(output, header)
    if metrics_label and metrics_file is None:
        raise InvalidInputError("--metrics-label labels the samples of --metrics-file; give --metrics-file PATH too")
    if backend_cleanup:
        _backend_cleanup(ctx, out, dry_run, older_than, metrics_file, backup, include_unfinished)
        return None
    refuse_with_dry_run(backup, dry_run, "a clean")
    if dag_ids:
        _walk_only(store_of(ctx), dag_ids)
    if dry_run:
        if metrics_file is not None:
            raise InvalidInputError(
                "--metrics-file records what a clean deleted and a --dry-run deletes nothing; drop one of them"
            )
        skipped = _clean_dry_run(store_of(ctx), out, grace, show_all, include_unfinished)
        return None if skipped is None else _skipped(skipped, fail_on_skip)
    timeouts = Timeouts(statement_seconds=None if statement_timeout is None else _statement_seconds(statement_timeout))
    runtime = None if max_runtime is None else seconds(max_runtime, "--max-runtime")
    from statestore_cli.ops.clean_run import CleanRun

    labels = None if metrics_file is None else metrics_labels(ctx, metrics_label)  # a bad label fails first
    run = CleanRun(metrics_file, labels, skip_code=EXIT_SKIPPED if fail_on_skip else EXIT_OK)
    saved = open_backup(backup)  # likewise: a backup that cannot be written refuses the clean
    try:
        with run:
            result = _clean_run(
                ctx, out, batch_size, grace, timeouts, runtime, exclusive, run, saved, include_unfinished
            )
    finally:
        close_backup(saved)
        for problem in run.problems:
            out.note(
                f"--metrics-file: {problem.doing}: {message(problem.error)}"
                if problem.doing
                else message(problem.error)
            )
    from statestore_cli.ops.commands import CleanSkipped  # loaded by the clean already

    if isinstance(result, CleanSkipped):
        out.clean_skipped(result.reason, dry_run=False)
        if saved is not None:
            out.note(f"--backup {saved.path} was not written: the clean deleted nothing")
    else:
        decided(ctx, result)  # the deletion is done: a reader closing the pipe does not change its exit code
        out.clean_report(result, saved)
        _unknown_dags(store_of(ctx), out)
    if run.unwritten is not None:
        raise run.unwritten  # the clean is done; exit 3 tells the scheduler its monitoring is stale
    # a clean stopped early exits with its reason's code; a skip with 5 under --fail-on-skip
    return _skipped(result.reason, fail_on_skip) if isinstance(result, CleanSkipped) else result


def _walk_only(store: "Store", dag_ids: list[str]) -> None:
    """--dag-id: a clean through the REST API walks these dags alone; a database has no walk to narrow."""
    if not store.api_mode:
        raise InvalidInputError(
            "--dag-id narrows a clean through the REST API (--api-url), which walks each dag's task instances; "
            "a clean of the database takes every dag at once: drop --dag-id"
        )
    store.api_backend().dags = sorted(set(dag_ids))


# PostgreSQL takes a statement timeout in milliseconds, a 32-bit integer; the lock timeout has the same bound.
MAX_STATEMENT_SECONDS = 2_147_483


def _statement_seconds(text: str) -> float:
    """--statement-timeout in seconds, refused before the clean starts when no engine can take it."""
    value = seconds(text, "--statement-timeout")
    if value > MAX_STATEMENT_SECONDS:
        raise InvalidInputError(
            f"--statement-timeout {text!r} is too long; the longest is {MAX_STATEMENT_SECONDS}s (about 24 days)"
        )
    return value


def _skipped(reason: str, fail_on_skip: bool) -> Outcome:
    from statestore_cli.ops import commands

    return commands.CleanSkipped(reason, fail_on_skip)


def _backend_cleanup(
    ctx: typer.Context,
    out: Output,
    dry_run: bool,
    older_than: Optional[str],
    metrics_file: Optional[Path],
    backup: Optional[Path],
    include_unfinished: bool,
) -> None:
    from statestore_cli.ops import commands

    for given, flag in (
        (dry_run, "--dry-run"),
        (older_than is not None, "--older-than"),
        (metrics_file, "--metrics-file"),
        (backup, "--backup"),
        (include_unfinished, "--include-unfinished"),  # the backend decides what its cleanup() keeps
    ):
        if given:
            raise InvalidInputError(
                f"--backend-cleanup runs the backend's own cleanup(), which takes no {flag}; drop it"
            )
    out.backend_cleanup(commands.backend_cleanup(store_of(ctx)))


def _clean_dry_run(
    store: "Store", out: Output, grace: Optional[timedelta], show_all: bool, include_unfinished: bool
) -> Optional[str]:
    """Show what a clean would delete; returns the reason when a custom backend makes it skip."""
    from statestore_cli.ops import commands

    now = utcnow()
    plan = commands.plan_clean(store, now, grace, include_unfinished=include_unfinished)
    if plan.skipped_reason:
        out.clean_skipped(plan.skipped_reason, dry_run=True)
        return plan.skipped_reason
    total = (  # through the REST API a count is a second walk: the progress goes without a total there
        commands.count_expired_keys(store, now, grace, include_unfinished=include_unfinished)
        if out.shows_progress and not store.api_mode
        else None
    )
    with out.walk_progress(store):
        out.clean_plan(plan, limit=None if show_all else 100, total=total)
    out.api_requests(store.api_requests())
    _unknown_dags(store, out)
    return None


def _unknown_dags(store: "Store", out: Output) -> None:
    """A --dag-id the api-server does not know, said: a clean of it found nothing to delete."""
    from statestore_cli.model.entries import KeyFilter
    from statestore_cli.ops import commands

    for note in commands.near_misses(store, KeyFilter()):
        out.note(note)


def _clean_run(
    ctx: typer.Context,
    out: Output,
    batch_size: Optional[int],
    grace: Optional[timedelta],
    timeouts: Timeouts,
    runtime: Optional[float],
    exclusive: bool,
    run: "CleanRun",
    backup: Optional["BackupFile"],
    include_unfinished: bool,
) -> "CleanReport | CleanSkipped":
    """The clean under a progress bar, stopping between batches on a signal."""
    from statestore_cli.ops.cleanup import CleanControl

    store = store_of(ctx)  # inside the recorded run: a broken config is a failed clean too
    name_restore(backup, store.settings)
    now = utcnow()
    deadline = None if runtime is None else time.monotonic() + runtime
    with StopOnSignal() as stop, _clean_bar(store, out, now, grace, include_unfinished) as advance:
        # Until the clean is connected a signal stops it at once; from then on, after the current batch.
        control = CleanControl(timeouts, exclusive, deadline, stop.reason, advance, on_connected=stop.defer)
        return run.clean(
            store,
            batch_size,
            now=now,
            control=control,
            older_than=grace,
            backup=backup,
            include_unfinished=include_unfinished,
        )


def _clean_bar(
    store: "Store", out: Output, now: datetime, grace: Optional[timedelta], include_unfinished: bool
) -> "AbstractContextManager[Advance | None]":
    """The clean's progress bar: keys deleted of those counted first on a database; through the REST API the
    task instances walked (a count of the expired keys first would be a second walk)."""
    from statestore_cli.ops import commands

    if store.api_mode:
        return out.walk_progress(store)
    total = (
        commands.count_expired_keys(store, now, grace, include_unfinished=include_unfinished)
        if out.shows_progress
        else None
    )
    return out.progress("deleting expired keys", total)
