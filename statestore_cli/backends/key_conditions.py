"""The conditions that select keys in the metadata database: one scope's (a task's, a run's) and a
``KeyFilter``'s, and which stores a filter can select. Shared by the metastore backend and the operations."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import DagRunScope, TaskScope


def task_where(
    layout: Layout, scope: TaskScope, key: str | None = None, all_map_indices: bool = False
) -> ColumnElement[bool]:
    """The rows of one task's key (``key`` None: all its keys; ``all_map_indices``: at every map index)."""
    task = layout.task
    parts = [task.c.dag_id == scope.dag_id, task.c.run_id == scope.run_id, task.c.task_id == scope.task_id]
    parts += _region_where(layout, scope)
    if not all_map_indices:
        parts.append(task.c.map_index == scope.map_index)
    if key is not None:
        parts.append(task.c.key == key)
    return and_(*parts)


def dag_run_where(conn: Connection, scope: DagRunScope, key: str | None = None) -> tuple[Any, Any]:
    """The dag-run state store table and the rows of one run's keys (``key`` None: all of them)."""
    table = dag_run_store(conn)
    parts = [table.c.dag_id == scope.dag_id, table.c.run_id == scope.run_id]
    return table, and_(*parts, *([table.c.key == key] if key is not None else []))


def dag_run_store(conn: Connection) -> Any:
    """The dag-run state store table, or an ``InvalidInputError`` where the database has none."""
    layout = layout_of(conn, needs=None)  # the task table's problems are not the dag-run store's
    if layout.dag_run_store is None:
        raise InvalidInputError(
            f"this database has no dag-run state store (Airflow {layout.name} layout): dag-run keys need "
            "Airflow 3.4's dag_run_state_store; give --task-id for a task key"
        )
    return layout.dag_run_store


def task_filters(layout: Layout, filt: KeyFilter) -> list[ColumnElement[bool]]:
    """The conditions of ``filt``'s task fields (and region, where the table has one) on the task table."""
    names = ("dag_id", "run_id", "task_id", "map_index", "key")
    task = layout.task
    found = [task.c[name] == getattr(filt, name) for name in names if getattr(filt, name) is not None]
    if filt.region_id is not None and layout.has_region:
        found.append(task.c.region_id == filt.region_id)
    return found


def stores_selected(layout: Layout, filt: KeyFilter) -> list[str]:
    """The stores whose keys ``filt`` can select, in the order they are listed."""
    stores = []
    if filt.store in (None, "task") and not filt.has_asset_fields:
        stores.append("task")
    task_only = filt.task_id is not None or filt.map_index is not None or bool(filt.region_id and filt.region_id.int)
    # Asked for by name (--store dag_run), a database without the store says so instead of listing nothing.
    present = layout.dag_run_store is not None or filt.store == "dag_run"
    if filt.store in (None, "dag_run") and not filt.has_asset_fields and not task_only and present:
        stores.append("dag_run")
    if filt.store in (None, "asset") and not filt.has_task_fields:
        stores.append("asset")
    return stores


def run_filters(table: Any, filt: KeyFilter) -> list[ColumnElement[bool]]:
    """The conditions of ``filt``'s dag id, run id and key on a table that has those columns."""
    names = ("dag_id", "run_id", "key")
    return [table.c[name] == getattr(filt, name) for name in names if getattr(filt, name) is not None]


def _region_where(layout: Layout, scope: TaskScope) -> list[ColumnElement[bool]]:
    """The scope's region as a condition where the table has regions: a region's keys are never merged
    with the keys outside it. Airflow 3.3's table has no region column; there, as before, a region is
    not stored (each region keeps its own metadata database)."""
    return layout.region_where(scope.region_id) if layout.has_region else []
