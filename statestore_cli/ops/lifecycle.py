"""The rules that remove keys other than by expiry.

- The orphan sweep: asset keys of assets that are no longer active (no ``asset_active`` row). The
  dry run and the real run share ``inactive()``; the real run deletes asset by asset, in batches of
  keys, and each delete re-checks that the asset is still inactive, so an asset reactivated while
  the sweep runs keeps its keys. A sweep that was confirmed is held to the assets the question
  named (``only``): one that went inactive while the operator read it is left for the next sweep.
- Clearing every task key of a run or of a dag, in batches.
- Deleting a run or an asset of a standalone store: the foreign keys' ``ON DELETE CASCADE`` removes
  its keys, as in Airflow. Refused on an Airflow database, whose runs and assets are Airflow's.
- The two task-instance events an integration reports: success (``clear_on_success``) and being
  cleared for a re-run (``keep_task_state``).

Where a worker-side backend is configured, its ``clear()`` runs for each scope whose rows went, after
they are gone (the database reference first, then the external payload).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple

from sqlalchemy import Table, and_, bindparam, delete, exists, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement

from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.backends.store import Store
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.db.layout import layout_of
from statestore_cli.db.mysql_text import check_asset_text
from statestore_cli.db.schema import asset, asset_active, asset_state_store, dag_run
from statestore_cli.db.schema_state import alembic_version_table
from statestore_cli.errors import BackendError, InvalidInputError, NotFoundError, failed_midway
from statestore_cli.model.scopes import AssetScope, TaskScope
from statestore_cli.ops.backup import backed_up_batch
from statestore_cli.ops.backup_file import BackupFile, with_backup
from statestore_cli.ops.backup_rows import Selection, asset_rows, assets_rows, dag_run_rows, task_rows

_akv = asset_state_store


# -- the orphan sweep -------------------------------------------------------------------------------------
class SweepRow(NamedTuple):
    """One asset key the sweep deletes."""

    asset_id: int
    name: str
    uri: str
    key: str


class SweptAsset(NamedTuple):
    """One inactive asset and its keys: the keys a dry run lists, or how many a real run deleted."""

    asset_id: int
    name: str
    uri: str
    keys: tuple[str, ...]
    deleted: int


class SweepReport(NamedTuple):
    deleted: int
    batches: int
    batch_size: int
    assets: tuple[SweptAsset, ...]
    elapsed: float


def inactive() -> ColumnElement[bool]:
    """The one selection both runs use: asset keys whose asset has no ``asset_active`` row."""
    active = (
        select(asset.c.id)
        .join(asset_active, and_(asset_active.c.name == asset.c.name, asset_active.c.uri == asset.c.uri))
        .where(asset.c.id == _akv.c.asset_id)
        .correlate(_akv)  # only the key's row: the subquery's own asset is the joined one
    )
    return ~exists(active)


def swept(only: Collection[int] | None = None) -> ColumnElement[bool]:
    """The keys a sweep deletes: ``inactive()``, and with ``only`` just those of the assets whose ids it holds
    (those a confirmation named). The ids are written into the statement (integers), so that no count of them
    meets a driver's limit on parameters."""
    if only is None:
        return inactive()
    ids: Any = bindparam("swept_asset_ids", sorted(only), expanding=True, literal_execute=True)
    return and_(_akv.c.asset_id.in_(ids), inactive())


def iter_inactive(engine: Engine) -> Iterator[SweepRow]:
    """What a sweep deletes, ordered by asset name, uri and key; streamed."""
    query = (
        select(asset.c.id, asset.c.name, asset.c.uri, _akv.c.key)
        .join(asset, asset.c.id == _akv.c.asset_id)
        .where(inactive())
        .order_by(asset.c.name, asset.c.uri, asset.c.id, _akv.c.key)
    )
    with translate_errors(engine), engine.connect() as conn:
        for chunk in conn.execution_options(yield_per=1000).execute(query).partitions():
            for asset_id, name, uri, key in chunk:
                yield SweepRow(asset_id, name, uri, key)


