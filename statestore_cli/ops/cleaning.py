"""``clean`` and ``backend cleanup``: the cutoff and grace window, what a clean deletes (planned or done),
and a custom backend's own cleanup."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from statestore_cli.backends.loader import load_backend_class
from statestore_cli.errors import EXIT_OK, EXIT_SKIPPED, PARAMETER, BackendError, InvalidInputError, first_line
from statestore_cli.model.retention import clean_cutoff, utcnow

if TYPE_CHECKING:  # each imported where it is used: only `clean` needs them, and they cost start-up
    from statestore_cli.backends.store import Store
    from statestore_cli.config import Settings
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.cleanup import CleanControl, CleanReport, ExpiredRow


class CleanPlan(NamedTuple):
    """What a clean at ``cutoff`` deletes, or why nothing is cleaned (a custom backend)."""

    cutoff: datetime
    rows: Iterator[ExpiredRow]
    skipped_reason: str | None = None
    older_than: timedelta = timedelta(0)
    # expired task keys kept for unfinished task instances, by state: counted while ``rows`` are read
    spared: dict[str, int] | None = None


def _skip_reason(settings: Settings) -> str | None:
    if settings.uses_builtin_backend:
        return None
    # a wrong path is an error, not a skip
    load_backend_class(settings.setting("state_store", "backend"), config_file=settings.config_file)
    return (
        f"[state_store] backend is {settings.backend}, not the metastore backend: nothing to clean here; "
        "a custom backend runs its own BaseStoreBackend.cleanup()"
    )


def clean_window(
    store: Store, now: datetime | None = None, older_than: timedelta | None = None
) -> tuple[datetime, timedelta]:
    """The cutoff a clean at ``now`` deletes keys expired before, and the grace window behind it:
    ``older_than``, else ``[state_store] state_cleanup_older_than``. A dry run, a real run and the
    count of what is left all take it from here, so they select the same rows."""
    grace = store.settings.state_cleanup_older_than if older_than is None else older_than
    if grace < timedelta(0):
        raise InvalidInputError(
            f"{PARAMETER} must not be negative, got {grace.total_seconds():g} seconds", parameter="older_than"
        )
    return clean_cutoff(now or utcnow(), grace), grace


def plan_clean(
    store: Store,
    now: datetime | None = None,
    older_than: timedelta | None = None,
    *,
    include_unfinished: bool = False,
) -> CleanPlan:
    """What a clean at ``now`` would delete (streamed), without deleting anything, and what it would keep
    for unfinished task instances (none with ``include_unfinished``)."""
    cutoff, grace = clean_window(store, now, older_than)
    reason = _skip_reason(store.settings)
    if reason:
        return CleanPlan(cutoff, iter(()), reason, grace)
    if store.api_mode:
        from statestore_cli.ops.api_walks import planned_rows

        spared_api: dict[str, int] | None = None if include_unfinished else {}
        return CleanPlan(cutoff, planned_rows(store.api_backend(), cutoff, spared_api), None, grace, spared_api)
    from statestore_cli.ops.cleanup import iter_expired, spares

    engine = store.engine
    # counted as the rows are listed: complete once they all were
    spared: dict[str, int] | None = None if include_unfinished or not spares(engine) else {}
    rows = iter_expired(engine, cutoff, not include_unfinished, spared)
    return CleanPlan(cutoff, rows, None, grace, spared)


def clean(
    store: Store,
    batch_size: int | None = None,
    now: datetime | None = None,
    control: CleanControl | None = None,
    older_than: timedelta | None = None,
    backup: BackupFile | None = None,
    *,
    include_unfinished: bool = False,
) -> CleanReport | CleanSkipped:
    """Delete expired task keys (those ``older_than`` past their expiry, when given); returns the
    report, or ``CleanSkipped`` with the reason the clean was skipped (then ``backup`` is not created).
    With ``backup`` every deleted row is written to it, each batch synced to disk before it commits. The
    keys of unfinished task instances are kept unless ``include_unfinished`` (see ``clean_selection.cleaned``)."""
    cutoff, grace = clean_window(store, now, older_than)
    reason = _skip_reason(store.settings)
    if reason:
        return CleanSkipped(reason)
    size = store.settings.state_cleanup_batch_size if batch_size is None else batch_size
    if store.api_mode:
        return _clean_over_api(store, cutoff, grace, control, backup, include_unfinished)
    from statestore_cli.ops.cleanup import delete_expired

    report = delete_expired(store.engine, cutoff, size, control, backup, spare=not include_unfinished)
    return replace(report, older_than=grace)


def _clean_over_api(
    store: Store,
    cutoff: datetime,
    grace: timedelta,
    control: CleanControl | None,
    backup: BackupFile | None,
    include_unfinished: bool,
) -> CleanReport:
    """``clean`` through Airflow's REST API (``ops.api_walks``), which has no lock to take."""
    if control is not None and control.exclusive:
        raise InvalidInputError(
            f"{PARAMETER} needs the metadata database; through Airflow's REST API (--api-url) run the clean "
            f"without it, or with --conn where the database can be reached",
            parameter="exclusive",
        )
    from statestore_cli.ops.api_walks import clean_over_api

    report = clean_over_api(store.api_backend(), cutoff, control, spare=not include_unfinished, backup=backup)
    return replace(report, older_than=grace)


def count_expired_keys(
    store: Store,
    now: datetime | None = None,
    older_than: timedelta | None = None,
    *,
    include_unfinished: bool = False,
) -> int:
    """How many task keys a clean at ``now`` deletes (0 with a custom backend)."""
    cutoff, _ = clean_window(store, now, older_than)
    if _skip_reason(store.settings):
        return 0
    if store.api_mode:
        from statestore_cli.ops.api_walks import expired_keys

        spared: dict[str, int] | None = None if include_unfinished else {}
        return sum(1 for _ in expired_keys(store.api_backend(), cutoff, spared))
    from statestore_cli.ops.cleanup import count_expired

    return count_expired(store.engine, cutoff, not include_unfinished)


class CleanSkipped(NamedTuple):
    """A clean that did nothing because a custom backend is configured; ``fail`` (``--fail-on-skip``)
    makes that a non-zero exit, for schedulers that alert on one."""

    reason: str
    fail: bool = False

    @property
    def exit_code(self) -> int:
        return EXIT_SKIPPED if self.fail else EXIT_OK


class BackendCleanup(NamedTuple):
    backend: str
    result: Any  # whatever the backend's cleanup() returned
    elapsed: float


def backend_cleanup(store: Store) -> BackendCleanup:
    """Run the custom ``[state_store] backend``'s own ``cleanup()`` and return what it returned."""
    settings = store.settings
    if settings.uses_builtin_backend:
        raise InvalidInputError(
            "backend cleanup runs a custom [state_store] backend's cleanup(); the metastore backend has none: "
            "`clean` itself deletes its expired keys"
        )
    backend = store.backend
    import time

    started = time.monotonic()
    try:
        result = backend.cleanup()
    except Exception as exc:  # user code: any failure is the backend's
        raise BackendError(f"{settings.backend}.cleanup() failed: {type(exc).__name__}: {first_line(exc)}") from None
    return BackendCleanup(settings.backend, result, time.monotonic() - started)
