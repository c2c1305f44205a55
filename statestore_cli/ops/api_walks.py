"""What Airflow's REST API (``--api-url``) has no route for, done by walking it: ``clean`` and ``export``. The keys
are found by reading every selected task instance's keys (``ApiBackend.task_rows``: the task instances a page of
them at a time, their keys ``[state_store] api_concurrency`` at once). A clean deletes each expired key on its own
(a key written meanwhile stays), by the same rule as on a database: keys that expired before the cutoff go,
except those of a task instance that has not finished (its state none of Airflow's finished ones), counted by
state instead. The dry run and the real run walk the same way (``expired_keys``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from statestore_cli.backends.api_backend import ApiBackend, moment, wants_assets, wants_tasks
from statestore_cli.db.layout import FINISHED_STATES
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import TaskScope
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops.clean_selection import ExpiredRow, by_count
from statestore_cli.ops.cleanup import CleanControl, CleanReport
from statestore_cli.ops.records import UPDATED_BY_FIELDS, asset_record, task_record


def expired_keys(
    backend: ApiBackend, cutoff: datetime, spared: dict[str, int] | None
) -> Iterator[tuple[TaskScope, ExpiredRow]]:
    """Each task key that expired before ``cutoff``, with its task instance, in ``list``'s order. With
    ``spared`` (a dict), the keys of unfinished task instances are counted there by state instead."""
    for scope, state, row in backend.task_rows(KeyFilter()):
        expires = moment(row.get("expires_at"))
        if expires is None or expires >= cutoff:
            continue
        if spared is not None and state not in FINISHED_STATES:
            name = "no_status" if state is None else str(state)
            spared[name] = spared.get(name, 0) + 1
            continue
        yield (
            scope,
            ExpiredRow(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, row["key"], expires.isoformat()),
        )


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


def export_records(backend: ApiBackend, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    """The keys ``filt`` selects as export records, in ``list``'s order, as ``ops.exporting`` writes them
    from a database (dag-run keys have no route: none)."""
    if wants_tasks(filt):
        for scope, _state, row in backend.task_rows(filt):
            expiry = row.get("expires_at")
            where = (scope.dag_id, scope.run_id, scope.task_id, None, scope.map_index)
            updated, expires = iso_utc(row["updated_at"]), None if expiry is None else iso_utc(expiry)
            yield task_record(*where, row["key"], updated, expires, row["value"])
    if wants_assets(filt):
        for (_id, name, uri), row in backend.asset_rows(filt):
            by = row.get("last_updated_by") or {}
            writer = tuple(by.get(field) for field in UPDATED_BY_FIELDS)
            yield asset_record(name, uri, row["key"], iso_utc(row["updated_at"]), writer, row["value"])
