"""Figures about a metastore state store, counted by the database: ``statestore stats``.

Every figure is an aggregate computed by SQL (``GROUP BY``, ``SUM(CASE ...)``, ``COUNT`` of ranges of the
``expires_at`` index, whichever the engine does faster), so memory stays flat however many rows the store
holds; Python only ever sees one row per dag (and part, below), per asset or per day. On a large store the
one pass that reads every value (the figures per dag) is split into parts read at once on connections of
their own (one per core; two per core on MySQL/MariaDB, whose parts also wait on page reads), since
reading the values is what a stats run spends its time on. Airflow 3.4's dag-run state store
(``dag_run_state_store``, where the database has one) is counted by one grouped statement of its own:
it holds a few keys per run, far fewer than the task store.

All moments are bound as parameters computed from one ``now`` (SQLite stores timestamps as text
``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, PostgreSQL as ``timestamptz``, MySQL as naive UTC; each compares a
bound instant correctly), so no figure depends on the server's clock or time zone.

Value sizes are bytes of the stored (UTF-8) text on every engine: ``octet_length`` on PostgreSQL,
``LENGTH`` on MySQL/MariaDB (bytes there) and ``length(CAST(value AS BLOB))`` on SQLite, the same
measure the accessors hold against ``[state_store] max_value_storage_bytes``. Values written by
Airflow or this tool are JSON with non-ASCII characters escaped, so for them bytes and characters
are the same number anyway.
"""

from __future__ import annotations

import heapq
import os
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from typing import Any, NamedTuple

from sqlalchemy import Integer, Table, and_, case, func, null, select
from sqlalchemy.engine import Engine
from sqlalchemy.sql import ColumnElement, Select

from statestore_cli.db.database import sqlite_path, translate_errors
from statestore_cli.db.dialects import value_bytes as stored_bytes
from statestore_cli.db.layout import layout_of
from statestore_cli.db.mysql_text import MYSQL_ENGINES, check_asset_text
from statestore_cli.db.schema import asset, asset_active, asset_state_store, dag_run
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.largest import LargeValue, check_count, largest_values

_asset_kv = asset_state_store
_MYSQL = MYSQL_ENGINES

# The expiry buckets of task keys, in order; non-overlapping, each the half-open interval
# [lower, upper) of expires_at relative to now. "never" is expires_at NULL.
EXPIRY_BUCKETS = ("expired", "within_1_day", "within_1_to_7_days", "within_7_to_30_days", "after_30_days", "never")
_BUCKET_DAYS = (1, 7, 30)  # the bounds after now, in days
TOP = 10  # dags and assets listed by default
CHART_DAYS = 35  # days in the expiry histogram: today (from now) and the 34 after it, UTC
PARALLEL_MIN_ROWS = 200_000  # below this (by the span of task ids) one statement is as quick as any split
_MAX_PARTS = 4


@dataclass(frozen=True)
class DagFigures:
    dag_id: str
    rows: int
    value_bytes: int


@dataclass(frozen=True)
class AssetFigures:
    asset_id: int
    name: str
    uri: str
    rows: int
    value_bytes: int
    active: bool  # a row in asset_active with the same name and uri


@dataclass(frozen=True)
class DayCount:
    day: date  # a UTC calendar day; the first one counts from ``now`` only
    rows: int


@dataclass(frozen=True)
class TaskStats:
    rows: int
    value_bytes: int
    dags: int
    oldest_updated_at: datetime | None
    newest_updated_at: datetime | None
    over_limit: int | None  # values over max_value_storage_bytes; None when there is no limit (0)
    expiry: dict[str, int]  # EXPIRY_BUCKETS -> rows
    top_dags_by_rows: list[DagFigures]
    top_dags_by_bytes: list[DagFigures]
    expiring_per_day: list[DayCount]  # CHART_DAYS days from today, zeros included


@dataclass(frozen=True)
class AssetStats:
    rows: int
    value_bytes: int
    assets: int  # assets holding at least one key
    inactive_assets: int  # of which not active any more
    inactive_rows: int  # keys of those inactive assets
    oldest_updated_at: datetime | None
    newest_updated_at: datetime | None
    over_limit: int | None
    top_assets: list[AssetFigures]  # by keys, then name


