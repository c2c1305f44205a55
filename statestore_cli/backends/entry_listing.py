"""The keys of the metadata database's stores as ``Entry`` records, streamed in scope order: what
``MetastoreBackend.entries`` (``list``) and ``describe`` read."""

from __future__ import annotations

from collections.abc import Generator, Iterator

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from statestore_cli.backends.key_conditions import dag_run_store, run_filters, stores_selected, task_filters
from statestore_cli.db.layout import layout_of
from statestore_cli.db.schema import asset, asset_state_store
from statestore_cli.model.entries import Entry, KeyFilter

_asset_kv = asset_state_store


def stored_entries(
    conn: Connection, filt: KeyFilter, *, with_values: bool, limit: int | None = None, offset: int = 0
) -> Generator[Entry, None, None]:
    """The keys of each store ``filt`` selects, task keys first, then dag-run keys, then asset keys."""
    for store in stores_selected(layout_of(conn), filt):
        if limit == 0:
            return
        shown = 0
        for entry in _store_entries(store, conn, filt, with_values, limit, offset):
            shown += 1
            yield entry
        if limit is not None:
            limit -= shown
        if shown:
            offset = 0  # the offset ended in this store
        elif offset and store != "asset":  # it skipped every key here: the next store starts after the rest
            offset = max(0, offset - _store_count(store, conn, filt))


def _store_entries(
    store: str, conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
) -> Iterator[Entry]:
    if store == "task":
        return _task_entries(conn, filt, with_values, limit, offset)
    if store == "dag_run":
        return _dag_run_entries(conn, filt, with_values, limit, offset)
    return _asset_entries(conn, filt, with_values, limit, offset)


def _store_count(store: str, conn: Connection, filt: KeyFilter) -> int:
    layout = layout_of(conn)
    if store == "task":
        table, where = layout.task, task_filters(layout, filt)
    else:
        table = dag_run_store(conn)
        where = run_filters(table, filt)
    return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


# Each streams by a statement option, not the connection's: a connection's options last, and a write
# after a read on the same connection (a copy's) would be sent as a server-side cursor too.
def _dag_run_entries(
    conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
) -> Iterator[Entry]:
    table = dag_run_store(conn)
    cols = [table.c.dag_id, table.c.run_id, table.c.key]
    query = select(*cols, table.c.updated_at, table.c.expires_at, *([table.c.value] if with_values else []))
    query = query.where(*run_filters(table, filt)).order_by(*cols).limit(limit).offset(offset or None)
    for row in conn.execute(query.execution_options(yield_per=1000)):
        yield Entry(
            store="dag_run",
            key=row.key,
            updated_at=row.updated_at,
            expires_at=row.expires_at,
            dag_id=row.dag_id,
            run_id=row.run_id,
            value=row.value if with_values else None,
        )


def _task_entries(
    conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
) -> Iterator[Entry]:
    layout = layout_of(conn)
    task = layout.task
    region = [task.c.region_id] if layout.has_region else []
    cols = [task.c.dag_id, task.c.run_id, task.c.task_id, *region, task.c.map_index, task.c.key]
    shown = [c.label(c.key) for c in cols]  # by the key: the map index may be region_index in the database
    query = select(*shown, task.c.updated_at, task.c.expires_at, *([task.c.value] if with_values else []))
    query = query.where(*task_filters(layout, filt)).order_by(*cols).limit(limit).offset(offset or None)
    for row in conn.execute(query.execution_options(yield_per=1000)):
        region_id = row.region_id if layout.has_region and row.region_id.int else None
        yield Entry(
            store="task",
            key=row.key,
            updated_at=row.updated_at,
            expires_at=row.expires_at,
            dag_id=row.dag_id,
            run_id=row.run_id,
            task_id=row.task_id,
            map_index=row.map_index,
            value=row.value if with_values else None,
            region_id=region_id,
        )


def _asset_entries(
    conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
) -> Iterator[Entry]:
    cols = [asset.c.id, asset.c.name, asset.c.uri, _asset_kv.c.key, _asset_kv.c.updated_at]
    query = select(*cols, *([_asset_kv.c.value] if with_values else [])).join(asset, asset.c.id == _asset_kv.c.asset_id)
    for column, wanted in ((asset.c.id, filt.asset_id), (asset.c.name, filt.name), (asset.c.uri, filt.uri)):
        if wanted is not None:
            query = query.where(column == wanted)
    if filt.key is not None:
        query = query.where(_asset_kv.c.key == filt.key)
    query = query.order_by(asset.c.name, asset.c.uri, _asset_kv.c.key).limit(limit).offset(offset or None)
    for row in conn.execute(query.execution_options(yield_per=1000)):
        yield Entry(
            store="asset",
            key=row.key,
            updated_at=row.updated_at,
            expires_at=None,
            asset_id=row.id,
            name=row.name,
            uri=row.uri,
            value=row.value if with_values else None,
        )
