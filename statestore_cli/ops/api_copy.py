"""``copy`` and ``copy --move`` through Airflow's REST API (``--api-url``). The API has no transaction: the keys
are written first, ``[state_store] api_concurrency`` at a time (each value and expiry as the source holds it), and
only once every one of them is written does a move delete the source's. A failure midway leaves the source whole
and the target with the keys written so far: every write is an upsert, so the same copy with ``--overwrite``
finishes it. A key written to the target by someone else between the plan and the copy is overwritten.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial

from statestore_cli.backends.api_backend import ApiBackend
from statestore_cli.backends.base import stored_ref
from statestore_cli.backends.store import Store
from statestore_cli.errors import InvalidInputError, StateStoreError
from statestore_cli.model.entries import Entry
from statestore_cli.model.scopes import AssetScope, StoreScope, TaskScope
from statestore_cli.ops.copy_plan import CopyPlan, CopyReport, Hooks, check_scopes, chosen, clash_error, same_target


def plan_over_api(
    backend: ApiBackend, source: StoreScope, target: StoreScope, keys: Sequence[str] = ()
) -> tuple[CopyPlan, list[Entry]]:
    """What a copy would write, and the source's entries it writes; refusals before anything is written."""
    check_scopes(source, target)
    if isinstance(source, AssetScope):
        if not backend.has_asset(source):
            from statestore_cli.ops.keys import missing_asset

            raise missing_asset(backend, source)
        assert isinstance(target, AssetScope)
        if backend.has_asset(target) and backend.asset_of(source) == backend.asset_of(target):
            raise same_target(target)
    if not backend.has_target(target):
        raise InvalidInputError(f"nothing to copy to: {backend.no_target(target)}", hint="copy to one that exists")
    entries = list(backend.scope_entries(source))
    return chosen(source, target, entries, list(backend.scope_entries(target)), keys)


def copy_over_api(
    store: Store, source: StoreScope, target: StoreScope, keys: Sequence[str], *, move: bool, overwrite: bool
) -> CopyReport:
    """Write the source's keys to the target, then (``move``) delete them from the source (see the module)."""
    backend = store.api_backend()
    plan, entries = plan_over_api(backend, source, target, keys)
    if plan.clashes and not overwrite:
        raise clash_error(plan)
    hooks = Hooks(store, source, target)
    carried = [hooks.carry(entry) for entry in entries]  # a worker backend's objects written for the target
    written: list[int] = []
    writes = [
        partial(_write, backend, target, entry, value) for entry, (value, _ref) in zip(entries, carried, strict=True)
    ]
    try:
        backend.run_all(writes, lambda index, _: written.append(index))
    except StateStoreError as exc:
        raise _midway(exc, len(written), len(entries), move) from None
    if move:
        assert isinstance(source, TaskScope | AssetScope)
        deleted: list[int] = []
        drops = [partial(backend.drop, source, entry.key) for entry in entries]  # read by the plan: one request each
        try:
            backend.run_all(drops, lambda index, _: deleted.append(index))
        except StateStoreError as exc:
            left = len(entries) - len(deleted)
            raise type(exc)(
                f"{exc.template} (the {len(entries)} keys were copied; {left} of them are still at the source: "
                "delete them, or run the move again with --overwrite)",
                parameter=exc.parameter,
            ) from None
        pairs = zip(entries, carried, strict=True)
        moved = [entry.key for entry, (value, ref) in pairs if ref is not None and stored_ref(json.loads(value)) != ref]
        hooks.delete_objects(source, moved)  # the source's objects, now that no key points at them
    return CopyReport(source, target, len(plan.keys), len(plan.clashes), move)


def _write(backend: ApiBackend, target: StoreScope, entry: Entry, value: str) -> None:
    expires = entry.expires_at if isinstance(target, TaskScope) else None  # as the source holds it; None: never
    backend.set(target, entry.key, value, expires_at=expires)


def _midway(exc: StateStoreError, written: int, total: int, move: bool) -> StateStoreError:
    """``exc`` of a copy that stopped midway: how far it got, and how to finish."""
    if not written:
        return exc
    kept = "; the source keeps all of them" if move else ""
    return type(exc)(
        f"{exc.template} ({written} of the {total} keys were written to the target{kept}: run the same command "
        "with --overwrite to finish)",
        parameter=exc.parameter,
    )
