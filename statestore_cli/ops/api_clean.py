"""``clean`` through Airflow's REST API (``--api-url``), which has no cleanup route: the expired task keys are
found by walking every dag's task instances (``ApiBackend.task_instances``) and each one's keys, and deleted one
request per key. The same rule as on a database: keys that expired before the cutoff go, except those of a
task instance that has not finished (its state none of Airflow's finished ones), counted by state instead.
The dry run and the real run walk the same way (``expired_keys``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

from statestore_cli.backends.api_backend import ApiBackend
from statestore_cli.db.layout import FINISHED_STATES
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import TaskScope
from statestore_cli.ops.clean_selection import ExpiredRow, by_count
from statestore_cli.ops.cleanup import CleanControl, CleanReport


def expired_keys(
    backend: ApiBackend, cutoff: datetime, spared: dict[str, int] | None
) -> Iterator[tuple[TaskScope, ExpiredRow]]:
    """Each task key that expired before ``cutoff``, with its task instance, in ``list``'s order. With
    ``spared`` (a dict), the keys of unfinished task instances are counted there by state instead."""
    instances = backend.task_instances(KeyFilter())
    for (scope, state), entries in zip(instances, backend.each_scope([s for s, _ in instances]), strict=True):
        unfinished = state not in FINISHED_STATES
        for entry in entries:
            if entry.expires_at is None or entry.expires_at >= cutoff:
                continue
            if spared is not None and unfinished:
                name = "no_status" if state is None else str(state)
                spared[name] = spared.get(name, 0) + 1
                continue
            expiry = entry.expires_at.isoformat()
            yield scope, ExpiredRow(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, entry.key, expiry)


def planned_rows(backend: ApiBackend, cutoff: datetime, spared: dict[str, int] | None) -> Iterator[ExpiredRow]:
    """What a clean at ``cutoff`` would delete, streamed as the walk finds it."""
    for _scope, row in expired_keys(backend, cutoff, spared):
        yield row
    if spared is not None:
        ordered = by_count(spared)
        spared.clear()
        spared.update(ordered)


def clean_over_api(backend: ApiBackend, cutoff: datetime, control: CleanControl | None, spare: bool) -> CleanReport:
    """Delete the expired task keys one request each, asking ``control`` before each task instance's keys
    whether to stop; the report counts task instances as batches."""
    control = control or CleanControl()
    if control.on_connected is not None:
        control.on_connected()
    started = time.monotonic()
    spared: dict[str, int] | None = {} if spare else None
    deleted, instances, last, stopped = 0, 0, None, None
    if control.on_store is not None:
        control.on_store("task")
    for scope, row in expired_keys(backend, cutoff, spared):
        if scope != last:
            if last is not None:
                stopped = control.stop_reason()
                if stopped is not None:
                    break
            instances, last = instances + 1, scope
        deleted += backend.drop(scope, row.key)  # the expired key alone: a key written meanwhile stays
        if control.on_progress is not None:
            control.on_progress(deleted)
    return CleanReport(
        deleted,
        instances,
        0,
        cutoff,
        (),
        time.monotonic() - started,
        stopped,
        deleted_by_store={"task": deleted},
        spared=None if spared is None or stopped is not None else by_count(spared),
        api_requests=backend.client.requests,
    )