def by_asset(rows: Iterator[SweepRow]) -> Iterator[SweptAsset]:
    """``iter_inactive`` rows grouped by asset (they come ordered by it)."""
    current: SweepRow | None = None
    keys: list[str] = []
    for row in rows:
        if current is not None and row.asset_id != current.asset_id:
            yield SweptAsset(current.asset_id, current.name, current.uri, tuple(keys), 0)
            keys = []
        current = row
        keys.append(row.key)
    if current is not None:
        yield SweptAsset(current.asset_id, current.name, current.uri, tuple(keys), 0)


def sweep_inactive(
    engine: Engine,
    batch_size: int,
    worker: BaseStoreBackend | None = None,
    pause: Callable[[float], None] = time.sleep,
    backup: BackupFile | None = None,
    only: Collection[int] | None = None,
) -> SweepReport:
    """Delete what ``iter_inactive`` lists (of the assets ``only`` holds, where given: see ``swept``): per asset
    in one statement, or ``batch_size`` keys per commit. With ``backup`` every key is written to it first, each
    batch synced before it commits; the worker-side backend's objects are then kept, so that the backup's
    references still point at them."""
    if batch_size < 0:
        raise InvalidInputError(f"batch size must be 0 (one statement) or a positive number, got {batch_size}")
    if only is not None and not only:
        return SweepReport(0, 0, batch_size, (), 0.0)
    if backup is not None:
        return _sweep_backed_up(engine, batch_size, pause, backup, only)
    started = time.monotonic()
    with translate_errors(engine):
        if batch_size == 0:
            gone, batches = _sweep_at_once(engine, only)
            _clear_worker_assets(worker, gone)
            return SweepReport(sum(a.deleted for a in gone), batches, 0, tuple(gone), time.monotonic() - started)
        with engine.connect() as conn:
            candidates = _inactive_assets(conn, only)
    done: list[SweptAsset] = []
    tally = _Tally()
    try:
        with translate_errors(engine):
            for asset_id, name, uri in candidates:
                where = and_(_akv.c.asset_id == asset_id, inactive())
                deleted, _used = _delete_batched(engine, _akv.c.key, where, batch_size, pause, tally=tally)
                if deleted:
                    done.append(SweptAsset(asset_id, name, uri, (), deleted))
                    _clear_worker_assets(worker, done[-1:])
    except BackendError as exc:
        raise failed_midway(exc, "assets sweep", tally.deleted, tally.batches) from None
    return SweepReport(tally.deleted, tally.batches, batch_size, tuple(done), time.monotonic() - started)


def _inactive_assets(conn: Connection, only: Collection[int] | None) -> list[Any]:
    """The inactive assets that have keys (of ``only``), in the order a sweep takes them: (asset id, name, uri)."""
    query = (
        select(asset.c.id, asset.c.name, asset.c.uri)
        .distinct()
        .join(_akv, _akv.c.asset_id == asset.c.id)
        .where(swept(only))
        .order_by(asset.c.name, asset.c.uri, asset.c.id)
    )
    return list(conn.execute(query).all())


def _sweep_backed_up(
    engine: Engine, batch_size: int, pause: Callable[[float], None], backup: BackupFile, only: Collection[int] | None
) -> SweepReport:
    """The sweep with every key written to ``backup`` before its batch commits (``statestore_cli.ops.backup``)."""
    started = time.monotonic()
    done: list[SweptAsset] = []
    tally = _Tally()
    try:
        with translate_errors(engine), engine.connect() as conn:
            try:
                _tune(conn)
                backup.start()
                if batch_size == 0:
                    done = _sweep_at_once_backed_up(conn, backup, only)
                    tally.deleted, tally.batches = sum(a.deleted for a in done), 1 if done else 0
                else:
                    with conn.begin():
                        candidates = _inactive_assets(conn, only)
                    for asset_id, name, uri in candidates:
                        rows = asset_rows(and_(_akv.c.asset_id == asset_id, inactive()), name, uri)
                        deleted = _walk_backed_up(conn, rows, batch_size, pause, tally, backup)
                        if deleted:
                            done.append(SweptAsset(asset_id, name, uri, (), deleted))
            finally:
                conn.invalidate()  # the tuned session must not reach the next user of the pool
    except BackendError as exc:
        raise with_backup(failed_midway(exc, "assets sweep", tally.deleted, tally.batches), backup) from None
    return SweepReport(tally.deleted, tally.batches, batch_size, tuple(done), time.monotonic() - started)


