"""Figures about a metastore state store, counted by the database: ``statestore stats``.

Every figure is an aggregate computed by SQL (``GROUP BY``, ``SUM(CASE ...)``, ``COUNT`` of ranges of the
``expires_at`` index, whichever the engine does faster), so memory stays flat however many rows the store
holds; Python only ever sees one row per dag (and part, below), per asset or per day. On a large store the
one pass that reads every value (the figures per dag) is split into parts read at once on connections of
their own (per core as many as the engine keeps busy, ``EngineImpl.parts_per_core``), since reading the
values is what a stats run spends its time on. What each engine counts its own way (the expiry buckets in
the pass or as index ranges, how a split falls) is its implementation's (``db.engines``). Airflow 3.4's
dag-run state store (``dag_run_state_store``, where the database has one) is counted by one grouped
statement of its own: it holds a few keys per run, far fewer than the task store.

All moments are bound as parameters computed from one ``now`` (each engine compares a bound instant
correctly however it stores timestamps), so no figure depends on the server's clock or time zone.

Value sizes are bytes of the stored (UTF-8) text on every engine (``EngineImpl.value_bytes``), the same
measure the accessors hold against ``[state_store] max_value_storage_bytes``. Values written by
Airflow or this tool are JSON with non-ASCII characters escaped, so for them bytes and characters
are the same number anyway.
"""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from typing import Any, NamedTuple

from sqlalchemy import Table, and_, case, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.sql import ColumnElement, Select

from statestore_cli.db.database import translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.engines.base import EngineImpl
from statestore_cli.db.layout import layout_of
from statestore_cli.db.schema import asset, asset_active, asset_state_store
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.largest import check_count, largest_values
from statestore_cli.ops.stats_figures import (
    EXPIRY_BUCKETS,
    AssetFigures,
    AssetStats,
    DagFigures,
    DagRunStats,
    DagTotals,
    DayCount,
    Reversed,
    StoreStats,
    TaskStats,
    as_utc,
    keep_top,
    top_ranked,
    widen,
)

# The figures are defined with their adding up; callers import them from here as before.
__all__ = [
    "CHART_DAYS",
    "EXPIRY_BUCKETS",
    "AssetFigures",
    "AssetStats",
    "DagFigures",
    "DagRunStats",
    "DayCount",
    "StoreStats",
    "TaskStats",
    "oldest_expired_at",
    "store_stats",
]

_asset_kv = asset_state_store

_BUCKET_DAYS = (1, 7, 30)  # the bounds after now, in days
TOP = 10  # dags and assets listed by default
CHART_DAYS = 35  # days in the expiry histogram: today (from now) and the 34 after it, UTC
PARALLEL_MIN_ROWS = 200_000  # below this (by the span of task ids) one statement is as quick as any split
_MAX_PARTS = 4


def expiry_bounds(now: datetime) -> dict[str, datetime]:
    """The instants separating the expiry buckets: now, now + 1, 7 and 30 days."""
    return {"now": now, **{f"{days}d": now + timedelta(days=days) for days in _BUCKET_DAYS}}


def chart_days(now: datetime, days: int = CHART_DAYS) -> list[tuple[date, datetime]]:
    """The histogram's days (UTC) with the instant each ends at; the first starts at ``now``."""
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC)
    return [((midnight + timedelta(days=i)).date(), midnight + timedelta(days=i + 1)) for i in range(days)]


