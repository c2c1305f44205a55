"""What a copy plans and reports, the checks it makes before writing, and a worker-side backend's part in it:
shared by ``copy`` on a database (``ops.copying``) and through the REST API (``ops.api_copy``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, NamedTuple

from statestore_cli.backends.accessors import AssetStateStoreAccessor, DagRunStateStoreAccessor, TaskStateStoreAccessor
from statestore_cli.backends.base import BaseStoreBackend, stored_ref
from statestore_cli.errors import BackendError, InvalidInputError, NotFoundError, StateStoreError, first_line
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope, check_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from statestore_cli.backends.store import Store

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


def clash_error(plan: CopyPlan) -> InvalidInputError:
    """The refusal of a copy onto keys the target holds already."""
    count = len(plan.clashes)
    names = ", ".join(repr(key) for key in plan.clashes[:5]) + (", ..." if count > 5 else "")
    return InvalidInputError(
        f"{plan.target.describe()} already has {count} of the keys ({names}); nothing copied",
        hint="pass --overwrite to replace them",
    )


def check_scopes(source: StoreScope, target: StoreScope) -> None:
    """Refuse a copy between scopes of two kinds, or onto its own source (an asset: by its id, checked apart)."""
    if type(source) is not type(target):
        raise InvalidInputError(
            "a copy goes between scopes of one kind: task to task, dag run to dag run, asset to asset"
        )
    if not isinstance(source, AssetScope) and source == target:
        raise same_target(target)


def same_target(target: StoreScope) -> InvalidInputError:
    give = f"another {_TO_ASSET}" if isinstance(target, AssetScope) else "a --to-* option that differs"
    return InvalidInputError(f"the target is the source ({target.describe()}); give {give}")


def chosen(
    source: StoreScope, target: StoreScope, entries: list[Entry], at_target: list[Entry], keys: Sequence[str]
) -> tuple[CopyPlan, list[Entry]]:
    """The plan of copying ``entries`` (the source's; ``keys``: those only) onto a target holding ``at_target``."""
    wanted = sorted({check_key(key) for key in keys})
    if wanted:
        held = {entry.key for entry in entries}
        absent = [key for key in wanted if key not in held]
        if absent:
            shown = ", ".join(repr(key) for key in absent)
            raise NotFoundError(
                f"no key{'s' if len(absent) > 1 else ''} {shown} for {source.describe()}; nothing copied"
            )
        entries = [entry for entry in entries if entry.key in wanted]
    present = {entry.key for entry in at_target}
    keys_chosen = tuple(entry.key for entry in entries)
    return CopyPlan(source, target, keys_chosen, tuple(key for key in keys_chosen if key in present)), entries


class Hooks:
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
