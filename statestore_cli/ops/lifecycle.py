"""The rules that remove keys other than by expiry, and the names they are known by here.

- The orphan sweep (``assets sweep``): ``ops.asset_sweep``.
- Clearing every key of a run or of a dag, in batches: ``ops.run_clear``.
- Deleting a run or an asset of a standalone store: ``ops.standalone_deletes``.
- The two task-instance events an integration reports, below: success (``clear_on_success``) and being
  cleared for a re-run (``keep_task_state``).
"""

from __future__ import annotations

from statestore_cli.backends.store import Store
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.scopes import TaskScope
from statestore_cli.ops.asset_sweep import (
    SweepReport,
    SweepRow,
    SweptAsset,
    by_asset,
    inactive,
    iter_inactive,
    plan_sweep,
    sweep,
    sweep_inactive,
    swept,
)
from statestore_cli.ops.run_clear import clear_task_keys, count_task_keys, describe_run_or_dag
from statestore_cli.ops.standalone_deletes import (
    FoundAsset,
    count_run_keys,
    delete_asset,
    delete_run,
    find_asset,
    require_standalone,
)

# What the commands and callers took from here before each rule had a module of its own.
__all__ = [
    "FoundAsset",
    "SweepReport",
    "SweepRow",
    "SweptAsset",
    "by_asset",
    "clear_task_keys",
    "count_run_keys",
    "count_task_keys",
    "delete_asset",
    "delete_run",
    "describe_run_or_dag",
    "find_asset",
    "inactive",
    "iter_inactive",
    "plan_sweep",
    "require_standalone",
    "sweep",
    "sweep_inactive",
    "swept",
    "task_instance_cleared",
    "task_instance_succeeded",
]


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
