"""The commands on the keys of one scope: get, set, replace, delete, clear, and the counts their
messages name."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from statestore_cli.backends.accessors import TaskStateStoreAccessor
from statestore_cli.backends.base import BaseStoreBackend, JsonValue
from statestore_cli.backends.store import is_metastore
from statestore_cli.errors import PARAMETER, BackendError, InvalidInputError, NotFoundError, first_line
from statestore_cli.model.entries import Entry
from statestore_cli.model.retention import Retention, utcnow
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope, check_key, missing_key

if TYPE_CHECKING:  # imported where used: only a backed-up clear needs them, and they cost start-up
    from statestore_cli.backends.metastore import MetastoreBackend
    from statestore_cli.backends.store import Store
    from statestore_cli.ops.backup_file import BackupFile


def get_entry(store: Store, scope: StoreScope, key: str, *, raw: bool = False) -> Entry:
    """The key's decoded value with its scope and, on the metastore, its timestamps. ``raw``: the value
    as the store holds it (a worker-side reference unresolved), without loading the worker backend."""
    check_key(key)
    if raw:
        return _lookup(store.backend, scope, key, json.loads)
    acc = store.accessor(scope)
    worker = store.settings.worker_backend

    def decode(stored: str) -> JsonValue:
        try:
            return acc.decode(stored, key)
        except Exception as exc:  # the worker backend is user code: any failure is its own
            raise BackendError(
                f"[workers] state_store_backend {worker} could not read key {key!r}: "
                f"{type(exc).__name__}: {first_line(exc)}; `get --raw` shows what the database holds"
            ) from None

    return _lookup(acc.backend, scope, key, decode)


def _lookup(backend: BaseStoreBackend, scope: StoreScope, key: str, decode: Callable[[str], JsonValue]) -> Entry:
    entry = backend.describe(scope, key)
    if entry is not None:
        return entry._replace(value=decode(entry.value))
    raise _not_found(backend, scope, key)


def _not_found(backend: BaseStoreBackend, scope: StoreScope, key: str) -> NotFoundError:
    """Why ``key`` is not there, asked on this path only: no such asset, no such dag run, or the key is
    under other map indices."""
    if isinstance(scope, AssetScope):
        return missing_key(scope, key) if backend.has_asset(scope) else missing_asset(backend, scope)
    elsewhere = backend.other_map_indices(scope, key) if isinstance(scope, TaskScope) and is_metastore(backend) else []
    return missing_key(scope, key, run_exists=bool(elsewhere) or backend.has_run(scope), elsewhere=elsewhere)


def missing_asset(backend: BaseStoreBackend, scope: AssetScope) -> NotFoundError:
    """The error of an asset scope that names no asset, with the closest asset name when there is one."""
    if scope.asset_id is not None:
        return NotFoundError(f"no such asset: no asset has asset_id={scope.asset_id}")
    message = f"no such asset {scope.describe()}: no active asset has that {'name' if scope.name else 'uri'}"
    if scope.name:
        import difflib

        close = difflib.get_close_matches(scope.name, backend.asset_names(), n=1, cutoff=0.6)
        message += f"; did you mean {close[0]!r}?" if close else ""
    return NotFoundError(message)


def set_value(
    store: Store, scope: StoreScope, key: str, value: JsonValue, retention: Retention = None
) -> datetime | None:
    """Write through the accessor (refusing oversized values); returns the stored ``expires_at``."""
    acc = store.accessor(scope, oversize="error")
    if isinstance(acc, TaskStateStoreAccessor):  # a dag-run accessor too: its keys expire as well
        return acc.set(key, value, retention)
    if retention is not None:
        raise InvalidInputError(
            f"{PARAMETER} applies to task and dag-run keys only; asset keys never expire", parameter="retention"
        )
    acc.set(key, value)
    return None


def set_value_until(
    store: Store, scope: StoreScope, key: str, value: JsonValue, expires_at: datetime, *, force: bool = False
) -> datetime:
    """Write a task key that expires at ``expires_at`` (timezone-aware); an instant already past is
    refused unless ``force`` (the next clean deletes such a key). Returns the stored expiry, in UTC."""
    if isinstance(scope, AssetScope):
        raise InvalidInputError(
            f"{PARAMETER} applies to task and dag-run keys only; asset keys never expire", parameter="expires_at"
        )
    acc = store.accessor(scope, oversize="error")
    assert isinstance(acc, TaskStateStoreAccessor)
    if expires_at.tzinfo is not None and expires_at <= utcnow() and not force:
        raise InvalidInputError(
            f"the expiry {expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC is in the past: the next clean would "
            f"delete the key; pass {PARAMETER} to write it anyway",
            parameter="force",
        )
    acc.set_until(key, value, expires_at)
    return expires_at.astimezone(UTC)


def replace_value(store: Store, scope: StoreScope, key: str, value: JsonValue) -> None:
    """Replace an existing key's value and keep its expiry (Airflow's PATCH); a missing key is a
    ``NotFoundError`` and nothing is written."""
    store.accessor(scope, oversize="error").replace(key, value)


def delete_key(store: Store, scope: StoreScope, key: str) -> int | None:
    """Delete one key; returns how many rows went (0: it was not there) when the backend says."""
    acc = store.accessor(scope)
    removed = acc.backend.delete(scope, check_key(key))
    worker = acc.worker_backend
    if worker is not None:
        _worker_step(store, f"deleted key {key!r}", lambda: worker.delete(scope, key))
    return removed


def _worker_step(store: Store, done: str, step: Callable[[], object], *, many: bool = False) -> None:
    """The worker backend's half of a delete or clear, run after the database rows went: a failure
    leaves orphaned objects, and says so."""
    try:
        step()
    except Exception as exc:  # user code: any failure is the backend's
        raise BackendError(
            f"{done} in the database, but [workers] state_store_backend {store.settings.worker_backend} failed to "
            f"remove {'their objects' if many else 'its object'} ({type(exc).__name__}: {first_line(exc)}): "
            f"{'they are' if many else 'it is'} orphaned until the next set of the same key overwrites "
            f"{'each' if many else 'it'}; `statestore orphans` lists such objects"
        ) from None


def backup_metastore(store: Store) -> MetastoreBackend:
    """The metastore backend a backed-up clear reads its rows from; ``InvalidInputError`` for a custom
    ``[state_store] backend``, whose keys are not in the tables."""
    backend = store.backend
    if not is_metastore(backend):
        raise InvalidInputError(
            f"{PARAMETER} reads the rows a clear deletes from the state store tables, and [state_store] backend "
            f"{store.settings.backend} keeps its keys elsewhere: drop {PARAMETER}",
            parameter="backup",
        )
    return backend


def _clear_backed_up(store: Store, scope: StoreScope, backup: BackupFile, *, all_map_indices: bool = False) -> int:
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

    metastore = backup_metastore(store)
    with translate_errors(metastore.engine), metastore.engine.connect() as conn:
        if isinstance(scope, TaskScope):
            layout = layout_of(conn)
            rows = task_rows(layout.task, task_where(layout, scope, None, all_map_indices))
        elif isinstance(scope, DagRunScope):
            table, where = dag_run_where(conn, scope)
            rows = dag_run_rows(table, where)
        else:
            found = metastore.find_asset_id(conn, scope, create=False)
            names = select(asset.c.name, asset.c.uri).where(asset.c.id == found)
            pair = None if found is None else conn.execute(names).first()
            if found is None or pair is None:
                conn.rollback()
                backup.start()
                return 0
            rows = asset_rows(asset_state_store.c.asset_id == found, pair.name, pair.uri)
        conn.commit()
        return retry_deadlocks(partial(backed_up_batch, conn, rows, backup, 0)).deleted


def count_keys(store: Store, scope: StoreScope, *, all_map_indices: bool = False) -> int | None:
    """The keys of ``scope``; None where the backend cannot count them."""
    if store.api_mode:
        return store.api_backend().count(scope, all_map_indices=all_map_indices)
    backend = store.backend
    return backend.count(scope, all_map_indices=all_map_indices) if is_metastore(backend) else None


def keys_elsewhere(store: Store, scope: StoreScope, key: str | None = None) -> list[tuple[int, int]]:
    """For a task scope: ``(map_index, keys)`` of its task's other map indices that hold keys (``key``: that
    one), as a clear or delete that found nothing says; [] for another scope or a backend that cannot say."""
    if not isinstance(scope, TaskScope):
        return []
    backend = store.backend
    return backend.other_map_indices(scope, key) if is_metastore(backend) else []


def clear_scope(
    store: Store, scope: StoreScope, *, all_map_indices: bool = False, backup: BackupFile | None = None
) -> int | None:
    """Delete every key of ``scope``; with ``backup``, each written to it and synced before the delete commits
    (the metastore backend only; a worker-side backend's objects are then kept for the backup's references)."""
    if backup is not None:
        return _clear_backed_up(store, scope, backup, all_map_indices=all_map_indices)
    acc = store.accessor(scope)
    removed = acc.backend.clear(scope, all_map_indices=all_map_indices)
    worker = acc.worker_backend
    if worker is not None:
        _worker_step(store, "cleared the keys", lambda: worker.clear(scope, all_map_indices=all_map_indices), many=True)
    return removed