def _sweep_at_once_backed_up(conn: Connection, backup: BackupFile, only: Collection[int] | None) -> list[SweptAsset]:
    """Every inactive asset's keys (of ``only``) in one transaction, written to ``backup`` first; counted per
    asset."""

    def attempt() -> list[SweptAsset]:
        gone: Counter[tuple[int, str, str]] = Counter()
        rows = assets_rows(swept(only))

        def record(row: Any) -> dict[str, Any]:
            gone[(row[0], row[1], row[2])] += 1
            return rows.record(row)

        backed_up_batch(conn, replace(rows, record=record), backup, 0)
        return [SweptAsset(i, n, u, (), count) for (i, n, u), count in gone.items()]

    return sorted(retry_deadlocks(attempt), key=lambda a: (a.name, a.uri, a.asset_id))


def _walk_backed_up(
    conn: Connection,
    rows: Selection,
    batch_size: int,
    pause: Callable[[float], None],
    tally: _Tally,
    backup: BackupFile,
) -> int:
    """The batches of a backed-up delete of ``rows``, each its own transaction, walking ``rows.order``;
    each committed batch is added to ``tally``. Returns the rows deleted."""
    before = tally.deleted
    after: Any = None
    while True:
        started = time.monotonic()
        batch = retry_deadlocks(partial(backed_up_batch, conn, rows, backup, batch_size, after))
        tally.deleted, tally.batches = tally.deleted + batch.deleted, tally.batches + (1 if batch.deleted else 0)
        if batch.after is None:
            return tally.deleted - before
        after = batch.after
        if conn.dialect.name == "sqlite":  # let waiting writers take SQLite's one write lock
            pause(min(0.1, (time.monotonic() - started) / 4))


def _sweep_at_once(engine: Engine, only: Collection[int] | None) -> tuple[list[SweptAsset], int]:
    """The sweep in one statement and one transaction (one commit, where a commit per asset would cost
    a sync each on SQLite). The per-asset counts are those of the rows deleted: ``DELETE ... RETURNING``
    where the engine has it, else (MySQL) the rows are locked as they are counted, then deleted."""
    where = swept(only)
    with engine.connect() as conn, conn.begin():
        if conn.dialect.delete_returning:
            gone = Counter(conn.execute(delete(_akv).where(where).returning(_akv.c.asset_id)).scalars())
        else:
            gone = Counter(conn.execute(select(_akv.c.asset_id).where(where).with_for_update()).scalars())
            deleted = _checked(conn.execute(delete(_akv).where(where)).rowcount)
            if deleted != sum(gone.values()):
                raise BackendError(f"the sweep counted {sum(gone.values())} keys and deleted {deleted}")
        names = conn.execute(select(asset.c.id, asset.c.name, asset.c.uri).where(asset.c.id.in_(list(gone)))).all()
    done = sorted((SweptAsset(i, n, u, (), gone[i]) for i, n, u in names), key=lambda a: (a.name, a.uri, a.asset_id))
    return done, 1 if gone else 0


def _clear_worker_assets(worker: BaseStoreBackend | None, swept: list[SweptAsset]) -> None:
    for a in swept if worker is not None else ():
        worker.clear(AssetScope(asset_id=a.asset_id, name=a.name, uri=a.uri))  # type: ignore[union-attr]


