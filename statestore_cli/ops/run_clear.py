"""Clearing every key of a dag or of one of its runs (``clear`` of a run or dag): its task keys, then its
dag-run keys (Airflow 3.4), in batches walking the primary key, or each table in one statement; with
``--backup``, each key written to the file before its batch commits.

Where a worker-side backend is configured (and no backup is taken), its ``clear()`` runs for each task
instance whose keys went, after they are gone (the database reference first, then the external payload).
"""

from __future__ import annotations

import time

from sqlalchemy import Table, and_, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement

from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.backends.store import Store
from statestore_cli.db.database import translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.engines.base import EngineImpl
from statestore_cli.db.layout import layout_of
from statestore_cli.errors import BackendError, failed_midway
from statestore_cli.model.scopes import TaskScope
from statestore_cli.ops.backup_file import BackupFile, with_backup
from statestore_cli.ops.backup_rows import dag_run_rows, task_rows
from statestore_cli.ops.batched_deletes import delete_batched, tune, walk_backed_up
from statestore_cli.ops.batches import Tally, checked_batch_size


def run_keys(
    table: Table, dag_id: str, run_id: str | None, *, walking: EngineImpl | None = None
) -> ColumnElement[bool]:
    """The keys of a dag or run in ``table`` (the task or the dag-run store). ``walking``: the engine of a
    batched delete walking the primary key, the columns written so that it does not read the rows through
    their index instead (``EngineImpl.unindexed``)."""
    dag, run = table.c.dag_id, table.c.run_id
    if walking is not None:
        dag, run = walking.unindexed(dag), walking.unindexed(run)
    parts = [dag == dag_id] + ([run == run_id] if run_id is not None else [])
    return and_(*parts)


def describe_run_or_dag(dag_id: str, run_id: str | None) -> str:
    return f"dag_id={dag_id}" + (f" run_id={run_id}" if run_id is not None else "")


def _run_tables(conn: Connection) -> tuple[Table, ...]:
    """The tables holding keys of a run: the task store, and the dag-run store where the layout has one."""
    layout = layout_of(conn)
    return (layout.task, *((layout.dag_run_store,) if layout.dag_run_store is not None else ()))


def count_task_keys(store: Store, dag_id: str, run_id: str | None = None) -> int:
    """How many keys a dag (or one of its runs) holds: its task keys, and its dag-run keys (Airflow 3.4).
    Through the REST API a walk of its task instances, whose keys the clear that follows deletes."""
    if store.api_mode:
        from statestore_cli.ops.api_walks import keys_of_run

        return len(keys_of_run(store.api_backend(), dag_id, run_id))
    with store.metastore_backend("counting the keys of a run or dag").connection() as conn:
        counts = [select(func.count()).select_from(t).where(run_keys(t, dag_id, run_id)) for t in _run_tables(conn)]
        return sum(int(conn.execute(count).scalar_one()) for count in counts)


def tasks_of(conn: Connection, where: ColumnElement[bool]) -> list[TaskScope]:
    """The task instances (all map indices) whose rows ``where`` selects: what a worker backend clears."""
    # With the task id's length, MySQL's DISTINCT keeps `t` and `t ` apart (its collation ignores trailing
    # spaces); a dag run there is unique by dag and run id, so those cannot have such twins.
    task = layout_of(conn).task
    task_id = task.c.task_id
    query = select(task.c.dag_id, task.c.run_id, task_id, func.length(task_id)).where(where).distinct()
    return [TaskScope(d, r, t) for d, r, t, _ in conn.execute(query)]


def clear_worker_tasks(worker: BaseStoreBackend | None, tasks: list[TaskScope]) -> None:
    for scope in tasks:
        worker.clear(scope, all_map_indices=True)  # type: ignore[union-attr]


def clear_task_keys(
    store: Store,
    dag_id: str,
    run_id: str | None = None,
    batch_size: int | None = None,
    backup: BackupFile | None = None,
) -> tuple[int, int]:
    """Delete every key of a dag (or one of its runs): its task keys, then its dag-run keys (Airflow
    3.4), ``batch_size`` per commit (default ``state_cleanup_batch_size``; 0: one statement); returns
    (keys deleted, batches). With ``backup`` every key is written to it first, each batch synced before it
    commits, and a worker-side backend's objects are kept (the backup's references point at them)."""
    if store.api_mode:
        return _clear_over_api(store, dag_id, run_id, backup)
    metastore = store.metastore_backend("clearing a whole run or dag")
    size = checked_batch_size(store.settings.state_cleanup_batch_size if batch_size is None else batch_size)
    engine = metastore.engine
    if backup is not None:
        return _clear_backed_up(engine, dag_id, run_id, size, backup)
    worker = store.worker_backend
    with metastore.connection() as conn:
        tables = _run_tables(conn)
        tasks = tasks_of(conn, run_keys(tables[0], dag_id, run_id)) if worker is not None else []
    tally = Tally()
    deleted = batches = 0
    try:
        with translate_errors(engine):
            for table in tables:
                where = run_keys(table, dag_id, run_id)
                walked = run_keys(table, dag_id, run_id, walking=impl_of(engine))
                done = delete_batched(engine, table.c.id, where, size, walked=walked, tally=tally)
                deleted, batches = deleted + done[0], batches + done[1]
    except BackendError as exc:
        raise failed_midway(exc, "clear", tally.deleted, tally.batches) from None
    clear_worker_tasks(worker, tasks)
    return deleted, batches


def _clear_over_api(store: Store, dag_id: str, run_id: str | None, backup: BackupFile | None) -> tuple[int, int]:
    """The clear through Airflow's REST API, each key its own delete (``ops.api_walks``); without a backup a
    worker-side backend's objects are removed after, as on a database."""
    from statestore_cli.ops.api_walks import clear_over_api

    instances, deleted, batches = clear_over_api(store.api_backend(), dag_id, run_id, backup)
    if backup is None and store.worker_backend is not None:
        tasks = dict.fromkeys(TaskScope(scope.dag_id, scope.run_id, scope.task_id) for scope in instances)
        clear_worker_tasks(store.worker_backend, list(tasks))
    return deleted, batches


def _clear_backed_up(engine: Engine, dag_id: str, run_id: str | None, size: int, backup: BackupFile) -> tuple[int, int]:
    tally = Tally()
    try:
        with translate_errors(engine), engine.connect() as conn:
            try:
                tune(conn)
                tables = _run_tables(conn)
                conn.commit()
                backup.start()
                for table in tables:
                    where = run_keys(table, dag_id, run_id)
                    walked = run_keys(table, dag_id, run_id, walking=impl_of(engine))
                    rows = task_rows if table is tables[0] else dag_run_rows
                    walk_backed_up(conn, rows(table, where, walked), size, time.sleep, tally, backup)
            finally:
                conn.invalidate()  # the tuned session must not reach the next user of the pool
    except BackendError as exc:
        raise with_backup(failed_midway(exc, "clear", tally.deleted, tally.batches), backup) from None
    return tally.deleted, tally.batches