@dataclass(frozen=True)
class DagRunStats:
    """The keys of Airflow 3.4's dag-run state store (``dag_run_state_store``)."""

    rows: int
    value_bytes: int
    dags: int  # dags with at least one dag-run key
    runs: int  # dag runs with at least one key
    oldest_updated_at: datetime | None
    newest_updated_at: datetime | None
    over_limit: int | None
    expiry: dict[str, int]  # EXPIRY_BUCKETS -> rows, as for task keys


@dataclass(frozen=True)
class StoreStats:
    now: datetime
    max_value_storage_bytes: int  # 0 = no limit
    filter: KeyFilter
    task: TaskStats | None  # None when the filter leaves out the task store
    asset: AssetStats | None  # likewise for the asset store
    dag_run: DagRunStats | None = None  # None where the database has no dag-run store, or the filter leaves it out
    has_dag_run_store: bool = False  # whether the database has one (Airflow 3.4's layout)
    largest: list[LargeValue] | None = None  # the largest values, largest first, when asked for (``largest=N``)


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
    parts read at once (default: one per core, two per core on MySQL/MariaDB, at most 4);
    ``parallel_min_rows`` is the least span of task ids that is split."""
    if now.tzinfo is None:
        raise InvalidInputError("now must be timezone-aware")
    if largest is not None:
        check_count(largest)
    if top < 0 or days < 0 or (workers is not None and workers < 1):
        raise InvalidInputError("top and days must not be negative, workers at least 1")
    check_asset_text(engine.dialect.name, filt.name, filt.uri)
    now = now.astimezone(UTC)
    wants_task = filt.store in (None, "task") and not filt.has_asset_fields
    wants_asset = filt.store in (None, "asset") and not filt.has_task_fields
    limit = max_value_storage_bytes
    with translate_errors(engine), engine.connect() as conn:
        layout = layout_of(conn)
        if filt.store == "dag_run" and layout.dag_run_store is None:
            raise InvalidInputError(_NO_DAG_RUN_STORE.format(layout=layout.name))
        runs_table = layout.dag_run_store if filt.store in (None, "dag_run") else None
        vlen = _value_bytes(engine.dialect.name)
        split = Split(parallel_min_rows, workers or _default_parts(engine.dialect.name))
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
    return None if found is None else _as_utc(found)


_NO_DAG_RUN_STORE = (
    "this database has no dag-run state store (Airflow {layout} layout): --store dag_run needs "
    "Airflow 3.4's dag_run_state_store"
)


def _default_parts(dialect: str) -> int:
    """Parts of the per-dag pass read at once: one per core, but two per core on MySQL/MariaDB, whose parts
    also wait on InnoDB page reads: when the table does not fit the buffer pool, one part's reads overlap
    another's computing (bench/results/stats.md)."""
    per_core = 2 if dialect in _MYSQL else 1
    return min((os.cpu_count() or 1) * per_core, _MAX_PARTS)


def _value_bytes(dialect: str) -> Any:
    """SQL for the size of a value in bytes on this engine (``db.dialects.value_bytes``)."""
    return lambda column: stored_bytes(dialect, column)


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
    # dag and part reaches Python). The expiry buckets are counted in that pass on PostgreSQL; SQLite and
    # MariaDB count them faster apart, as ranges of the expires_at index (a CASE per row comparing
    # timestamps costs them far more than the index ranges on a large store). On a split MySQL pass
    # one of those buckets is derived instead (_likely_largest_bucket).
    dialect = conn.dialect.name
    in_pass = dialect == "postgresql"
    task = layout_of(conn).task
    parts = _partitions(conn, filt, split)
    queries = [_dag_pass(task, dialect, filt, now, limit, vlen, part) for part in parts.conditions]
    dags = _DagTotals(len(EXPIRY_BUCKETS) if in_pass else 0, limit > 0)
    if len(queries) == 1:
        dags.add(conn.execution_options(yield_per=1000).execute(queries[0]))
        expiry = dags.expiry if in_pass else _expiry(conn, filt, now)
        per_day = _per_day(conn, filt, now, days)
    else:
        from concurrent.futures import ThreadPoolExecutor  # only a large store pays for the import

        # Each part on a connection of its own, all at once; this connection counts the index ranges.
        with ThreadPoolExecutor(len(queries)) as pool:
            running = [pool.submit(_fetch_all, conn.engine, query) for query in queries]
            derived = _likely_largest_bucket(conn, now, parts.ids) if dialect in _MYSQL and parts.ids else None
            expiry = _expiry(conn, filt, now, skip=derived)
            per_day = _per_day(conn, filt, now, days)
            for future in running:
                dags.add(future.result())
        if derived is not None:
            # What the other buckets leave of the pass's rows: both read the whole store, so only a write
            # between the statements can make it a little off (never below zero).
            expiry[derived] = max(0, dags.rows - sum(expiry))
    return dags.figures(top, expiry, per_day)