# -- batched deletes --------------------------------------------------------------------------------------
@dataclass
class _Tally:
    """Keys deleted and batches committed so far, for the message of a delete that fails midway."""

    deleted: int = 0
    batches: int = 0


def _delete_batched(
    engine: Engine,
    order: ColumnElement[object],
    where: ColumnElement[bool],
    batch_size: int,
    pause: Callable[[float], None],
    walk: ColumnElement[bool] | None = None,
    tally: _Tally | None = None,
) -> tuple[int, int]:
    """Delete the rows ``where`` selects, ``batch_size`` per transaction walking ``order`` (a unique
    column within ``where``), or all in one statement with 0; returns (rows deleted, batches).

    A batch finds the value that ends the next ``batch_size`` rows and deletes the rows up to it: no
    ``LIMIT`` in a sub-select (MySQL refuses one) and no list of keys sent back to the server. Every
    delete repeats the selection, so a row that stopped matching since it was counted stays. ``walk``
    is the same selection written so that the engine walks ``order`` rather than an index of
    ``where``'s columns; the walk is bounded by the first and last ``order`` value ``where`` selects.
    """
    table = order.table
    with engine.connect() as conn:
        try:
            _tune(conn)
            if batch_size == 0:
                count = _run(conn, delete(table).where(where))
                return count, 1 if count else 0
            return _walk(conn, table, order, where, batch_size, pause, walk, tally or _Tally())
        finally:
            conn.invalidate()  # the tuned session must not reach the next user of the pool


