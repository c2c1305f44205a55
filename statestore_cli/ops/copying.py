"""``copy`` and ``copy --move``: the keys of one scope written to another, in one transaction.

Renaming a task or an asset in a DAG leaves its state behind: a task's keys are keyed by its task id, an
asset's by its row. A copy carries them over: each value and expiry as stored, ``updated_at`` the moment of
the copy. A worker-side backend's objects are read through its deserialize hook and written again for the
target scope through its serialize hook, so the target never shares the source's object.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from statestore_cli.backends.base import stored_ref
from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.backends.store import Store
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.errors import (
    DatabaseError,
    IntegrityConflictError,
    InvalidInputError,
)
from statestore_cli.model.entries import Entry
from statestore_cli.model.scopes import AssetScope, StoreScope
from statestore_cli.ops.copy_plan import (
    CopyPlan,
    CopyReport,
    Hooks,
    check_scopes,
    chosen,
    clash_error,
    same_target,
    target_scope,
)

__all__ = ["CopyPlan", "CopyReport", "clash_error", "copy_keys", "plan_copy", "target_scope"]


def plan_copy(store: Store, source: StoreScope, target: StoreScope, keys: Sequence[str] = ()) -> CopyPlan:
    """What ``copy_keys`` would write (``keys``: those of the source only; empty: all of them), read without
    writing: the question before a move or an overwrite counts from it."""
    if store.api_mode:
        from statestore_cli.ops.api_copy import plan_over_api

        return plan_over_api(store.api_backend(), source, target, keys)[0]
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
    moved source objects are deleted after the commit, as ``delete`` deletes them. Through the REST API there
    is no transaction: ``ops.api_copy`` says what is done instead."""
    if store.api_mode:
        from statestore_cli.ops.api_copy import copy_over_api

        return copy_over_api(store, source, target, keys, move=move, overwrite=overwrite)
    metastore = store.metastore_backend("`copy`")
    hooks = Hooks(store, source, target)

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


def _read(
    store: MetastoreBackend, conn: Connection, source: StoreScope, target: StoreScope, keys: Sequence[str]
) -> tuple[CopyPlan, list[Entry]]:
    """The plan and the source entries it copies, read on ``conn``; refusals before anything is written."""
    check_scopes(source, target)
    if isinstance(source, AssetScope):
        if store.find_asset_id(conn, source, create=False) is None:
            from statestore_cli.ops.keys import missing_asset

            raise missing_asset(store, source)
        assert isinstance(target, AssetScope)
        if _same_asset(store, conn, source, target):
            raise same_target(target)
    problem = store.missing_target(conn, target)
    if problem is not None:
        raise InvalidInputError(f"nothing to copy to: {problem} in this database", hint="copy to one that exists")
    return chosen(source, target, store.scope_entries(conn, source), store.scope_entries(conn, target), keys)


def _same_asset(store: MetastoreBackend, conn: Connection, source: AssetScope, target: AssetScope) -> bool:
    return store.find_asset_id(conn, source, create=False) == store.find_asset_id(conn, target, create=False)