def store_stats(
    engine: Engine,
    filt: KeyFilter,
    now: datetime,
    *,
    max_value_storage_bytes: int = 0,
    top: int = TOP,
    days: int = CHART_DAYS,
    parallel_min_rows: int = PARALLEL_MIN_ROWS,
    workers: int | None = None,
    largest: int | None = None,
) -> StoreStats:
    """The figures of the keys ``filt`` selects, as of ``now`` (an aware datetime), and with ``largest=N``
    their N largest values (``ops.largest``). On a large store the per-dag pass is split into ``workers``
    parts read at once (default: the engine's ``parts_per_core`` per core, at most 4);
    ``parallel_min_rows`` is the least span of task ids that is split."""
    if now.tzinfo is None:
        raise InvalidInputError("now must be timezone-aware")
    if largest is not None:
        check_count(largest)
    if top < 0 or days < 0 or (workers is not None and workers < 1):
        raise InvalidInputError("top and days must not be negative, workers at least 1")
    impl = impl_of(engine)
    impl.check_asset_text(filt.name, filt.uri)
    now = now.astimezone(UTC)
    wants_task = filt.store in (None, "task") and not filt.has_asset_fields
    wants_asset = filt.store in (None, "asset") and not filt.has_task_fields
    limit = max_value_storage_bytes
    with translate_errors(engine), engine.connect() as conn:
        layout = layout_of(conn)
        if filt.store == "dag_run" and layout.dag_run_store is None:
            raise InvalidInputError(_NO_DAG_RUN_STORE.format(layout=layout.name))
        runs_table = layout.dag_run_store if filt.store in (None, "dag_run") else None
        vlen = impl.value_bytes
        split = Split(parallel_min_rows, workers or _default_parts(impl))
        task = _task_stats(conn, filt, now, limit, top, days, vlen, split) if wants_task else None
        runs = _dag_run_stats(conn, runs_table, filt, now, limit, vlen) if runs_table is not None else None
        assets = _asset_stats(conn, filt, limit, top, vlen) if wants_asset else None
    # After the figures, not beside them on a connection of its own: SQLite's split pass keeps every core busy
    # already, and on the servers the overlap gained nothing steady (bench/results/stats.md).
    biggest = None if largest is None else largest_values(engine, filt, largest)
    return StoreStats(now, limit, filt, task, assets, runs, layout.dag_run_store is not None, biggest)


def oldest_expired_at(engine: Engine, filt: KeyFilter, now: datetime) -> datetime | None:
    """When the task key ``filt`` selects that expired first did (before ``now``); None when none has.
    One lookup at the start of the expires_at index."""
    now = now.astimezone(UTC)
    with translate_errors(engine), engine.connect() as conn:
        task = layout_of(conn).task
        query = _task_where(task, select(func.min(task.c.expires_at)), filt).where(task.c.expires_at < now)
        found = conn.execute(query).scalar()
    return None if found is None else as_utc(found)


_NO_DAG_RUN_STORE = (
    "this database has no dag-run state store (Airflow {layout} layout): --store dag_run needs "
    "Airflow 3.4's dag_run_state_store"
)


def _default_parts(impl: EngineImpl) -> int:
    """Parts of the per-dag pass read at once: as many per core as the engine keeps busy."""
    return min((os.cpu_count() or 1) * impl.parts_per_core, _MAX_PARTS)


def _count_if(condition: ColumnElement[bool]) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _task_where(task: Table, query: Select[Any], filt: KeyFilter) -> Select[Any]:
    for name in ("dag_id", "run_id", "task_id", "map_index", "key"):
        wanted = getattr(filt, name)
        if wanted is not None:
            query = query.where(task.c[name] == wanted)
    return query


# -- task keys -------------------------------------------------------------------------------------------
def _task_stats(
    conn: Any, filt: KeyFilter, now: datetime, limit: int, top: int, days: int, vlen: Any, split: Split
) -> TaskStats:
    # One pass over the rows for what needs every value: the figures per dag, summed here (one row per
    # dag and part reaches Python). The expiry buckets are counted in that pass where the engine does that
    # faster (``buckets_in_pass``), else apart, as ranges of the expires_at index, each counted exactly.
    impl = impl_of(conn)
    in_pass = impl.buckets_in_pass
    task = layout_of(conn).task
    parts = _partitions(conn, filt, split)
    queries = [_dag_pass(task, impl, filt, now, limit, vlen, part) for part in parts]
    dags = DagTotals(len(EXPIRY_BUCKETS) if in_pass else 0, limit > 0)
    if len(queries) == 1:
        dags.add(conn.execution_options(yield_per=1000).execute(queries[0]))
        counted = None if in_pass else _expiry(conn, filt, now)
        per_day = _per_day(conn, filt, now, days)
    else:
        from concurrent.futures import ThreadPoolExecutor  # only a large store pays for the import

        # Each part on a connection of its own, all at once; this connection counts the index ranges.
        with ThreadPoolExecutor(len(queries)) as pool:
            running = [pool.submit(_fetch_all, conn.engine, query) for query in queries]
            counted = None if in_pass else _expiry(conn, filt, now)
            per_day = _per_day(conn, filt, now, days)
            for future in running:
                dags.add(future.result())
    return dags.figures(top, dags.expiry if counted is None else counted, per_day)


