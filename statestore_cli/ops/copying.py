"""``copy`` and ``copy --move``: the keys of one scope written to another, in one transaction.

Renaming a task or an asset in a DAG leaves its state behind: a task's keys are keyed by its task id, an
asset's by its row. A copy carries them over: each value and expiry as stored, ``updated_at`` the moment of
the copy. A worker-side backend's objects are read through its deserialize hook and written again for the
target scope through its serialize hook, so the target never shares the source's object.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy.engine import Connection

from statestore_cli.backends.accessors import AssetStateStoreAccessor, DagRunStateStoreAccessor, TaskStateStoreAccessor
from statestore_cli.backends.base import BaseStoreBackend, stored_ref
from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.backends.store import Store
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.errors import (
    BackendError,
    DatabaseError,
    IntegrityConflictError,
    InvalidInputError,
    NotFoundError,
    StateStoreError,
    first_line,
)
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope, check_key

_TO_TASK = "--to-dag-id, --to-run-id, --to-task-id or --to-map-index"
_TO_RUN = "--to-dag-id or --to-run-id"
_TO_ASSET = "--to-asset-name, --to-asset-uri or --to-asset-id"

Accessor = TaskStateStoreAccessor | AssetStateStoreAccessor | DagRunStateStoreAccessor


class CopyPlan(NamedTuple):
    """What a copy writes: the source keys it takes (sorted) and, of them, those the target holds already."""

    source: StoreScope
    target: StoreScope
    keys: tuple[str, ...]
    clashes: tuple[str, ...]


class CopyReport(NamedTuple):
    """What a copy wrote: ``copied`` keys, ``overwritten`` of them replacing a target key; ``moved``: the
    source keys were deleted in the same transaction."""

    source: StoreScope
    target: StoreScope
    copied: int
    overwritten: int
    moved: bool


def target_scope(source: StoreScope, to: KeyFilter) -> StoreScope:
    """The scope a copy writes to: ``to``'s fields (the ``--to-*`` options) over the source's, of the source's
    kind. A task's keys go to a task, a dag run's to a dag run, an asset's to an asset."""
    if isinstance(source, AssetScope):
        if to.has_task_fields:
            raise InvalidInputError(f"an asset's keys are copied to another asset; give {_TO_ASSET}")
        if not to.has_asset_fields:
            raise InvalidInputError("no target given", hint=f"give {_TO_ASSET}")
        return AssetScope(asset_id=to.asset_id, name=to.name, uri=to.uri)
    if to.has_asset_fields:
        kind = "a task's" if isinstance(source, TaskScope) else "a dag run's"
        options = _TO_TASK if isinstance(source, TaskScope) else _TO_RUN
        raise InvalidInputError(f"{kind} keys are copied to another scope of the same kind; give {options}")
    if isinstance(source, DagRunScope):
        if to.task_id is not None or to.map_index is not None:
            raise InvalidInputError(f"a dag run's keys are copied to another dag run; give {_TO_RUN}")
        if not to.has_task_fields:
            raise InvalidInputError("no target given", hint=f"give {_TO_RUN}")
        return DagRunScope(to.dag_id or source.dag_id, to.run_id or source.run_id)
    if not to.has_task_fields:
        raise InvalidInputError("no target given", hint=f"give {_TO_TASK}")
    return TaskScope(
        to.dag_id or source.dag_id,
        to.run_id or source.run_id,
        to.task_id or source.task_id,
        source.map_index if to.map_index is None else to.map_index,
        source.region_id,
    )


def plan_copy(store: Store, source: StoreScope, target: StoreScope, keys: Sequence[str] = ()) -> CopyPlan:
    """What ``copy_keys`` would write (``keys``: those of the source only; empty: all of them), read without
    writing: the question before a move or an overwrite counts from it."""
    metastore = store.metastore_backend("`copy`")
    with metastore.connection() as conn:
        plan, _ = _read(metastore, conn, source, target, keys)
    return plan


def copy_keys(
    store: Store,
    source: StoreScope,
    target: StoreScope,
    keys: Sequence[str] = (),
    *,
    move: bool = False,
    overwrite: bool = False,
) -> CopyReport:
    """Copy the keys of ``source`` (``keys``: those only) to ``target`` in one transaction; ``move`` deletes
    them from the source in the same transaction. A key the target holds already is refused (an
    ``InvalidInputError`` naming it, nothing written) unless ``overwrite``. With a worker-side backend, the
    moved source objects are deleted after the commit, as ``delete`` deletes them."""
    metastore = store.metastore_backend("`copy`")
    hooks = _Hooks(store, source, target)

    def transaction() -> tuple[CopyPlan, list[tuple[str, str]]]:
        with metastore.engine.begin() as conn:
            plan, entries = _read(metastore, conn, source, target, keys)
            if plan.clashes and not overwrite:
                raise clash_error(plan)
            carried = []
            for entry in entries:
                value, old_ref = hooks.carry(entry)
                metastore.set(target, entry.key, value, expires_at=entry.expires_at, session=conn, overwrite=overwrite)
                if move:
                    metastore.delete(source, entry.key, session=conn)
                if old_ref is not None and stored_ref(json.loads(value)) != old_ref:
                    carried.append((entry.key, old_ref))
            return plan, carried

    with translate_errors(metastore.engine):
        try:
            plan, carried = retry_deadlocks(transaction)
        except IntegrityConflictError:
            # Without --overwrite the copy inserts: a key another writer put at the target since the copy
            # read it is the unique key's error, and the transaction (the move's delete too) rolled back.
            raise DatabaseError(
                f"another writer changed {target.describe()} while this copy ran; nothing copied",
                hint="run the copy again (it names the keys the target now holds)",
            ) from None
    if move:
        hooks.delete_objects(source, [key for key, _ in carried])
    return CopyReport(source, target, len(plan.keys), len(plan.clashes), move)