def _dag_pass(
    task: Table, dialect: str, filt: KeyFilter, now: datetime, limit: int, vlen: Any, part: ColumnElement[bool] | None
) -> Select[Any]:
    """Per dag: rows, value bytes, oldest and newest updated_at, then the expiry buckets (PostgreSQL) and
    the values over ``limit`` (when there is one), of the rows ``filt`` and ``part`` select."""
    size = vlen(task.c.value)
    buckets = [_count_if(c) for c in _bucket_conditions(task, now)] if dialect == "postgresql" else []
    # MySQL adds up a comparison as 0 or 1, a tenth of the pass cheaper than a CASE.
    over_limit = func.sum(size > limit, type_=Integer) if dialect in _MYSQL else _count_if(size > limit)
    over = [over_limit] if limit > 0 else []
    query = select(
        task.c.dag_id,
        func.count(),
        func.coalesce(func.sum(size), 0),
        func.min(task.c.updated_at),
        func.max(task.c.updated_at),
        *buckets,
        *over,
    ).group_by(*_exactly(task.c.dag_id, dialect))
    if part is not None:
        query = query.where(part)
    query = _task_where(task, query, filt)
    if dialect in _MYSQL and not filt.has_task_fields:
        return _mysql_store_pass(task, query, dialect)
    return query


def _mysql_store_pass(task: Table, per_dag: Select[Any], dialect: str) -> Select[Any]:
    """The per-dag pass over a whole MySQL/MariaDB store (or a range of its primary key), read as the table
    lies: by the (dag_id, ...) index it would fetch every row through that index, a random read each. It
    groups by the integer dag_run_id, and the few groups are then added up per dag through dag_run's primary
    key: a temporary table keyed by a 250-character id costs MariaDB more than one keyed by an integer."""
    per_run = per_dag.with_only_columns(task.c.dag_run_id, *list(per_dag.selected_columns)[1:])
    # ORDER BY NULL: MariaDB would sort the groups, which nothing needs.
    per_run = per_run.group_by(None).group_by(task.c.dag_run_id).order_by(null())
    runs = per_run.with_hint(task, "FORCE INDEX (PRIMARY)", dialect).subquery()
    n, nbytes, first, last, *rest = list(runs.c)[1:]
    return (
        select(dag_run.c.dag_id, func.sum(n), func.sum(nbytes), func.min(first), func.max(last), *map(func.sum, rest))
        .join_from(runs, dag_run, dag_run.c.id == runs.c.dag_run_id)
        .group_by(*_exactly(dag_run.c.dag_id, dialect))
        # The groups first, then one primary-key lookup each: left to itself the optimizer may walk all of
        # dag_run's (dag_id, run_id) index instead, and an Airflow database holds every run ever made.
        .prefix_with("STRAIGHT_JOIN", dialect=dialect)
    )


def _exactly(dag_id: Any, dialect: str) -> list[Any]:
    """Grouping by ``dag_id`` that keeps dags ``d`` and ``d `` apart: MySQL's collations ignore trailing
    spaces when grouping too, so the length joins the key there."""
    return [dag_id, func.char_length(dag_id)] if dialect in _MYSQL else [dag_id]


