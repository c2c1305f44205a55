"""``clean`` and the helpers that record its metrics."""

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from statestore_cli.cli.app import (
    _MAX_BATCH_SIZE,
    DeleteDryRunOpt,
    HeaderOpt,
    LockTimeoutOpt,
    MetricsLabelOpt,
    OutputOpt,
    _examples,
    _metrics_labels,
    _output,
    _seconds,
    _section,
    _settings,
    app,
)
from statestore_cli.cli.backup_option import BackupOpt, close_backup, name_restore, open_backup, refuse_with_dry_run
from statestore_cli.cli.failure import message
from statestore_cli.cli.group import decided
from statestore_cli.cli.modes import OutputMode
from statestore_cli.cli.render import Output
from statestore_cli.cli.stopping import StopOnSignal
from statestore_cli.config import Settings
from statestore_cli.entries import Timeouts
from statestore_cli.errors import (
    EXIT_OK,
    EXIT_SKIPPED,
    InvalidInputError,
    Outcome,
    StateStoreError,
)
from statestore_cli.retention import parse_age, utcnow

if TYPE_CHECKING:  # loaded by `clean` only when it runs
    from statestore_cli.backup import BackupFile
    from statestore_cli.cleanup import CleanReport
    from statestore_cli.metrics import CleanRecorder


# -- clean ------------------------------------------------------------------------------------------
@app.command(
    "clean",
    epilog=_examples(
        "clean --dry-run",
        "clean --batch-size 10000 --max-runtime 2h --exclusive",
        "clean --older-than 1d --backup /var/backups/statestore/clean-2026-11-30.jsonl",
        "clean -o json",
    ),
)
def clean(
    ctx: typer.Context,
    dry_run: DeleteDryRunOpt = False,
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
    metrics_label: MetricsLabelOpt = None,
    backup: BackupOpt = None,
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
    """Delete expired task keys (and Airflow 3.4's dag-run keys).

    Deletes task and dag-run keys that have expired (at least --older-than ago,
    when given); asset keys and keys that never expire stay.
    Ctrl-C stops after the current batch (exit 130), SIGTERM too (exit 143). A custom backend is
    skipped with a message: exit 0, or 5 with --fail-on-skip; --backend-cleanup runs its own cleanup() instead.

    --backup FILE first writes every key it deletes to FILE (the export format, each batch synced to disk
    before it commits, so FILE holds them also after a stop or a failure); `statestore import FILE` puts
    them back. FILE must be new or empty, its folder writable (else exit 2, nothing deleted); left empty
    when nothing expired. A dry run refuses it."""
    if batch_size is not None and batch_size > _MAX_BATCH_SIZE:
        raise InvalidInputError(f"--batch-size {batch_size} is too large; the largest is {_MAX_BATCH_SIZE}")
    grace = None if older_than is None else parse_age(older_than, "--older-than")
    out = _output(output, header)
    if metrics_label and metrics_file is None:
        raise InvalidInputError("--metrics-label labels the samples of --metrics-file; give --metrics-file PATH too")
    if backend_cleanup:
        _backend_cleanup(ctx, out, dry_run, older_than, metrics_file, backup)
        return None
    refuse_with_dry_run(backup, dry_run, "a clean")
    if dry_run:
        if metrics_file is not None:
            raise InvalidInputError(
                "--metrics-file records what a clean deleted and a --dry-run deletes nothing; drop one of them"
            )
        skipped = _clean_dry_run(_settings(ctx), out, grace, show_all)
        return None if skipped is None else _skipped(skipped, fail_on_skip)
    timeouts = Timeouts(
        statement_seconds=None if statement_timeout is None else _seconds(statement_timeout, "--statement-timeout"),
    )
    runtime = None if max_runtime is None else _seconds(max_runtime, "--max-runtime")
    recorder = None
    if metrics_file is not None:
        from statestore_cli.metrics import CleanRecorder

        labels = _metrics_labels(ctx, metrics_label)  # a bad label fails here, before anything is written
        recorder = CleanRecorder(metrics_file, labels)  # an unwritable path fails here, before anything is deleted
    saved = open_backup(backup)  # likewise: a backup that cannot be written refuses the clean
    try:
        result, remaining = _clean_run(ctx, out, batch_size, grace, timeouts, runtime, exclusive, recorder, saved)
    except BaseException as exc:
        if recorder is not None:
            _record_failure(recorder, exc, out)
        raise
    finally:
        close_backup(saved)
    # The metrics first: a report that cannot be shown (a closed pipe) must not cost the monitoring its file.
    unwritten = _record(recorder, result, remaining, EXIT_SKIPPED if fail_on_skip else EXIT_OK)
    if isinstance(result, str):
        out.clean_skipped(result, dry_run=False)
        if saved is not None:
            out.note(f"--backup {saved.path} was not written: the clean deleted nothing")
    else:
        decided(ctx, result)  # the deletion is done: a reader closing the pipe does not change its exit code
        out.clean_report(result, saved)
    if unwritten is not None:
        raise unwritten  # the clean is done; exit 3 tells the scheduler its monitoring is stale
    # a clean stopped early exits with its reason's code; a skip with 5 under --fail-on-skip
    return _skipped(result, fail_on_skip) if isinstance(result, str) else result


def _skipped(reason: str, fail_on_skip: bool) -> Outcome:
    from statestore_cli import commands

    return commands.CleanSkipped(reason, fail_on_skip)


def _backend_cleanup(
    ctx: typer.Context,
    out: Output,
    dry_run: bool,
    older_than: Optional[str],
    metrics_file: Optional[Path],
    backup: Optional[Path],
) -> None:
    from statestore_cli import commands

    for given, flag in (
        (dry_run, "--dry-run"),
        (older_than is not None, "--older-than"),
        (metrics_file, "--metrics-file"),
        (backup, "--backup"),
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
    backup: Optional["BackupFile"],
) -> tuple["CleanReport | str", Optional[int]]:
    """The clean itself, and (for ``--metrics-file``) how many expired keys it left: not counted after
    a signal, which asks for a quick exit."""
    from statestore_cli import commands
    from statestore_cli.cleanup import CleanControl
    from statestore_cli.errors import StopReason

    settings = _settings(ctx)  # inside the recorded run: a broken config is a failed clean too
    name_restore(backup, settings)
    now = utcnow()
    deadline = None if runtime is None else time.monotonic() + runtime
    total = commands.count_expired_keys(settings, now, grace) if out.shows_progress else None
    with StopOnSignal() as stop:
        with out.progress("deleting expired keys", total) as advance:
            on_progress = advance if recorder is None else _both(advance, recorder.on_progress)
            # Until the clean is connected a signal stops it at once; from then on, after the current batch.
            on_store = None if recorder is None else recorder.on_store
            control = CleanControl(
                timeouts, exclusive, deadline, stop.reason, on_progress, on_connected=stop.defer, on_store=on_store
            )
            result = commands.clean(settings, batch_size, now=now, control=control, older_than=grace, backup=backup)
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
            recorder.finish(
                result.exit_code,
                rows_deleted=result.deleted,
                batches=result.batches,
                remaining=remaining,
                deleted_by_store=result.deleted_by_store,
            )
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