def clash_error(plan: CopyPlan) -> InvalidInputError:
    """The refusal of a copy onto keys the target holds already."""
    count = len(plan.clashes)
    names = ", ".join(repr(key) for key in plan.clashes[:5]) + (", ..." if count > 5 else "")
    return InvalidInputError(
        f"{plan.target.describe()} already has {count} of the keys ({names}); nothing copied",
        hint="pass --overwrite to replace them",
    )


def _read(
    store: MetastoreBackend, conn: Connection, source: StoreScope, target: StoreScope, keys: Sequence[str]
) -> tuple[CopyPlan, list[Entry]]:
    """The plan and the source entries it copies, read on ``conn``; refusals before anything is written."""
    if type(source) is not type(target):
        raise InvalidInputError(
            "a copy goes between scopes of one kind: task to task, dag run to dag run, asset to asset"
        )
    if isinstance(source, AssetScope):
        if store.find_asset_id(conn, source, create=False) is None:
            from statestore_cli.ops.keys import missing_asset

            raise missing_asset(store, source)
        assert isinstance(target, AssetScope)
        if _same_asset(store, conn, source, target):
            raise InvalidInputError(f"the target is the source ({target.describe()}); give another {_TO_ASSET}")
    elif source == target:
        raise InvalidInputError(f"the target is the source ({target.describe()}); give a --to-* option that differs")
    problem = store.missing_target(conn, target)
    if problem is not None:
        raise InvalidInputError(f"nothing to copy to: {problem} in this database", hint="copy to one that exists")
    wanted = sorted({check_key(key) for key in keys})
    entries = store.scope_entries(conn, source)
    if wanted:
        held = {entry.key for entry in entries}
        absent = [key for key in wanted if key not in held]
        if absent:
            shown = ", ".join(repr(key) for key in absent)
            raise NotFoundError(
                f"no key{'s' if len(absent) > 1 else ''} {shown} for {source.describe()}; nothing copied"
            )
        entries = [entry for entry in entries if entry.key in wanted]
    present = {entry.key for entry in store.scope_entries(conn, target)}
    chosen = tuple(entry.key for entry in entries)
    return CopyPlan(source, target, chosen, tuple(key for key in chosen if key in present)), entries


def _same_asset(store: MetastoreBackend, conn: Connection, source: AssetScope, target: AssetScope) -> bool:
    return store.find_asset_id(conn, source, create=False) == store.find_asset_id(conn, target, create=False)


class _Hooks:
    """A worker-side backend's part in a copy: references read through the source scope's hooks and
    written through the target's. Dag-run keys have no hooks, nor does a store without the option."""

    def __init__(self, store: Store, source: StoreScope, target: StoreScope) -> None:
        self.settings = store.settings
        self.source: Accessor | None = None
        self.target: Accessor | None = None
        if self.settings.worker_backend and not isinstance(source, DagRunScope):
            self.source = store.accessor(source)
            self.target = store.accessor(target, oversize="error")

    @property
    def worker(self) -> BaseStoreBackend | None:
        return None if self.source is None else self.source.worker_backend

    def carry(self, entry: Entry) -> tuple[str, str | None]:
        """The text to store for ``entry`` at the target, and the source's reference it replaces (None: a
        value carried as stored, a plain value under a worker backend included)."""
        if self.source is None or self.target is None:
            return entry.value, None
        old_ref = stored_ref(json.loads(entry.value))
        if old_ref is None:
            return entry.value, None
        try:
            value = self.source.decode(entry.value, entry.key)
            return self.target.stored_form(entry.key, value), old_ref
        except StateStoreError:
            raise
        except Exception as exc:  # the worker backend is user code: any failure is its own
            raise BackendError(
                f"[workers] state_store_backend {self.settings.worker_backend} could not copy key {entry.key!r}: "
                f"{type(exc).__name__}: {first_line(exc)}; nothing copied"
            ) from None

    def delete_objects(self, source: StoreScope, keys: list[str]) -> None:
        """After a move committed: the source's objects, as ``delete`` removes a key's object."""
        worker = self.worker
        if worker is None:
            return
        for key in keys:
            try:
                worker.delete(source, key)
            except Exception as exc:  # user code: any failure is the backend's
                raise BackendError(
                    f"moved the keys in the database, but [workers] state_store_backend {self.settings.worker_backend} "
                    f"failed to remove the object of key {key!r} ({type(exc).__name__}: {first_line(exc)}): it is "
                    "orphaned; `statestore orphans` lists such objects"
                ) from None
