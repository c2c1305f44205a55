"""The operations behind every CLI command, as public functions that take the settings first.

Each returns plain records (``statestore_cli.model.entries``, ``statestore_cli.ops.cleanup``) or iterators of
them; rendering is the caller's business.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from statestore_cli.backends.accessors import TaskStateStoreAccessor
from statestore_cli.backends.base import BaseStoreBackend, JsonValue
from statestore_cli.backends.loader import load_backend_class
from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.backends.stores import accessor, open_backend, open_metastore
from statestore_cli.config import Settings, describe_source
from statestore_cli.config.sources import CONN_OVERRIDE
from statestore_cli.db.database import (
    StoreOrigin,
    describe_engine,
    mask_url,
    missing_store_guide,
    parse_url,
    translate_errors,
)
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.db.schema_state import SchemaState, init_schema, inspect_schema
from statestore_cli.errors import (
    EXIT_OK,
    EXIT_SKIPPED,
    PARAMETER,
    BackendError,
    DatabaseError,
    InvalidInputError,
    NotFoundError,
    SchemaMissingError,
    StateStoreError,
    first_line,
)
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.retention import Retention, clean_cutoff, utcnow
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope, check_key, missing_key

if TYPE_CHECKING:  # each imported where it is used: only `clean` and `stats` need them, and they cost start-up
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.cleanup import CleanControl, CleanReport, ExpiredRow
    from statestore_cli.ops.metrics import StatsMetrics
    from statestore_cli.ops.stats import StoreStats


# -- db ------------------------------------------------------------------------------------------------
class StoreSizes(NamedTuple):
    """How many rows each store holds, and how many task rows a clean at ``now`` would delete."""

    task_keys: int
    task_keys_expired: int
    asset_keys: int
    now: datetime


class DbReport(NamedTuple):
    database: str
    engine: str
    schema: SchemaState
    backend: str
    created: tuple[str, ...] = ()
    error: str | None = None
    airflow_version: str | None = None  # an Airflow database: the release its alembic revision belongs to
    counts: StoreSizes | None = None  # an Airflow database with the state store: its rows
    layout: Layout | None = None  # an Airflow database with the state store: the layout of its tables
    origin: StoreOrigin | None = None  # why the URL is this one, for the message of a store not there
    created_file: str | None = None  # db init on SQLite: the file it created (None: the file was there)

    @property
    def usable(self) -> bool:
        return self.error is None and self.schema.usable and not (self.layout is not None and self.layout.problems)

    def problem(self) -> StateStoreError | None:
        """Why the store is not usable, as the error to raise; None when it is usable."""
        if self.error is not None:
            return DatabaseError(self.error)
        if self.layout is not None and self.layout.problems:
            try:
                self.layout.require("write")
            except DatabaseError as exc:
                return exc
        if not self.schema.usable and self.schema.mode == "airflow":
            from statestore_cli.db.airflow_versions import STATE_STORE_SINCE

            release = f" {self.airflow_version}" if self.airflow_version else ""
            return SchemaMissingError(
                f"this is an Airflow{release} metadata database (revision {self.schema.alembic_revision}) without the "
                f"state store, which needs Airflow {STATE_STORE_SINCE} or later: upgrade Airflow and run "
                "`airflow db migrate`"
            )
        if not self.schema.usable:
            return SchemaMissingError(
                f"the state store is not usable: missing tables {', '.join(self.schema.missing)}"
                f"{missing_store_guide(self.origin, 'them')}"
            )
        return None


def db_init(settings: Settings) -> DbReport:
    """Create the schema; on SQLite, the file too when it is not there (``created_file`` says which)."""
    url = parse_url(settings.sql_alchemy_conn)
    path = impl_of(url).database_file(url)
    new_file = path is not None and not path.exists()
    store = open_metastore(settings, create_file=True)
    state, created = init_schema(store.engine)
    report = DbReport(describe_engine(store.engine), impl_of(store.engine).name, state, settings.backend, created)
    return report._replace(created_file=str(path.resolve()) if new_file and path is not None else None)


def db_check(settings: Settings) -> DbReport:
    """Connect and report; an unreachable database or a missing schema is reported, not raised."""
    try:
        store = open_metastore(settings, writes=False)
        with translate_errors(store.engine), store.engine.connect() as conn:
            state = inspect_schema(conn)
    except DatabaseError as exc:
        url = parse_url(settings.sql_alchemy_conn)
        unknown = SchemaState(mode="unknown", present=(), missing=(), alembic_revision=None)
        return DbReport(mask_url(url), impl_of(url).name, unknown, settings.backend, error=str(exc))
    if not settings.uses_builtin_backend:
        open_backend(settings, writes=False)  # a custom backend that cannot load makes the store unusable
    origin = StoreOrigin(*settings.conn_origin(), settings.init_command())
    report = DbReport(describe_engine(store.engine), impl_of(store.engine).name, state, settings.backend, origin=origin)
    if state.mode != "airflow":
        return report
    from statestore_cli.db.airflow_versions import airflow_version

    layout = None
    if state.usable:
        with translate_errors(store.engine), store.engine.connect() as conn:
            layout = layout_of(conn, needs=None)
    counts = _store_counts(store, utcnow()) if state.usable and not (layout and layout.problems) else None
    version = airflow_version(state.alembic_revision)
    return report._replace(airflow_version=version, counts=counts, layout=layout)


def _store_counts(store: MetastoreBackend, now: datetime) -> StoreSizes:
    from sqlalchemy import func, select

    from statestore_cli.db.layout import layout_of
    from statestore_cli.db.schema import asset_state_store
    from statestore_cli.ops.cleanup import expired

    with store.connection() as conn:
        task = layout_of(conn).task
        count = select(func.count()).select_from(task)
        tasks = int(conn.execute(count).scalar_one())
        stale = int(conn.execute(count.where(expired(task, now))).scalar_one())
        assets = int(conn.execute(select(func.count()).select_from(asset_state_store)).scalar_one())
    return StoreSizes(tasks, stale, assets, now)


# -- keys ----------------------------------------------------------------------------------------------
def get_entry(settings: Settings, scope: StoreScope, key: str, *, raw: bool = False) -> Entry:
    """The key's decoded value with its scope and, on the metastore, its timestamps. ``raw``: the value
    as the store holds it (a worker-side reference unresolved), without loading the worker backend."""
    check_key(key)
    if raw:
        return _lookup(open_backend(settings, writes=False), scope, key, json.loads)
    acc = accessor(settings, scope, writes=False)

    def decode(stored: str) -> JsonValue:
        try:
            return acc.decode(stored, key)
        except Exception as exc:  # the worker backend is user code: any failure is its own
            raise BackendError(
                f"[workers] state_store_backend {settings.worker_backend} could not read key {key!r}: "
                f"{type(exc).__name__}: {first_line(exc)}; `get --raw` shows what the database holds"
            ) from None

    return _lookup(acc.backend, scope, key, decode)


def _lookup(backend: BaseStoreBackend, scope: StoreScope, key: str, decode: Callable[[str], JsonValue]) -> Entry:
    if isinstance(backend, MetastoreBackend):
        entry = backend.describe(scope, key)
        if entry is not None:
            return entry._replace(value=decode(entry.value))
        if isinstance(scope, TaskScope):  # more queries, on the not-found path only
            elsewhere = backend.other_map_indices(scope, key)
            raise missing_key(scope, key, run_exists=bool(elsewhere) or backend.has_run(scope), elsewhere=elsewhere)
        if isinstance(scope, DagRunScope):  # one more query, on the not-found path only
            raise missing_key(scope, key, run_exists=backend.has_run(scope))
        if isinstance(scope, AssetScope) and not backend.has_asset(scope):
            raise missing_asset(backend, scope)
    else:
        stored = backend.get(scope, key)
        if stored is not None:
            return _bare_entry(scope, key, decode(stored))
    raise missing_key(scope, key)


def missing_asset(backend: MetastoreBackend, scope: AssetScope) -> NotFoundError:
    """The error of an asset scope that names no asset, with the closest asset name when there is one."""
    if scope.asset_id is not None:
        return NotFoundError(f"no such asset: no asset has asset_id={scope.asset_id}")
    message = f"no such asset {scope.describe()}: no active asset has that {'name' if scope.name else 'uri'}"
    if scope.name:
        import difflib

        close = difflib.get_close_matches(scope.name, backend.known_ids("name"), n=1, cutoff=0.6)
        message += f"; did you mean {close[0]!r}?" if close else ""
    return NotFoundError(message)


def _bare_entry(scope: StoreScope, key: str, value: JsonValue) -> Entry:
    if isinstance(scope, TaskScope):
        return Entry("task", key, None, None, scope.dag_id, scope.run_id, scope.task_id, scope.map_index, value=value)
    if isinstance(scope, DagRunScope):
        return Entry("dag_run", key, None, None, scope.dag_id, scope.run_id, value=value)
    return Entry("asset", key, None, None, asset_id=scope.asset_id, name=scope.name, uri=scope.uri, value=value)


def set_value(
    settings: Settings, scope: StoreScope, key: str, value: JsonValue, retention: Retention = None
) -> datetime | None:
    """Write through the accessor (refusing oversized values); returns the stored ``expires_at``."""
    acc = accessor(settings, scope, oversize="error")
    if isinstance(acc, TaskStateStoreAccessor):  # a dag-run accessor too: its keys expire as well
        return acc.set(key, value, retention)
    if retention is not None:
        raise InvalidInputError(
            f"{PARAMETER} applies to task and dag-run keys only; asset keys never expire", parameter="retention"
        )
    acc.set(key, value)
    return None


def set_value_until(
    settings: Settings, scope: StoreScope, key: str, value: JsonValue, expires_at: datetime, *, force: bool = False
) -> datetime:
    """Write a task key that expires at ``expires_at`` (timezone-aware); an instant already past is
    refused unless ``force`` (the next clean deletes such a key). Returns the stored expiry, in UTC."""
    if isinstance(scope, AssetScope):
        raise InvalidInputError(
            f"{PARAMETER} applies to task and dag-run keys only; asset keys never expire", parameter="expires_at"
        )
    acc = accessor(settings, scope, oversize="error")
    assert isinstance(acc, TaskStateStoreAccessor)
    if expires_at.tzinfo is not None and expires_at <= utcnow() and not force:
        raise InvalidInputError(
            f"the expiry {expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC is in the past: the next clean would "
            f"delete the key; pass {PARAMETER} to write it anyway",
            parameter="force",
        )
    acc.set_until(key, value, expires_at)
    return expires_at.astimezone(UTC)


def replace_value(settings: Settings, scope: StoreScope, key: str, value: JsonValue) -> None:
    """Replace an existing key's value and keep its expiry (Airflow's PATCH); a missing key is a
    ``NotFoundError`` and nothing is written."""
    accessor(settings, scope, oversize="error").replace(key, value)


def delete_key(settings: Settings, scope: StoreScope, key: str) -> int | None:
    """Delete one key; returns how many rows went (0: it was not there) when the backend says."""
    acc = accessor(settings, scope)
    removed = acc.backend.delete(scope, check_key(key))
    worker = acc.worker_backend
    if worker is not None:
        _worker_step(settings, f"deleted key {key!r}", lambda: worker.delete(scope, key))
    return removed


def _worker_step(settings: Settings, done: str, step: Callable[[], object], *, many: bool = False) -> None:
    """The worker backend's half of a delete or clear, run after the database rows went: a failure
    leaves orphaned objects, and says so."""
    try:
        step()
    except Exception as exc:  # user code: any failure is the backend's
        raise BackendError(
            f"{done} in the database, but [workers] state_store_backend {settings.worker_backend} failed to "
            f"remove {'their objects' if many else 'its object'} ({type(exc).__name__}: {first_line(exc)}): "
            f"{'they are' if many else 'it is'} orphaned until the next set of the same key overwrites "
            f"{'each' if many else 'it'}; `statestore orphans` lists such objects"
        ) from None


def backup_metastore(settings: Settings) -> MetastoreBackend:
    """The metastore backend a backed-up clear reads its rows from; ``InvalidInputError`` for a custom
    ``[state_store] backend``, whose keys are not in the tables."""
    store = open_backend(settings)
    if not isinstance(store, MetastoreBackend):
        raise InvalidInputError(
            f"{PARAMETER} reads the rows a clear deletes from the state store tables, and [state_store] backend "
            f"{settings.backend} keeps its keys elsewhere: drop {PARAMETER}",
            parameter="backup",
        )
    return store


def _clear_backed_up(
    settings: Settings, scope: StoreScope, backup: BackupFile, *, all_map_indices: bool = False
) -> int:
    """``clear`` of one scope (a task, all its map indices, a dag run's own keys, an asset) in one transaction,
    every key written to ``backup`` and synced before the commit; returns the keys deleted. A worker-side
    backend's objects are kept: the backup's references point at them."""
    from functools import partial

    from sqlalchemy import select

    from statestore_cli.backends.key_conditions import dag_run_where, task_where
    from statestore_cli.db.database import retry_deadlocks, translate_errors
    from statestore_cli.db.layout import layout_of
    from statestore_cli.db.schema import asset, asset_state_store
    from statestore_cli.ops.backup import backed_up_batch
    from statestore_cli.ops.backup_rows import asset_rows, dag_run_rows, task_rows

    store = backup_metastore(settings)
    with translate_errors(store.engine), store.engine.connect() as conn:
        if isinstance(scope, TaskScope):
            layout = layout_of(conn)
            rows = task_rows(layout.task, task_where(layout, scope, None, all_map_indices))
        elif isinstance(scope, DagRunScope):
            table, where = dag_run_where(conn, scope)
            rows = dag_run_rows(table, where)
        else:
            found = store.find_asset_id(conn, scope, create=False)
            names = select(asset.c.name, asset.c.uri).where(asset.c.id == found)
            pair = None if found is None else conn.execute(names).first()
            if found is None or pair is None:
                conn.rollback()
                backup.start()
                return 0
            rows = asset_rows(asset_state_store.c.asset_id == found, pair.name, pair.uri)
        conn.commit()
        return retry_deadlocks(partial(backed_up_batch, conn, rows, backup, 0)).deleted


def count_keys(settings: Settings, scope: StoreScope, *, all_map_indices: bool = False) -> int | None:
    backend = open_backend(settings)
    return backend.count(scope, all_map_indices=all_map_indices) if isinstance(backend, MetastoreBackend) else None


def keys_elsewhere(settings: Settings, scope: StoreScope, key: str | None = None) -> list[tuple[int, int]]:
    """For a task scope: ``(map_index, keys)`` of its task's other map indices that hold keys (``key``: that
    one), as a clear or delete that found nothing says; [] for another scope or a backend that cannot say."""
    if not isinstance(scope, TaskScope):
        return []
    backend = open_backend(settings, writes=False)
    return backend.other_map_indices(scope, key) if isinstance(backend, MetastoreBackend) else []


def clear_scope(
    settings: Settings, scope: StoreScope, *, all_map_indices: bool = False, backup: BackupFile | None = None
) -> int | None:
    """Delete every key of ``scope``; with ``backup``, each written to it and synced before the delete commits
    (the metastore backend only; a worker-side backend's objects are then kept for the backup's references)."""
    if backup is not None:
        return _clear_backed_up(settings, scope, backup, all_map_indices=all_map_indices)
    acc = accessor(settings, scope)
    removed = acc.backend.clear(scope, all_map_indices=all_map_indices)
    worker = acc.worker_backend
    if worker is not None:
        _worker_step(
            settings, "cleared the keys", lambda: worker.clear(scope, all_map_indices=all_map_indices), many=True
        )
    return removed


def list_entries(settings: Settings, filt: KeyFilter, *, limit: int | None = None, offset: int = 0) -> Iterator[Entry]:
    """The keys ``filt`` selects, ordered by scope and key (task keys by dag, run, task, map index and key,
    then asset keys); ``offset`` skips that many and ``limit`` stops after that many, in the database."""
    backend = open_backend(settings, writes=False)
    if not isinstance(backend, MetastoreBackend):
        raise BackendError(f"`list` needs the metastore backend; [state_store] backend is {settings.backend}")
    return backend.entries(filt, limit=limit, offset=offset)


def near_misses(settings: Settings, filt: KeyFilter) -> list[str]:
    """For a ``list`` or ``stats`` that found nothing: for each of ``filt``'s dag id, task id and asset name
    that no key (no asset) has, the closest existing one, as "no dag_id 'etl_order_daily' has keys; did you
    mean 'etl_orders_daily'?". Reads the distinct ids, so call it only when the result is empty."""
    backend = open_backend(settings, writes=False)
    if not isinstance(backend, MetastoreBackend):
        return []
    import difflib

    notes = []
    asks = (("dag_id", filt.dag_id, None), ("task_id", filt.task_id, filt.dag_id), ("name", filt.name, None))
    for field, given, within in asks:
        if given is None:
            continue
        known = backend.known_ids(field, within)
        if given in known:
            continue
        close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        if not close:
            continue
        if field == "name":
            notes.append(f"no asset is named {given!r}; did you mean {close[0]!r}?")
        else:
            of = f" of dag_id {within!r}" if within is not None and field != "dag_id" else ""
            notes.append(f"no {field} {given!r}{of} has keys; did you mean {close[0]!r}?")
    return notes