def _fetch_all(engine: Engine, query: Select[Any]) -> list[Any]:
    with engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            return list(conn.execute(query))
        # A part reads its pages once: SQLite's page cache (2 MB a connection) would only add each extra
        # connection's 2 MB to the peak memory. Restored before the connection goes back to the pool.
        cache = conn.exec_driver_sql("PRAGMA cache_size").scalar_one()
        conn.exec_driver_sql("PRAGMA cache_size=-256")
        try:
            return list(conn.execute(query))
        finally:
            conn.exec_driver_sql(f"PRAGMA cache_size={int(cache)}")


class _DagTotals:
    """The per-dag rows of one or more parts, added up: a dag may span parts."""

    def __init__(self, buckets: int, over: bool) -> None:
        self.buckets = buckets
        self.over = over
        self.by_dag: dict[str, list[Any]] = {}  # dag_id -> [rows, bytes, oldest, newest, *buckets, over]

    def add(self, rows: Iterable[Any]) -> None:
        for dag_id, count, nbytes, first, last, *rest in rows:
            sums = [int(count), int(nbytes), *(int(n) for n in rest)]
            first, last = _as_utc(first), _as_utc(last)
            seen = self.by_dag.get(dag_id)
            if seen is None:
                self.by_dag[dag_id] = [sums[0], sums[1], first, last, *sums[2:]]
                continue
            seen[2], seen[3] = min(seen[2], first), max(seen[3], last)
            for i, n in enumerate(sums):
                seen[i if i < 2 else i + 2] += n

    @property
    def rows(self) -> int:
        return sum(totals[0] for totals in self.by_dag.values())

    @property
    def expiry(self) -> list[int]:
        return [sum(totals[4 + i] for totals in self.by_dag.values()) for i in range(self.buckets)]

    def figures(self, top: int, expiry: list[int], per_day: list[DayCount]) -> TaskStats:
        by_rows: list[tuple[int, _Reversed, DagFigures]] = []
        by_bytes: list[tuple[int, _Reversed, DagFigures]] = []
        for dag_id, (count, nbytes, *_rest) in self.by_dag.items():
            figures = DagFigures(dag_id, count, nbytes)
            _keep_top(by_rows, top, (count, _Reversed(dag_id), figures))
            _keep_top(by_bytes, top, (nbytes, _Reversed(dag_id), figures))
        totals = self.by_dag.values()
        return TaskStats(
            rows=self.rows,
            value_bytes=sum(t[1] for t in totals),
            dags=len(self.by_dag),
            oldest_updated_at=min((t[2] for t in totals), default=None),
            newest_updated_at=max((t[3] for t in totals), default=None),
            over_limit=sum(t[-1] for t in totals) if self.over else None,
            expiry=dict(zip(EXPIRY_BUCKETS, expiry, strict=True)),
            top_dags_by_rows=_ranked(by_rows),
            top_dags_by_bytes=_ranked(by_bytes),
            expiring_per_day=per_day,
        )


# -- splitting the pass over the cores -------------------------------------------------------------------


class Split(NamedTuple):
    min_rows: int  # the least span of task ids worth splitting
    workers: int  # parts, each on a connection of its own


class _Parts(NamedTuple):
    conditions: list[ColumnElement[bool] | None]  # [None]: one statement
    ids: tuple[int, int] | None = None  # the lowest and highest task id, when split