def _tune(conn: Connection) -> None:
    """On SQLite, the session clean uses: nothing references the two key tables, so deleting from them
    needs no foreign-key checks, and a 4 MiB page cache keeps the index pages consecutive batches share."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("PRAGMA foreign_keys = OFF")
        conn.exec_driver_sql("PRAGMA cache_size = -4096")
        conn.commit()


def _walk(
    conn: Connection,
    table: Any,
    order: ColumnElement[object],
    where: ColumnElement[bool],
    batch_size: int,
    pause: Callable[[float], None],
    walk: ColumnElement[bool] | None,
    tally: _Tally,
) -> tuple[int, int]:
    """The batches of ``_delete_batched``, each its own transaction, from the first to the last
    ``order`` value ``where`` selects when the walk starts; each committed batch is added to ``tally``."""
    with conn.begin():
        first, last = conn.execute(select(func.min(order), func.max(order)).where(where)).one()
    if first is None:
        return 0, 0
    bounded_walk = and_(walk if walk is not None else where, order >= first, order <= last)
    before = (tally.deleted, tally.batches)
    after: object = None
    while True:
        started = time.monotonic()
        walked = bounded_walk if after is None else and_(bounded_walk, order > after)
        end = select(order).where(walked).order_by(order).limit(1).offset(batch_size - 1)

        def batch(walked: ColumnElement[bool] = walked, end: Any = end) -> tuple[int, object]:
            with conn.begin():
                upper = conn.execute(end).scalar()
                bounded = walked if upper is None else and_(walked, order <= upper)
                return _checked(conn.execute(delete(table).where(bounded)).rowcount), upper

        count, after = retry_deadlocks(batch)
        tally.deleted, tally.batches = tally.deleted + count, tally.batches + (1 if count else 0)
        if after is None:
            return tally.deleted - before[0], tally.batches - before[1]
        if conn.dialect.name == "sqlite":  # let waiting writers take SQLite's one write lock
            pause(min(0.1, (time.monotonic() - started) / 4))


def _run(conn: Connection, stmt: object) -> int:
    def once() -> int:
        with conn.begin():
            return _checked(conn.execute(stmt).rowcount)  # type: ignore[call-overload]

    return retry_deadlocks(once)


def _checked(rowcount: int) -> int:
    if rowcount is None or rowcount < 0:
        raise BackendError("the database did not report how many rows a delete removed")
    return int(rowcount)


# -- a whole run or dag -----------------------------------------------------------------------------------
def _task_selection(table: Table, dag_id: str, run_id: str | None, *, walking: str = "") -> ColumnElement[bool]:
    """The keys of a dag or run in ``table`` (the task or the dag-run store). ``walking`` names the engine
    of a batched delete walking the primary key: on SQLite the columns are wrapped (``dag_id || ''``) so
    that the index on them is not used, since SQLite would otherwise read every remaining row of the dag
    from it for each batch."""
    dag, run = table.c.dag_id, table.c.run_id
    if walking == "sqlite":
        dag, run = dag.concat(""), run.concat("")  # type: ignore[assignment]
    parts = [dag == dag_id] + ([run == run_id] if run_id is not None else [])
    return and_(*parts)


def describe_run_or_dag(dag_id: str, run_id: str | None) -> str:
    return f"dag_id={dag_id}" + (f" run_id={run_id}" if run_id is not None else "")


def _run_tables(conn: Connection) -> tuple[Table, ...]:
    """The tables holding keys of a run: the task store, and the dag-run store where the layout has one."""
    layout = layout_of(conn)
    return (layout.task, *((layout.dag_run_store,) if layout.dag_run_store is not None else ()))


def count_task_keys(store: Store, dag_id: str, run_id: str | None = None) -> int:
    """How many keys a dag (or one of its runs) holds: its task keys, and its dag-run keys (Airflow 3.4)."""
    with store.metastore_backend("counting the keys of a run or dag").connection() as conn:
        counts = [
            select(func.count()).select_from(t).where(_task_selection(t, dag_id, run_id)) for t in _run_tables(conn)
        ]
        return sum(int(conn.execute(count).scalar_one()) for count in counts)


def _tasks_of(conn: Connection, where: ColumnElement[bool]) -> list[TaskScope]:
    """The task instances (all map indices) whose rows ``where`` selects: what a worker backend clears."""
    # With the task id's length, MySQL's DISTINCT keeps `t` and `t ` apart (its collation ignores trailing
    # spaces); a dag run there is unique by dag and run id, so those cannot have such twins.
    task = layout_of(conn).task
    task_id = task.c.task_id
    query = select(task.c.dag_id, task.c.run_id, task_id, func.length(task_id)).where(where).distinct()
    return [TaskScope(d, r, t) for d, r, t, _ in conn.execute(query)]


def _clear_worker(worker: BaseStoreBackend | None, tasks: list[TaskScope]) -> None:
    for scope in tasks:
        worker.clear(scope, all_map_indices=True)  # type: ignore[union-attr]


def clear_task_keys(
    store: Store,
    dag_id: str,
    run_id: str | None = None,
    batch_size: int | None = None,
    backup: BackupFile | None = None,
) -> tuple[int, int]:
    """Delete every key of a dag (or one of its runs): its task keys, then its dag-run keys (Airflow
    3.4), ``batch_size`` per commit (default ``state_cleanup_batch_size``; 0: one statement); returns
    (keys deleted, batches). With ``backup`` every key is written to it first, each batch synced before it
    commits, and a worker-side backend's objects are kept (the backup's references point at them)."""
    metastore = store.metastore_backend("clearing a whole run or dag")
    size = store.settings.state_cleanup_batch_size if batch_size is None else batch_size
    if size < 0:
        raise InvalidInputError(f"batch size must be 0 (one statement) or a positive number, got {size}")
    engine = metastore.engine
    if backup is not None:
        return _clear_backed_up(engine, dag_id, run_id, size, backup)
    worker = store.worker_backend
    with metastore.connection() as conn:
        tables = _run_tables(conn)
        tasks = _tasks_of(conn, _task_selection(tables[0], dag_id, run_id)) if worker is not None else []
    tally = _Tally()
    deleted = batches = 0
    try:
        with translate_errors(engine):
            for table in tables:
                where = _task_selection(table, dag_id, run_id)
                walk = _task_selection(table, dag_id, run_id, walking=engine.dialect.name)
                done = _delete_batched(engine, table.c.id, where, size, time.sleep, walk, tally)
                deleted, batches = deleted + done[0], batches + done[1]
    except BackendError as exc:
        raise failed_midway(exc, "clear", tally.deleted, tally.batches) from None
    _clear_worker(worker, tasks)
    return deleted, batches


def _clear_backed_up(engine: Engine, dag_id: str, run_id: str | None, size: int, backup: BackupFile) -> tuple[int, int]:
    tally = _Tally()
    try:
        with translate_errors(engine), engine.connect() as conn:
            try:
                _tune(conn)
                tables = _run_tables(conn)
                conn.commit()
                backup.start()
                for table in tables:
                    where = _task_selection(table, dag_id, run_id)
                    walk = _task_selection(table, dag_id, run_id, walking=engine.dialect.name)
                    rows = task_rows if table is tables[0] else dag_run_rows
                    _walk_backed_up(conn, rows(table, where, walk), size, time.sleep, tally, backup)
            finally:
                conn.invalidate()  # the tuned session must not reach the next user of the pool
    except BackendError as exc:
        raise with_backup(failed_midway(exc, "clear", tally.deleted, tally.batches), backup) from None
    return tally.deleted, tally.batches


# -- deleting runs and assets of a standalone store ---------------------------------------------------------
def require_standalone(store: Store, what: str) -> None:
    """Raise ``InvalidInputError`` when the database is Airflow's: ``what`` is done with Airflow there."""
    _standalone_only(store.metastore_backend(what), what)


