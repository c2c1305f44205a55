"""The largest values of a state store: ``statestore stats --largest N``.

Each store (task keys, Airflow 3.4's dag-run keys, asset keys) is asked for its ``N`` largest values by the
database (``ORDER BY size DESC ... LIMIT N``): one pass over the rows that reads each value's size, never the
value itself into Python, and at most ``N`` rows per store reach Python, where they are merged. The size is the
one ``stats`` sums and the writers hold against ``[state_store] max_value_storage_bytes``: bytes of the stored
text (``EngineImpl.value_bytes``).

The keys a filter selects are the ones ``list`` shows for it (``backends.metastore.stores_selected`` and its
conditions). Where a worker-side backend keeps the values, the rows hold its references, so the sizes are those
of the references as stored: reading every object behind them is what this avoids.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection, Engine

from statestore_cli.backends.key_conditions import run_filters, stores_selected, task_filters
from statestore_cli.db.database import translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.db.schema import asset, asset_state_store
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.entries import KeyFilter

MAX_LARGEST = 1000  # values listed at most: a report to read, not an export (`export` lists every key)
STORE_ORDER = ("task", "dag_run", "asset")  # of values of the same size, as `list` orders the stores


class LargeValue(NamedTuple):
    """One stored value's size and whose key it is; the scope fields of the other stores are None."""

    store: str  # "task" | "dag_run" | "asset"
    key: str
    value_bytes: int
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    region_id: uuid.UUID | None = None  # a task key's region (Airflow 3.4), None outside any
    asset_id: int | None = None
    name: str | None = None
    uri: str | None = None


def check_count(count: int) -> None:
    """``count`` values can be listed: 1 to ``MAX_LARGEST``."""
    if not 1 <= count <= MAX_LARGEST:
        raise InvalidInputError(f"--largest {count} is out of range", hint=f"give a number from 1 to {MAX_LARGEST}")


def largest_values(engine: Engine, filt: KeyFilter, count: int) -> list[LargeValue]:
    """The ``count`` largest values of the keys ``filt`` selects, largest first; values of the same size in
    the order of the stores (task, dag-run, asset keys), then of their scope and key. Where values of one size
    are cut, each store keeps those of its oldest rows (lowest id; an asset key: lowest asset id, then key)."""
    check_count(count)
    impl_of(engine).check_asset_text(filt.name, filt.uri)
    found: list[LargeValue] = []
    with translate_errors(engine), engine.connect() as conn:
        layout = layout_of(conn)
        for store in stores_selected(layout, filt):
            found += _largest_of(conn, layout, store, filt, count)
    found.sort(key=_shown_order)
    return found[:count]


def _shown_order(value: LargeValue) -> tuple[Any, ...]:
    """Largest first; values of the same size by store (as ``list`` orders them), then by scope and key."""
    region = "" if value.region_id is None else str(value.region_id)
    scope = (value.dag_id or "", value.run_id or "", value.task_id or "", value.map_index or 0, region)
    return (-value.value_bytes, STORE_ORDER.index(value.store), *scope, value.name or "", value.uri or "", value.key)


def _largest_of(conn: Connection, layout: Layout, store: str, filt: KeyFilter, count: int) -> list[LargeValue]:
    if store == "task":
        return _task_values(conn, layout, filt, count)
    if store == "dag_run":
        return _dag_run_values(conn, layout, filt, count)
    return _asset_values(conn, filt, count)


def _top(conn: Connection, table: Table, columns: list[Any], where: list[Any], count: int) -> list[Any]:
    """The ``count`` rows of ``table`` (which has an ``id`` primary key) with the largest values: ``columns`` and
    the size (``nbytes``) of each. Of values of the same size at the cut, those of the lowest ids: MariaDB sorts
    by an integer in a fraction of what the scope's long text costs it (bench/results/stats.md), and the rows kept are
    shown in scope order anyway (``_shown_order``)."""
    size = impl_of(conn).value_bytes(table.c.value).label("nbytes")
    query = select(*columns, size).where(*where).order_by(size.desc(), table.c.id).limit(count)
    return list(conn.execute(query))


def _task_values(conn: Connection, layout: Layout, filt: KeyFilter, count: int) -> list[LargeValue]:
    task = layout.task
    region = [task.c.region_id] if layout.has_region else []
    cols = [task.c.dag_id, task.c.run_id, task.c.task_id, task.c.map_index, *region, task.c.key]
    shown = [c.label(c.key) for c in cols]  # by the key: the map index may be region_index in the database
    rows = _top(conn, task, shown, task_filters(layout, filt), count)
    return [
        LargeValue(
            "task",
            row.key,
            int(row.nbytes),
            dag_id=row.dag_id,
            run_id=row.run_id,
            task_id=row.task_id,
            map_index=row.map_index,
            region_id=row.region_id if layout.has_region and row.region_id.int else None,
        )
        for row in rows
    ]


def _dag_run_values(conn: Connection, layout: Layout, filt: KeyFilter, count: int) -> list[LargeValue]:
    table = layout.dag_run_store
    if table is None:  # --store dag_run on a database without the store
        from statestore_cli.backends.key_conditions import dag_run_store

        table = dag_run_store(conn)  # raises the error that says so
    cols = [table.c.dag_id, table.c.run_id, table.c.key]
    rows = _top(conn, table, cols, run_filters(table, filt), count)
    return [LargeValue("dag_run", r.key, int(r.nbytes), dag_id=r.dag_id, run_id=r.run_id) for r in rows]


def _asset_values(conn: Connection, filt: KeyFilter, count: int) -> list[LargeValue]:
    kv = asset_state_store
    size = impl_of(conn).value_bytes(kv.c.value).label("nbytes")
    cols = [asset.c.name, asset.c.uri, asset.c.id, kv.c.key]
    query = select(*cols, size).join(asset, asset.c.id == kv.c.asset_id)
    for column, wanted in ((asset.c.id, filt.asset_id), (asset.c.name, filt.name), (asset.c.uri, filt.uri)):
        if wanted is not None:
            query = query.where(column == wanted)
    if filt.key is not None:
        query = query.where(kv.c.key == filt.key)
    query = query.order_by(size.desc(), kv.c.asset_id, kv.c.key).limit(count)  # ties at the cut: its primary key
    return [
        LargeValue("asset", r.key, int(r.nbytes), asset_id=int(r.id), name=r.name, uri=r.uri)
        for r in conn.execute(query)
    ]