def stats(settings: Settings, filt: KeyFilter, now: datetime | None = None, largest: int | None = None) -> StoreStats:
    """Figures of the keys ``filt`` selects (``statestore_cli.ops.stats``), as of ``now`` (default: this moment),
    and with ``largest=N`` their N largest values (``statestore_cli.ops.largest``)."""
    backend = open_backend(settings, writes=False)
    if not isinstance(backend, MetastoreBackend):
        raise BackendError(f"`stats` needs the metastore backend; [state_store] backend is {settings.backend}")
    from statestore_cli.ops.stats import store_stats

    return store_stats(
        backend.engine,
        filt,
        now or utcnow(),
        max_value_storage_bytes=settings.max_value_storage_bytes,
        largest=largest,
    )


def stats_metrics(settings: Settings, figures: StoreStats, labels: Mapping[str, str]) -> StatsMetrics:
    """The gauges ``stats --metrics-file`` writes for ``figures``: those, and the age of the oldest expired
    task key the same filter selects (0 when none has expired)."""
    from statestore_cli.ops.metrics import StatsMetrics
    from statestore_cli.ops.stats import oldest_expired_at

    age: float | None = None
    if figures.task is not None:
        backend = open_backend(settings, writes=False)
        assert isinstance(backend, MetastoreBackend)  # stats() has checked it
        oldest = oldest_expired_at(backend.engine, figures.filter, figures.now)
        age = 0 if oldest is None else max(0.0, (figures.now - oldest).total_seconds())
    return StatsMetrics.of(figures, age, labels)


