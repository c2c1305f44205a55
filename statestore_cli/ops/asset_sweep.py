"""The orphan sweep (``assets sweep``): asset keys of assets that are no longer active (no ``asset_active``
row). The dry run and the real run share ``inactive()``; the real run deletes asset by asset, in batches of
keys, and each delete re-checks that the asset is still inactive, so an asset reactivated while the sweep
runs keeps its keys. A sweep that was confirmed is held to the assets the question named (``only``): one
that went inactive while the operator read it is left for the next sweep.

Where a worker-side backend is configured, its ``clear()`` runs for each asset whose keys went, after they
are gone (the database reference first, then the external payload); with a backup it is not run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from typing import Any, NamedTuple

from sqlalchemy import and_, bindparam, exists, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement

from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.backends.store import Store
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.schema import asset, asset_active, asset_state_store
from statestore_cli.errors import BackendError, failed_midway
from statestore_cli.model.scopes import AssetScope
from statestore_cli.ops.backup import backed_up_batch
from statestore_cli.ops.backup_file import BackupFile, with_backup
from statestore_cli.ops.backup_rows import asset_rows, assets_rows
from statestore_cli.ops.batched_deletes import delete_batched, tune, walk_backed_up
from statestore_cli.ops.batches import Tally, checked_batch_size, checked_rowcount

_akv = asset_state_store


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
    checked_batch_size(batch_size)
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
    tally = Tally()
    try:
        with translate_errors(engine):
            for asset_id, name, uri in candidates:
                where = and_(_akv.c.asset_id == asset_id, inactive())
                deleted, _used = delete_batched(engine, _akv.c.key, where, batch_size, pause, tally=tally)
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
    tally = Tally()
    try:
        with translate_errors(engine), engine.connect() as conn:
            try:
                tune(conn)
                backup.start()
                if batch_size == 0:
                    done = _sweep_at_once_backed_up(conn, backup, only)
                    tally.deleted, tally.batches = sum(a.deleted for a in done), 1 if done else 0
                else:
                    with conn.begin():
                        candidates = _inactive_assets(conn, only)
                    for asset_id, name, uri in candidates:
                        rows = asset_rows(and_(_akv.c.asset_id == asset_id, inactive()), name, uri)
                        deleted = walk_backed_up(conn, rows, batch_size, pause, tally, backup)
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

        def heard(row: Any) -> None:
            gone[(row[0], row[1], row[2])] += 1

        backed_up_batch(conn, assets_rows(swept(only), heard), backup, 0)
        return [SweptAsset(i, n, u, (), count) for (i, n, u), count in gone.items()]

    return sorted(retry_deadlocks(attempt), key=lambda a: (a.name, a.uri, a.asset_id))


def _sweep_at_once(engine: Engine, only: Collection[int] | None) -> tuple[list[SweptAsset], int]:
    """The sweep in one statement and one transaction (one commit, where a commit per asset would cost
    a sync each on SQLite). The per-asset counts are those of the rows deleted: ``DELETE ... RETURNING``
    where the engine has it, else (MySQL) the rows are locked as they are counted, then deleted."""
    where = swept(only)
    with engine.connect() as conn, conn.begin():
        ids, count = impl_of(conn).delete_counted(conn, _akv, where, _akv.c.asset_id)
        gone = Counter(ids)
        deleted = checked_rowcount(count)
        if deleted != len(ids):
            raise BackendError(f"the sweep counted {len(ids)} keys and deleted {deleted}")
        names = conn.execute(select(asset.c.id, asset.c.name, asset.c.uri).where(asset.c.id.in_(list(gone)))).all()
    done = sorted((SweptAsset(i, n, u, (), gone[i]) for i, n, u in names), key=lambda a: (a.name, a.uri, a.asset_id))
    return done, 1 if gone else 0


def _clear_worker_assets(worker: BaseStoreBackend | None, swept: list[SweptAsset]) -> None:
    for a in swept if worker is not None else ():
        worker.clear(AssetScope(asset_id=a.asset_id, name=a.name, uri=a.uri))  # type: ignore[union-attr]


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