def _partitions(conn: Any, filt: KeyFilter, split: Split) -> _Parts:
    """Conditions that split the rows of the per-dag pass into ``split.workers`` parts, or
    ``[None]`` for one statement. Only the pass over a whole large store on a SQLite file or MySQL/MariaDB
    is split: PostgreSQL spreads a scan over parallel workers itself, and with a scope filter an index
    reads few rows anyway. SQLite's parts are ranges of dag_id (each walks its share of the dag_id index in
    order, as the whole pass would); MySQL's are ranges of the primary key (each reads its share of the
    table in order)."""
    dialect = conn.dialect.name
    workers = split.workers
    if workers < 2 or filt.has_task_fields or dialect == "postgresql":
        return _Parts([None])
    if dialect == "sqlite" and sqlite_path(conn.engine.url) is None:
        return _Parts([None])  # an in-memory database is private to its connection
    task = layout_of(conn).task
    # Two scalar subqueries: SQLite answers a lone min() or max() of the primary key with one seek, but
    # both in one SELECT with a scan of the whole table.
    ends = [select(agg(task.c.id)).scalar_subquery() for agg in (func.min, func.max)]
    low, high = conn.execute(select(*ends)).one()
    if low is None or high - low + 1 < max(split.min_rows, workers):
        return _Parts([None])
    span = high - low + 1
    if dialect == "sqlite":
        column: Any = task.c.dag_id
        bounds: list[Any] = _dag_quantiles(conn, task, low, span, workers)
    else:
        column = task.c.id
        bounds = [low + span * i // workers for i in range(1, workers)]
    if not bounds:
        return _Parts([None])
    parts: list[ColumnElement[bool] | None] = [column < bounds[0]]
    parts += [and_(column >= a, column < b) for a, b in pairwise(bounds)]
    return _Parts([*parts, column >= bounds[-1]], (low, high))


_SAMPLES = 64  # rows sampled to place SQLite's dag_id bounds, or to guess MySQL's largest expiry bucket


def _sample_sql(task: Table) -> str:
    """Written out for SQLite's driver (qmark parameters): SQLAlchemy compiling 64 subqueries costs more than
    running them, and the parts wait for the bounds. Names from ``task``, as the layout has them."""
    dag_id, pk = task.c.dag_id.name, task.c.id.name
    one = f"(SELECT {dag_id} FROM {task.name} WHERE {pk} >= ? ORDER BY {pk} LIMIT 1)"
    return "SELECT " + ", ".join([one] * _SAMPLES)


def _dag_quantiles(conn: Any, task: Table, low: int, span: int, workers: int) -> list[str]:
    """dag_ids that split the rows into ``workers`` parts of about equal size, from the dag_ids of rows
    sampled at evenly spaced ids: each sample is one seek of the primary key, where an exact quantile
    (``ORDER BY dag_id OFFSET n``) would walk half the index, giving back much of what the split saves."""
    at = tuple(low + span * i // _SAMPLES for i in range(_SAMPLES))
    sample = sorted(d for d in conn.exec_driver_sql(_sample_sql(task), at).one() if d is not None)
    return sorted({sample[len(sample) * i // workers] for i in range(1, workers)}) if sample else []


def _bucket_conditions(task: Table, now: datetime) -> list[ColumnElement[bool]]:
    """Which task rows each of EXPIRY_BUCKETS holds: half-open ranges of expires_at, then NULL."""
    expires = task.c.expires_at
    bounds = list(expiry_bounds(now).values())
    conditions = [expires < now]
    conditions += [and_(expires >= low, expires < high) for low, high in pairwise(bounds)]
    return [*conditions, expires >= bounds[-1], expires.is_(None)]


def _expiry(conn: Any, filt: KeyFilter, now: datetime, skip: int | None = None) -> list[int]:
    """Task rows per expiry bucket, one range count of the expires_at index each, in one statement; the
    bucket numbered ``skip`` is not counted (0)."""
    task = layout_of(conn).task
    conditions = _bucket_conditions(task, now)
    counted = [i for i in range(len(conditions)) if i != skip]
    counts = [_task_where(task, select(func.count()), filt).where(conditions[i]).scalar_subquery() for i in counted]
    found = dict(zip(counted, conn.execute(select(*counts)).one(), strict=True))
    return [int(found.get(i, 0)) for i in range(len(conditions))]


def _likely_largest_bucket(conn: Any, now: datetime, ids: tuple[int, int]) -> int | None:
    """The expiry bucket most of ``_SAMPLES`` rows at evenly spaced task ids fall in (None: none found).

    MySQL/MariaDB walk every index entry of a range to count it (a third of a pass over the whole store
    in all), so on a whole store the likeliest largest bucket is not counted but derived from the rows of
    the per-dag pass; a wrong guess only saves less."""
    low, high = ids
    task = layout_of(conn).task
    at = sorted({low + (high - low) * i // (_SAMPLES - 1) for i in range(_SAMPLES)})
    sample = conn.execute(select(task.c.expires_at).where(task.c.id.in_(at))).scalars().all()
    if not sample:
        return None
    bounds = list(expiry_bounds(now).values())
    never = len(EXPIRY_BUCKETS) - 1
    # bisect_right: 0 before now (expired), then one more for each bound at or before the moment.
    buckets = Counter(never if moment is None else bisect_right(bounds, moment) for moment in sample)
    return buckets.most_common(1)[0][0]


def _per_day(conn: Any, filt: KeyFilter, now: datetime, days: int) -> list[DayCount]:
    """Task keys expiring on each of the next ``days`` UTC days (the first from ``now`` on)."""
    spans = chart_days(now, days)
    if not spans:
        return []
    task = layout_of(conn).task
    expires = task.c.expires_at
    if conn.dialect.name == "postgresql":
        # The day's number as a CASE over bound day ends, grouped: one range scan of the window.
        day = case(*[(expires < end, i) for i, (_day, end) in enumerate(spans)], else_=len(spans))
        inner = (
            _task_where(task, select(day.label("day")), filt).where(expires >= now, expires < spans[-1][1]).subquery()
        )
        found = dict(conn.execute(select(inner.c.day, func.count()).group_by(inner.c.day)).all())
        counts = [int(found.get(i, 0)) for i in range(len(spans))]
    else:
        # SQLite and MariaDB: one range count of the expires_at index per day, in one statement (a CASE
        # per row comparing timestamps is several times slower there when the window holds many keys).
        starts = [now] + [end for _day, end in spans[:-1]]
        ranges = [
            _task_where(task, select(func.count()), filt).where(expires >= low, expires < high).scalar_subquery()
            for low, (_day, high) in zip(starts, spans, strict=True)
        ]
        counts = [int(n) for n in conn.execute(select(*ranges)).one()]
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
    dialect = conn.dialect.name
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
    ).group_by(*_exactly(table.c.dag_id, dialect))
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
        oldest, newest = _widen(oldest, newest, first, last)
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
    ranked: list[tuple[int, _Reversed, AssetFigures]] = []
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
        oldest, newest = _widen(oldest, newest, row.oldest, row.newest)
        figures = AssetFigures(int(row.asset_id), row.name, row.uri, count, nbytes, active)
        _keep_top(ranked, top, (count, _Reversed(f"{row.name}\x00{row.uri}"), figures))
    return AssetStats(
        rows=rows,
        value_bytes=value_bytes,
        assets=assets,
        inactive_assets=inactive,
        inactive_rows=inactive_rows,
        oldest_updated_at=oldest,
        newest_updated_at=newest,
        over_limit=over_limit if over else None,
        top_assets=_ranked(ranked),
    )


def _widen(oldest: datetime | None, newest: datetime | None, first: Any, last: Any) -> tuple[datetime, datetime]:
    """The ``updated_at`` range so far, grown to cover one group's ``min()``/``max()``. Those lose the
    column type on some engines, so they are read as the column does (``_as_utc``)."""
    first, last = _as_utc(first), _as_utc(last)
    return (first if oldest is None or first < oldest else oldest, last if newest is None or last > newest else newest)


def _as_utc(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# -- top N -----------------------------------------------------------------------------------------------
class _Reversed:
    """Orders names backwards, so a min-heap of (count, _Reversed(name)) drops the highest name first and
    equal counts rank by name ascending."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __lt__(self, other: _Reversed) -> bool:
        return self.name > other.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.name == other.name


def _keep_top(heap: list[Any], size: int, item: tuple[Any, ...]) -> None:
    if size == 0:
        return
    if len(heap) < size:
        heapq.heappush(heap, item)
    elif item[:2] > heap[0][:2]:
        heapq.heapreplace(heap, item)


def _ranked(heap: Iterable[tuple[Any, Any, Any]]) -> list[Any]:
    """The kept items, largest count first, ties by name."""
    return [figures for _count, _name, figures in sorted(heap, key=lambda item: item[:2], reverse=True)]