def _dag_pass(
    task: Table,
    impl: EngineImpl,
    filt: KeyFilter,
    now: datetime,
    limit: int,
    vlen: Any,
    part: ColumnElement[bool] | None,
) -> Select[Any]:
    """Per dag: rows, value bytes, oldest and newest updated_at, then the expiry buckets (where the engine
    counts them in the pass) and the values over ``limit`` (when there is one), of the rows ``filt`` and
    ``part`` select."""
    size = vlen(task.c.value)
    buckets = [_count_if(c) for c in _bucket_conditions(task, now)] if impl.buckets_in_pass else []
    over = [impl.count_true(size > limit)] if limit > 0 else []
    query = select(
        task.c.dag_id,
        func.count(),
        func.coalesce(func.sum(size), 0),
        func.min(task.c.updated_at),
        func.max(task.c.updated_at),
        *buckets,
        *over,
    ).group_by(*impl.group_exactly(task.c.dag_id))
    if part is not None:
        query = query.where(part)
    query = _task_where(task, query, filt)
    return query if filt.has_task_fields else impl.whole_store_pass(task, query)


def _fetch_all(engine: Engine, query: Select[Any]) -> list[Any]:
    with engine.connect() as conn:
        return impl_of(conn).fetch_part(conn, query)


# -- splitting the pass over the cores -------------------------------------------------------------------


class Split(NamedTuple):
    min_rows: int  # the least span of task ids worth splitting
    workers: int  # parts, each on a connection of its own


def _partitions(conn: Any, filt: KeyFilter, split: Split) -> list[ColumnElement[bool] | None]:
    """Conditions that split the rows of the per-dag pass into ``split.workers`` parts, or ``[None]`` for
    one statement. Only the pass over a whole large store is split, where the engine splits at all
    (``EngineImpl.splits_pass``): with a scope filter an index reads few rows anyway. The engine says where
    the parts fall (``EngineImpl.part_bounds``)."""
    impl = impl_of(conn)
    workers = split.workers
    if workers < 2 or filt.has_task_fields or not impl.splits_pass(conn.engine):
        return [None]
    task = layout_of(conn).task
    # Two scalar subqueries: SQLite answers a lone min() or max() of the primary key with one seek, but
    # both in one SELECT with a scan of the whole table.
    ends = [select(agg(task.c.id)).scalar_subquery() for agg in (func.min, func.max)]
    low, high = conn.execute(select(*ends)).one()
    if low is None or high - low + 1 < max(split.min_rows, workers):
        return [None]
    column, bounds = impl.part_bounds(conn, task, low, high - low + 1, workers)
    if not bounds:
        return [None]
    parts: list[ColumnElement[bool] | None] = [column < bounds[0]]
    parts += [and_(column >= a, column < b) for a, b in pairwise(bounds)]
    return [*parts, column >= bounds[-1]]


def _bucket_conditions(task: Table, now: datetime) -> list[ColumnElement[bool]]:
    """Which task rows each of EXPIRY_BUCKETS holds: half-open ranges of expires_at, then NULL."""
    expires = task.c.expires_at
    bounds = list(expiry_bounds(now).values())
    conditions = [expires < now]
    conditions += [and_(expires >= low, expires < high) for low, high in pairwise(bounds)]
    return [*conditions, expires >= bounds[-1], expires.is_(None)]


def _expiry(conn: Any, filt: KeyFilter, now: datetime) -> list[int]:
    """Task rows per expiry bucket, one exact range count of the expires_at index each, in one statement."""
    task = layout_of(conn).task
    counts = [
        _task_where(task, select(func.count()), filt).where(c).scalar_subquery() for c in _bucket_conditions(task, now)
    ]
    return [int(n) for n in conn.execute(select(*counts)).one()]


def _per_day(conn: Any, filt: KeyFilter, now: datetime, days: int) -> list[DayCount]:
    """Task keys expiring on each of the next ``days`` UTC days (the first from ``now`` on)."""
    spans = chart_days(now, days)
    if not spans:
        return []
    task = layout_of(conn).task
    starts = [now] + [end for _day, end in spans[:-1]]
    ranges = [(low, high) for low, (_day, high) in zip(starts, spans, strict=True)]
    counts = impl_of(conn).count_ranges(conn, lambda query: _task_where(task, query, filt), task.c.expires_at, ranges)
    return [DayCount(day, n) for (day, _end), n in zip(spans, counts, strict=True)]