# -- clean ---------------------------------------------------------------------------------------------
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
    settings: Settings, now: datetime | None = None, older_than: timedelta | None = None
) -> tuple[datetime, timedelta]:
    """The cutoff a clean at ``now`` deletes keys expired before, and the grace window behind it:
    ``older_than``, else ``[state_store] state_cleanup_older_than``. A dry run, a real run and the
    count of what is left all take it from here, so they select the same rows."""
    grace = settings.state_cleanup_older_than if older_than is None else older_than
    if grace < timedelta(0):
        raise InvalidInputError(
            f"{PARAMETER} must not be negative, got {grace.total_seconds():g} seconds", parameter="older_than"
        )
    return clean_cutoff(now or utcnow(), grace), grace


def plan_clean(
    settings: Settings,
    now: datetime | None = None,
    older_than: timedelta | None = None,
    *,
    include_unfinished: bool = False,
) -> CleanPlan:
    """What a clean at ``now`` would delete (streamed), without deleting anything, and what it would keep
    for unfinished task instances (none with ``include_unfinished``)."""
    cutoff, grace = clean_window(settings, now, older_than)
    reason = _skip_reason(settings)
    if reason:
        return CleanPlan(cutoff, iter(()), reason, grace)
    from statestore_cli.ops.cleanup import iter_expired, spares

    engine = open_metastore(settings).engine
    # counted as the rows are listed: complete once they all were
    spared: dict[str, int] | None = None if include_unfinished or not spares(engine) else {}
    rows = iter_expired(engine, cutoff, not include_unfinished, spared)
    return CleanPlan(cutoff, rows, None, grace, spared)