def _standalone_only(store: MetastoreBackend, what: str) -> None:
    with store.connection() as conn:
        if alembic_version_table(conn) is not None:
            raise InvalidInputError(
                f"this is an Airflow metadata database: {what} with Airflow (its UI, REST API or CLI), "
                "which removes their keys with them; statestore deletes runs and assets of a standalone store only"
            )


def delete_run(store: Store, dag_id: str, run_id: str) -> int:
    """Delete a dag run of a standalone store; the cascade removes its task keys. Returns how many went."""
    metastore = store.metastore_backend("deleting a run")
    _standalone_only(metastore, "delete dag runs")
    worker = store.worker_backend
    with metastore.connection() as conn:
        task = layout_of(conn).task
        where = _task_selection(task, dag_id, run_id)
        keys = int(conn.execute(select(func.count()).select_from(task).where(where)).scalar_one())
        tasks = _tasks_of(conn, where) if worker is not None else []
        gone = conn.execute(delete(dag_run).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)).rowcount
        if gone == 0:
            raise NotFoundError(f"no dag run dag_id={dag_id} run_id={run_id}")
    _clear_worker(worker, tasks)
    return keys


def count_run_keys(store: Store, dag_id: str, run_id: str) -> int | None:
    """The task keys of a run (None: no such run)."""
    with store.metastore_backend("deleting a run").connection() as conn:
        found = conn.execute(select(dag_run.c.id).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)).first()
        if found is None:
            return None
        task = layout_of(conn).task
        return int(
            conn.execute(select(func.count()).select_from(task).where(task.c.dag_run_id == found.id)).scalar_one()
        )


class FoundAsset(NamedTuple):
    """The one asset a scope names, as ``find_asset`` finds it: with its key count, active or not."""

    asset_id: int
    name: str
    uri: str
    keys: int
    active: bool


