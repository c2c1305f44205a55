"""What a clean deletes: the selection of expired rows that the dry run and the real run share, evaluated
against one cutoff fixed when the run starts (its start, or ``--older-than`` before it), so what a dry run
lists is exactly what a real run at the same instant deletes.

The task keys of a task instance that has not finished (a retry waiting for its ``retry_delay`` finds its
earlier try's job id in them) are kept by default, on an Airflow database: ``cleaned()``; what they are,
by the task instance's state: ``spared_by_state``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import String, Table, and_, func, null, select, type_coerce
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.database import translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import FINISHED_STATES, layout_of
from statestore_cli.model.timestamps import iso_utc


class ExpiredRow(NamedTuple):
    """One row a clean deletes. A tuple, not a dataclass: dry runs stream hundreds of thousands.
    A dag-run key (``store`` "dag_run") has no task: ``task_id`` and ``map_index`` are None."""

    dag_id: str
    run_id: str
    task_id: str | None
    map_index: int | None
    key: str
    expires_at: str  # ISO 8601 in UTC, as datetime.isoformat() writes it
    store: str = "task"
    region_id: str | None = None  # a task key's region where the table has regions and it is not the nil one


def expired(table: Table, now: datetime) -> ColumnElement[bool]:
    """The one selection both runs use: rows of ``table`` with a non-NULL expiry before ``now``."""
    return and_(table.c.expires_at.is_not(None), table.c.expires_at < now)


def cleaned(
    conn: Connection, table: Table, now: datetime, spare: bool = True, per_batch: bool = False
) -> ColumnElement[bool]:
    """What a clean at ``now`` deletes from ``table``: its expired rows, except (with ``spare``) the task keys
    whose task instance has not finished. A task waiting for its retry (a ``retry_delay`` longer than the
    keys' retention) finds the job id its earlier try stored in them; a task key with no task instance row,
    and every key of a standalone store (no ``task_instance`` table), is deleted as expired. ``per_batch``:
    the condition goes into a statement run once per batch (``Layout.unfinished`` words it for that)."""
    kept = layout_of(conn).unfinished(table, impl_of(conn).name, per_batch) if spare else None
    return expired(table, now) if kept is None else and_(expired(table, now), ~kept)


def spares(engine: Engine) -> bool:
    """Whether a clean of this database keeps the keys of unfinished task instances (it has task instances)."""
    with translate_errors(engine), engine.connect() as conn:
        return layout_of(conn).task_instance is not None


def by_count(spared: dict[str, int]) -> dict[str, int]:
    """States by how many keys they kept, most first (then by name)."""
    return dict(sorted(spared.items(), key=lambda item: (-item[1], item[0])))


def spared_by_state(conn: Connection, now: datetime) -> dict[str, int] | None:
    """The expired task keys a clean at ``now`` keeps for their unfinished task instances, by the task
    instance's state ("no_status" where it has none yet); None where the database has no task instances."""
    layout = layout_of(conn)
    if layout.task_instance is None:
        return None
    table = layout.task
    ti = layout.task_instances(impl_of(conn).name)
    query = (
        select(ti.c.state, func.count())
        .select_from(table.join(ti, and_(*layout.task_instance_of(table, ti))))
        .where(expired(table, now), layout.unfinished_state(ti))
        .group_by(ti.c.state)
    )
    return by_count({_state_name(state): int(n) for state, n in conn.execute(query)})


def _state_name(state: str | None) -> str:
    return "no_status" if state is None else str(state)


def expiring_tables(conn: Connection) -> tuple[tuple[str, Table], ...]:
    """The stores a clean cleans, as (store, table): task keys, and dag-run keys where the layout has them."""
    layout = layout_of(conn)
    runs = (("dag_run", layout.dag_run_store),) if layout.dag_run_store is not None else ()
    return (("task", layout.task), *runs)


def iter_expired(
    engine: Engine, now: datetime, spare: bool = True, spared: dict[str, int] | None = None
) -> Iterator[ExpiredRow]:
    """What a clean at ``now`` deletes, ordered by dag, run, task, map index and key (task keys first,
    then dag-run keys); streamed. ``spare``: as ``cleaned``; with ``spared`` as well, what is kept is counted
    there by task instance state as the rows go by (as ``spared_by_state``)."""
    with translate_errors(engine), engine.connect() as conn:
        layout = layout_of(conn)
        for store, table in expiring_tables(conn):
            if spared is not None and spare and layout.unfinished(table, impl_of(conn).name) is not None:
                yield from _expired_or_spared(conn, table, now, spared)
                continue
            task = store == "task"
            scope: list[Any] = [table.c.task_id, table.c.map_index.label("map_index")] if task else [null(), null()]
            cols = [table.c.dag_id, table.c.run_id, *scope, table.c.key]
            # The raw column value (SQLite text, or the driver's datetime) skips SQLAlchemy's per-row parsing.
            raw_expiry = type_coerce(table.c.expires_at, String)
            regions = task and "region_id" in table.c
            region = [table.c.region_id] if regions else []
            order = [*cols[:3], *region, *cols[3:]] if task else [table.c.dag_id, table.c.run_id, table.c.key]
            query = select(*cols, raw_expiry, *region).where(cleaned(conn, table, now, spare)).order_by(*order)
            # 1000 rows a fetch: larger fetches are no faster and only hold more rows at the peak.
            for chunk in conn.execution_options(yield_per=1000).execute(query).partitions():
                for row in chunk:
                    where = str(row[6]) if regions and row[6].int else None
                    yield ExpiredRow(*row[:5], iso_utc(row[5]), store, where)


def _expired_or_spared(conn: Connection, table: Table, now: datetime, spared: dict[str, int]) -> Iterator[ExpiredRow]:
    """The task keys of ``iter_expired`` in one pass over the expired rows, each with its task instance (an
    outer join: at most one, the task instance's key is unique); the keys ``cleaned`` keeps are counted in
    ``spared`` instead of listed. One lookup of the task instance per row, where the count and the listing
    apart took two."""
    layout = layout_of(conn)
    assert layout.task_instance is not None
    ti = layout.task_instances(impl_of(conn).name)
    regions = "region_id" in table.c
    region = [table.c.region_id] if regions else []
    cols = [table.c.dag_id, table.c.run_id, table.c.task_id, table.c.map_index.label("map_index"), table.c.key]
    raw_expiry = type_coerce(table.c.expires_at, String)
    query = (
        select(*cols, raw_expiry, *region, ti.c.dag_id.label("ti_dag_id"), ti.c.state.label("ti_state"))
        .select_from(table.outerjoin(ti, and_(*layout.task_instance_of(table, ti))))
        .where(expired(table, now))
        .order_by(*cols[:3], *region, *cols[3:])
    )
    for chunk in conn.execution_options(yield_per=1000).execute(query).partitions():
        for row in chunk:
            state = row[-1]
            if row[-2] is not None and (state is None or state not in FINISHED_STATES):
                name = _state_name(state)
                spared[name] = spared.get(name, 0) + 1
                continue
            where = str(row[6]) if regions and row[6].int else None
            yield ExpiredRow(*row[:5], iso_utc(row[5]), "task", where)


def count_expired(engine: Engine, now: datetime, spare: bool = True) -> int:
    """How many rows a clean at ``now`` deletes, every store it cleans together (``spare``: as ``cleaned``)."""
    with translate_errors(engine), engine.connect() as conn:
        tables = expiring_tables(conn)
        counts = [select(func.count()).select_from(t).where(cleaned(conn, t, now, spare)) for _, t in tables]
        return sum(int(conn.execute(count).scalar_one()) for count in counts)