def clean(
    settings: Settings,
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
    keys of unfinished task instances are kept unless ``include_unfinished`` (see ``cleanup.cleaned``)."""
    cutoff, grace = clean_window(settings, now, older_than)
    reason = _skip_reason(settings)
    if reason:
        return CleanSkipped(reason)
    size = settings.state_cleanup_batch_size if batch_size is None else batch_size
    from statestore_cli.ops.cleanup import delete_expired

    engine = open_metastore(settings).engine
    report = delete_expired(engine, cutoff, size, control, backup, spare=not include_unfinished)
    return replace(report, older_than=grace)


def count_expired_keys(
    settings: Settings,
    now: datetime | None = None,
    older_than: timedelta | None = None,
    *,
    include_unfinished: bool = False,
) -> int:
    """How many task keys a clean at ``now`` deletes (0 with a custom backend)."""
    cutoff, _ = clean_window(settings, now, older_than)
    if _skip_reason(settings):
        return 0
    from statestore_cli.ops.cleanup import count_expired

    return count_expired(open_metastore(settings).engine, cutoff, not include_unfinished)


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


def backend_cleanup(settings: Settings) -> BackendCleanup:
    """Run the custom ``[state_store] backend``'s own ``cleanup()`` and return what it returned."""
    if settings.uses_builtin_backend:
        raise InvalidInputError(
            "backend cleanup runs a custom [state_store] backend's cleanup(); the metastore backend has none: "
            "`clean` itself deletes its expired keys"
        )
    backend = open_backend(settings)
    import time

    started = time.monotonic()
    try:
        result = backend.cleanup()
    except Exception as exc:  # user code: any failure is the backend's
        raise BackendError(f"{settings.backend}.cleanup() failed: {type(exc).__name__}: {first_line(exc)}") from None
    return BackendCleanup(settings.backend, result, time.monotonic() - started)


# -- config --------------------------------------------------------------------------------------------
class ConfigRow(NamedTuple):
    section: str
    option: str
    value: Any
    source: str
    description: str
    parameter: str | None = None  # the source is this parameter of load_settings (conn_override)


def config_rows(settings: Settings) -> list[ConfigRow]:
    rows = []
    for setting in settings:
        value = setting.value
        if setting.spec.secret and isinstance(value, str) and value:
            value = mask_url(parse_url(value)) if setting.spec.type == "url" else "***"
        parameter = CONN_OVERRIDE if setting.source == CONN_OVERRIDE else None
        spec = setting.spec
        rows.append(ConfigRow(spec.section, spec.option, value, describe_source(setting), spec.description, parameter))
    return rows