def find_asset(store: Store, scope: AssetScope) -> FoundAsset:
    """The one asset (active or not) ``scope`` names, with its key count; ``NotFoundError`` when none."""
    metastore = store.metastore_backend("deleting an asset")
    check_asset_text(metastore.engine.dialect.name, scope.name, scope.uri)
    conds = [asset.c.id == scope.asset_id] if scope.asset_id is not None else []
    conds += [asset.c.name == scope.name] if scope.name else []
    conds += [asset.c.uri == scope.uri] if scope.uri else []
    keys = select(func.count()).select_from(_akv).where(_akv.c.asset_id == asset.c.id).scalar_subquery()
    is_active = exists(
        select(asset_active.c.name).where(asset_active.c.name == asset.c.name, asset_active.c.uri == asset.c.uri)
    )
    query = select(asset.c.id, asset.c.name, asset.c.uri, keys, is_active).where(*conds).limit(2)
    with metastore.connection() as conn:
        rows = conn.execute(query).all()
    if not rows:
        raise NotFoundError(f"no asset {scope.describe()}")
    if len(rows) > 1:
        raise InvalidInputError(f"several assets match {scope.describe()}; give both name and uri, or asset_id")
    asset_id, name, uri, count, active = rows[0]
    return FoundAsset(int(asset_id), name, uri, int(count), bool(active))


def delete_asset(store: Store, scope: AssetScope) -> FoundAsset:
    """Delete an asset of a standalone store (active or not); the cascade removes its keys and its
    ``asset_active`` row. Returns the asset as it was, with the number of keys that went."""
    metastore = store.metastore_backend("deleting an asset")
    _standalone_only(metastore, "delete assets")
    found = find_asset(store, scope)
    with metastore.connection() as conn:
        keys = int(
            conn.execute(select(func.count()).select_from(_akv).where(_akv.c.asset_id == found.asset_id)).scalar_one()
        )
        if conn.execute(delete(asset).where(asset.c.id == found.asset_id)).rowcount == 0:
            raise NotFoundError(f"no asset {scope.describe()}")
    worker = store.worker_backend
    if worker is not None:
        worker.clear(AssetScope(asset_id=found.asset_id, name=found.name, uri=found.uri))
    return found._replace(keys=keys)


# -- task instance events ---------------------------------------------------------------------------------
def task_instance_succeeded(store: Store, scope: TaskScope) -> int | None:
    """A task instance reached ``success``: with ``[state_store] clear_on_success`` its task keys go (its
    map index only; asset keys never), then a worker-side backend's ``clear()`` runs. Returns the keys
    deleted: 0 when the setting is off, None when a custom backend does not say."""
    if not store.settings.clear_on_success:
        return 0
    return _clear_task_instance(store, scope)


def task_instance_cleared(store: Store, scope: TaskScope, *, keep_task_state: bool = False) -> int | None:
    """A task instance is being cleared (to run again): its task keys are discarded, unless
    ``keep_task_state``, then a worker-side backend's ``clear()`` runs. Returns the keys deleted (0 when
    kept, None when a custom backend does not say)."""
    if keep_task_state:
        return 0
    return _clear_task_instance(store, scope)


def _clear_task_instance(store: Store, scope: TaskScope) -> int | None:
    if not isinstance(scope, TaskScope):
        raise InvalidInputError("a task instance event needs a TaskScope")
    from statestore_cli.ops.keys import clear_scope

    return clear_scope(store, scope)


def plan_sweep(store: Store) -> Iterator[SweptAsset]:
    """What ``sweep`` deletes, grouped by asset."""
    return by_asset(iter_inactive(store.metastore_backend("the asset sweep").engine))


def sweep(
    store: Store,
    batch_size: int | None = None,
    backup: BackupFile | None = None,
    only: Collection[int] | None = None,
) -> SweepReport:
    """Delete the asset keys of inactive assets, ``batch_size`` per commit (default ``state_cleanup_batch_size``);
    with ``backup``, each written to it first (a worker-side backend's objects are then kept). ``only``: the ids
    of the assets ``plan_sweep`` showed and the operator confirmed; an asset that went inactive since keeps
    its keys (None: every inactive asset)."""
    engine = store.metastore_backend("the asset sweep").engine
    size = store.settings.state_cleanup_batch_size if batch_size is None else batch_size
    worker = None if backup is not None else store.worker_backend
    return sweep_inactive(engine, size, worker, backup=backup, only=only)