# -- dag-run keys ----------------------------------------------------------------------------------------
def _dag_run_stats(
    conn: Any, table: Table, filt: KeyFilter, now: datetime, limit: int, vlen: Any
) -> DagRunStats | None:
    """The figures of the dag-run keys ``filt`` selects (None when it selects task keys only): one
    statement grouped by dag, the buckets counted in it. The table holds a few keys per run, far fewer
    than the task table, so no index ranges or split passes are needed."""
    if filt.has_asset_fields or filt.task_id is not None or filt.map_index is not None:
        return None
    if filt.region_id is not None and filt.region_id.int:
        return None  # a region holds task keys only
    size = vlen(table.c.value)
    over = [_count_if(size > limit)] if limit > 0 else []
    query = select(
        table.c.dag_id,
        func.count(),
        func.coalesce(func.sum(size), 0),
        func.count(func.distinct(table.c.dag_run_id)),
        func.min(table.c.updated_at),
        func.max(table.c.updated_at),
        *[_count_if(c) for c in _bucket_conditions(table, now)],
        *over,
    ).group_by(*impl_of(conn).group_exactly(table.c.dag_id))
    for name in ("dag_id", "run_id", "key"):
        wanted = getattr(filt, name)
        if wanted is not None:
            query = query.where(table.c[name] == wanted)
    rows = value_bytes = dags = runs = over_limit = 0
    expiry = [0] * len(EXPIRY_BUCKETS)
    oldest: datetime | None = None
    newest: datetime | None = None
    for _dag_id, count, nbytes, dag_runs, first, last, *rest in conn.execute(query):
        dags += 1
        rows, value_bytes, runs = rows + int(count), value_bytes + int(nbytes), runs + int(dag_runs)
        oldest, newest = widen(oldest, newest, first, last)
        expiry = [n + int(m) for n, m in zip(expiry, rest[: len(expiry)], strict=True)]
        over_limit += int(rest[-1]) if over else 0
    return DagRunStats(
        rows=rows,
        value_bytes=value_bytes,
        dags=dags,
        runs=runs,
        oldest_updated_at=oldest,
        newest_updated_at=newest,
        over_limit=over_limit if over else None,
        expiry=dict(zip(EXPIRY_BUCKETS, expiry, strict=True)),
    )


# -- asset keys ------------------------------------------------------------------------------------------
def _asset_stats(conn: Any, filt: KeyFilter, limit: int, top: int, vlen: Any) -> AssetStats:
    size = vlen(_asset_kv.c.value)
    over = [_count_if(size > limit).label("over")] if limit > 0 else []
    per_asset = select(
        _asset_kv.c.asset_id,
        func.count().label("rows"),
        func.coalesce(func.sum(size), 0).label("nbytes"),
        func.min(_asset_kv.c.updated_at).label("oldest"),
        func.max(_asset_kv.c.updated_at).label("newest"),
        *over,
    ).group_by(_asset_kv.c.asset_id)
    if filt.key is not None:
        per_asset = per_asset.where(_asset_kv.c.key == filt.key)
    grouped = per_asset.subquery()
    is_active = case((asset_active.c.name.is_not(None), 1), else_=0)
    query = (
        select(grouped, asset.c.name, asset.c.uri, is_active.label("active"))
        .join(asset, asset.c.id == grouped.c.asset_id)
        .outerjoin(asset_active, and_(asset_active.c.name == asset.c.name, asset_active.c.uri == asset.c.uri))
    )
    for column, wanted in ((asset.c.id, filt.asset_id), (asset.c.name, filt.name), (asset.c.uri, filt.uri)):
        if wanted is not None:
            query = query.where(column == wanted)
    rows = value_bytes = assets = inactive = inactive_rows = over_limit = 0
    oldest: datetime | None = None
    newest: datetime | None = None
    ranked: list[tuple[int, Reversed, AssetFigures]] = []
    for row in conn.execution_options(yield_per=1000).execute(query):
        count, nbytes, active = int(row.rows), int(row.nbytes), bool(row.active)
        assets += 1
        rows += count
        value_bytes += nbytes
        if not active:
            inactive += 1
            inactive_rows += count
        if over:
            over_limit += int(row.over)
        oldest, newest = widen(oldest, newest, row.oldest, row.newest)
        figures = AssetFigures(int(row.asset_id), row.name, row.uri, count, nbytes, active)
        keep_top(ranked, top, (count, Reversed(f"{row.name}\x00{row.uri}"), figures))
    return AssetStats(
        rows=rows,
        value_bytes=value_bytes,
        assets=assets,
        inactive_assets=inactive,
        inactive_rows=inactive_rows,
        oldest_updated_at=oldest,
        newest_updated_at=newest,
        over_limit=over_limit if over else None,
        top_assets=top_ranked(ranked),
    )
