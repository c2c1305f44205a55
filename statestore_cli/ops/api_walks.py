"""What Airflow's REST API (``--api-url``) has no route for, done by walking it: ``clean``, the ``clear`` of a run or
dag, and ``export``. The keys are found by reading every selected task instance's keys (``ApiBackend.task_rows``:
the task instances a page of them at a time, their keys ``[state_store] api_concurrency`` at once). A clean deletes
each expired key on its own (a key written meanwhile stays), by the same rule as on a database: keys that expired
before the cutoff go, except those of a task instance that has not finished (its state none of Airflow's finished
ones), counted by state instead. The dry run and the real run walk the same way (``expired_keys``). The deletes
of a clean and a clear go in batches of whole task instances' keys (``delete_walked``), each written to the
backup first when there is one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from itertools import groupby
from typing import Any, NamedTuple

from statestore_cli.backends.api_backend import ApiBackend, moment, wants_assets, wants_tasks
from statestore_cli.db.layout import FINISHED_STATES
from statestore_cli.errors import StateStoreError, StopReason, failed_midway
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import TaskScope
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops.backup_file import BackupFile, with_backup
from statestore_cli.ops.clean_selection import ExpiredRow, by_count
from statestore_cli.ops.cleanup import CleanControl, CleanReport
from statestore_cli.ops.records import UPDATED_BY_FIELDS, asset_record, encode_line, task_record

# The keys a clean's batch deletes, per request in flight: a batch is written to the backup and synced, then
# its deletes sent ``[state_store] api_concurrency`` at a time; a stop is heard between batches.
BATCH_PER_REQUEST = 4


class Expired(NamedTuple):
    """A task key a clean deletes: its task instance, its row as the clean reports it, and as the API
    answered it (its value, for a backup)."""

    scope: TaskScope
    row: ExpiredRow
    answered: dict[str, Any]


def expired_keys(backend: ApiBackend, cutoff: datetime, spared: dict[str, int] | None) -> Iterator[Expired]:
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
        where = (scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
        yield Expired(scope, ExpiredRow(*where, row["key"], expires.isoformat()), row)


def planned_rows(backend: ApiBackend, cutoff: datetime, spared: dict[str, int] | None) -> Iterator[ExpiredRow]:
    """What a clean at ``cutoff`` would delete, streamed as the walk finds it."""
    for found in expired_keys(backend, cutoff, spared):
        yield found.row
    if spared is not None:
        ordered = by_count(spared)
        spared.clear()
        spared.update(ordered)


def clean_over_api(
    backend: ApiBackend,
    cutoff: datetime,
    control: CleanControl | None,
    spare: bool,
    backup: BackupFile | None = None,
) -> CleanReport:
    """Delete the expired task keys one request each, in batches of whole task instances' keys (their deletes
    ``concurrency`` at a time), asking ``control`` before each batch whether to stop. With ``backup`` a batch's
    keys are written to it and synced to disk before the first of them is deleted."""
    control = control or CleanControl()
    if control.on_connected is not None:
        control.on_connected()
    started = time.monotonic()
    spared: dict[str, int] | None = {} if spare else None
    if control.on_store is not None:
        control.on_store("task")
    found = ((expired.scope, expired.answered) for expired in expired_keys(backend, cutoff, spared))
    stop, progress = control.stop_reason, control.on_progress
    done = delete_walked(backend, found, backup, "clean", kind="expired ", stop=stop, progress=progress)
    deleted, instances, stopped = done.deleted, done.instances, done.stopped
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


class Deleted(NamedTuple):
    deleted: int
    instances: int  # the task instances whose keys were sent to be deleted
    batches: int
    stopped: StopReason | None  # what stopped it early (None: it finished)


def delete_walked(
    backend: ApiBackend,
    found: Iterator[tuple[TaskScope, dict[str, Any]]],
    backup: BackupFile | None,
    command: str,
    *,
    kind: str = "",
    stop: Callable[[], StopReason | None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Deleted:
    """Delete the keys a walk ``found`` (each with its task instance, as the API answered it; a task instance's
    keys together), one request each, ``concurrency`` at a time, in batches of whole task instances' keys,
    asking ``stop`` before each batch but the first whether to stop, telling ``progress`` the keys deleted
    after each. With ``backup`` a batch's keys are written to it and synced before the first of them is
    deleted; after a failure the file is cut back to the keys that went, and the error says how far ``command``
    got (its keys called ``kind`` keys: "expired ")."""
    instances, stopped, deleted, sent = 0, None, 0, 0
    walked = groupby(found, key=lambda pair: pair[0])
    for batch in _batches((list(keys) for _scope, keys in walked), backend.concurrency * BATCH_PER_REQUEST):
        stopped = stop() if stop is not None and sent else None
        if stopped is not None:
            break
        instances, sent = instances + len({scope for scope, _row in batch}), sent + 1
        lines = [encode_line(_record(scope, row)) for scope, row in batch] if backup else []
        mark = _backed_up(backup, lines)
        gone: list[int] = []
        try:  # each key alone: a key written meanwhile stays
            backend.drop_all([(scope, row["key"]) for scope, row in batch], gone.append)
        except StateStoreError as exc:
            if backup is not None and mark is not None:  # the file holds exactly the keys deleted
                backup.cut(mark)
                _backed_up(backup, [lines[index] for index in sorted(gone)])
            raise with_backup(failed_midway(exc, command, deleted + len(gone), sent, kind=kind), backup) from None
        finally:
            deleted += len(gone)
            if progress is not None:
                progress(deleted)
    return Deleted(deleted, instances, sent, stopped)


def _backed_up(backup: BackupFile | None, lines: list[str]) -> tuple[int, int] | None:
    """``lines`` written to ``backup`` and synced to disk; where the file ended before them (None: no backup)."""
    if backup is None:
        return None
    backup.start()
    mark = backup.mark()
    backup.add_many(lines)
    backup.sync()
    return mark


def _batches(
    instances: Iterator[list[tuple[TaskScope, dict[str, Any]]]], size: int
) -> Iterator[list[tuple[TaskScope, dict[str, Any]]]]:
    """The keys of whole task instances, at least ``size`` keys a batch (but the last)."""
    batch: list[tuple[TaskScope, dict[str, Any]]] = []
    for keys in instances:
        batch.extend(keys)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _record(scope: TaskScope, row: dict[str, Any]) -> dict[str, Any]:
    """A task key the API answered as an export record."""
    expiry = row.get("expires_at")
    where = (scope.dag_id, scope.run_id, scope.task_id, None, scope.map_index)
    updated, expires = iso_utc(row["updated_at"]), None if expiry is None else iso_utc(expiry)
    return task_record(*where, row["key"], updated, expires, row["value"])


def keys_of_run(backend: ApiBackend, dag_id: str, run_id: str | None) -> list[tuple[TaskScope, dict[str, Any]]]:
    """Every task key of a dag (or one of its runs), with its task instance, as the API answers it; walked
    once a command (``ApiBackend.walked``): the clear that follows a count deletes what the count found."""
    name = (dag_id, run_id)
    if name not in backend.walked:
        found = backend.task_rows(KeyFilter(dag_id=dag_id, run_id=run_id))
        backend.walked[name] = [(scope, row) for scope, _state, row in found]
    keys: list[tuple[TaskScope, dict[str, Any]]] = backend.walked[name]
    return keys


def clear_over_api(
    backend: ApiBackend, dag_id: str, run_id: str | None, backup: BackupFile | None
) -> tuple[list[TaskScope], int, int]:
    """Delete the task keys of a dag (or one of its runs) ``keys_of_run`` found (a key written since stays);
    returns the task instances that held them, the keys deleted and the batches."""
    keys = keys_of_run(backend, dag_id, run_id)
    if backup is not None:
        backup.start()
    done = delete_walked(backend, iter(keys), backup, "clear")
    return list(dict.fromkeys(scope for scope, _row in keys)), done.deleted, done.batches


def export_records(backend: ApiBackend, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    """The keys ``filt`` selects as export records, in ``list``'s order, as ``ops.exporting`` writes them
    from a database (dag-run keys have no route: none)."""
    if wants_tasks(filt):
        for scope, _state, row in backend.task_rows(filt):
            yield _record(scope, row)
    if wants_assets(filt):
        for (_id, name, uri), row in backend.asset_rows(filt):
            by = row.get("last_updated_by") or {}
            writer = tuple(by.get(field) for field in UPDATED_BY_FIELDS)
            yield asset_record(name, uri, row["key"], iso_utc(row["updated_at"]), writer, row["value"])
