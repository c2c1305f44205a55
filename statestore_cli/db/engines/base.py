"""``EngineImpl``: what every engine does alike, and the default each engine's module overrides where it
differs (``sqlite.py``, ``postgresql.py``, ``mysql.py``). Nothing here keeps state: one instance per
dialect name serves every connection (``impl_of``)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Integer, String, Table, bindparam, case, delete, func, inspect, select, type_coerce
from sqlalchemy.engine import Connection, CursorResult, Engine, Row
from sqlalchemy.engine.url import URL
from sqlalchemy.sql import ColumnElement, Delete, FromClause, Insert, Select

from statestore_cli.errors import PARAMETER

Narrow = Callable[[Select[Any]], Select[Any]]  # a query with the caller's WHERE added

# The tables whose columns ``store_tables`` reads: the task table, and Airflow's table its keys pair with; and
# every table whose presence it tells.
TASK_TABLE, TASK_INSTANCE = "task_state_store", "task_instance"
LAYOUT_TABLES = (TASK_TABLE, "dag_run_state_store", TASK_INSTANCE)


@dataclass(frozen=True)
class StoreTables:
    """What ``db.layout`` reads of a database's tables to tell its layout, and nothing more.

    ``tables``: which of ``LAYOUT_TABLES`` the schema has (as tables, not views); ``task_columns``: those of
    ``task_state_store`` (empty where ``tables`` lacks it: then nothing else is read); ``unique_keys``: the
    columns of its unique constraints and unique indexes, each in the key's order (a key may be given twice:
    once as a constraint, once as the index behind it; an expression is "None"); ``region_type``: its
    ``region_id`` column's type as SQLAlchemy reflects it (None where there is no such column);
    ``task_instance``: the columns of ``task_instance`` (None where ``tables`` lacks it)."""

    tables: frozenset[str]
    task_columns: frozenset[str] = frozenset()
    unique_keys: tuple[tuple[str, ...], ...] = ()
    region_type: Any = None
    task_instance: frozenset[str] | None = None


class EngineImpl:
    """The default behaviour, the SQL standard's where there is one; a subclass per engine overrides it."""

    # Whether the database is a server's (host, port, name), not a file (or memory) opened in process.
    has_server = True
    # Parts of `stats`' per-dag pass to read at once per core (``parts_per_core`` times the cores, at most 4).
    parts_per_core = 1
    # Whether `stats` counts the expiry buckets in its per-dag pass (a CASE per row) rather than as ranges
    # of the expires_at index, one count each: whichever the engine does faster.
    buckets_in_pass = False

    def __init__(self, name: str) -> None:
        self.name = name  # SQLAlchemy's dialect name: "sqlite", "postgresql", "mysql", "mariadb", ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # -- the database --------------------------------------------------------------------------------
    def database_file(self, url: URL) -> Path | None:
        """The file that holds the database, for an engine that keeps it in one; else None."""
        return None

    def read_one_snapshot(self, conn: Connection) -> Connection:
        """``conn`` set to read every statement of its transaction from one snapshot of the database."""
        return conn.execution_options(isolation_level="REPEATABLE READ")

    def store_tables(self, conn: Connection, schema: str | None) -> StoreTables:
        """What the layout needs of the tables in ``schema`` (None: the connection's default), here through
        SQLAlchemy's reflection; an engine whose catalog answers it in fewer, lighter queries overrides it."""
        inspector = inspect(conn)
        tables = frozenset(inspector.get_table_names(schema=schema)).intersection(LAYOUT_TABLES)
        if TASK_TABLE not in tables:
            return StoreTables(tables)
        columns = {c["name"]: c["type"] for c in inspector.get_columns(TASK_TABLE, schema=schema)}
        keys: list[list[Any]] = [u["column_names"] for u in inspector.get_unique_constraints(TASK_TABLE, schema=schema)]
        keys += [i["column_names"] for i in inspector.get_indexes(TASK_TABLE, schema=schema) if i.get("unique")]
        return StoreTables(
            tables,
            frozenset(columns),
            tuple(tuple(map(str, key)) for key in keys),
            columns.get("region_id"),
            self.table_columns(conn, schema, TASK_INSTANCE) if TASK_INSTANCE in tables else None,
        )

    def table_columns(self, conn: Connection, schema: str | None, table: str) -> frozenset[str] | None:
        """The column names of ``table`` (a table or a view) in ``schema``; None where there is none."""
        inspector = inspect(conn)
        if not inspector.has_table(table, schema=schema):
            return None
        return frozenset(c["name"] for c in inspector.get_columns(table, schema=schema))

    # -- values and text -----------------------------------------------------------------------------
    def value_bytes(self, column: Any) -> Any:
        """The size of a stored value in bytes of its (UTF-8) text, the measure writers hold against
        ``[state_store] max_value_storage_bytes``."""
        return func.octet_length(column)

    def code_point_order(self, column: Any) -> Any:
        """``column`` (text) as an ``ORDER BY`` term that sorts as Python sorts ``str``: by code point,
        whatever the column's collation."""
        return column

    def region_order(self, column: Any) -> Any:
        """``region_id`` ordered as its UUID's text: stored as bytes it is in that order already; as text
        it is ordered as text."""
        if getattr(column.type, "form", "text") == "bytes":
            return column
        return self.code_point_order(column)

    def check_asset_text(self, name: str | None, uri: str | None) -> None:
        """Refuse an asset name or uri (to look up or write) that no asset on this engine can have."""

    def check_expiry(self, expires_at: datetime | None) -> None:
        """Refuse an expiry this engine's timestamp column cannot hold."""

    def refuse_twin_row(
        self, conn: Connection, what: str, table: Any, texts: dict[str, Any], within: dict[str, Any] | None = None
    ) -> None:
        """Refuse a write of ``texts`` that the table's unique index would land on a stored row differing
        from it (only where the engine's collations compare texts loosely)."""

    # -- writes (one row, or many through ``executemany``) --------------------------------------------
    def insert(self, table: Table) -> Any:
        """The engine's ``INSERT`` construct, with its own conflict clauses."""
        return table.insert()

    def upsert_of(self, table: Table, conflict: Sequence[str], update: Sequence[str]) -> Insert:
        """The engine's upsert into ``table``: each row given at execution (a dict of column keys, which may
        differ from the database's names: see ``layout``; a list of them for ``executemany``) is inserted, or
        updates the ``update`` columns of the row it clashes with on ``conflict``. Built once per caller: its
        compiled form is cached on it, and its column types bind the values (aware datetimes, UUIDs).

        How many rows a run of it reports written (its ``rowcount``) is ``upsert_rowcounts``. The rows of one
        execution must not clash with each other: a multi-row form (PostgreSQL's insertmanyvalues, were it used)
        refuses to update one row twice."""
        ins = self.insert(table)
        upsert = ins.on_conflict_do_update(
            index_elements=[table.c[k] for k in conflict], set_={c: ins.excluded[c] for c in update}
        )
        return self.counted(upsert)

    def counted(self, statement: Insert) -> Insert:
        """``statement`` keeping the rowcount of its run: SQLAlchemy closes the cursor of an ``INSERT`` without
        ``RETURNING`` at once, after which psycopg's says -1."""
        return statement.execution_options(preserve_rowcount=True)

    def insert_if_missing_of(self, table: Table) -> Insert:
        """The engine's insert into ``table`` of each row given at execution (one dict, or a list of them for
        ``executemany``) unless a row with the same unique values exists already."""
        return self.insert(table).on_conflict_do_nothing()  # type: ignore[no-any-return]

    def upsert(
        self, conn: Connection, table: Table, values: Mapping[str, Any], conflict: Sequence[str], update: Sequence[str]
    ) -> CursorResult[Any]:
        """Insert ``values``, or update the ``update`` columns of the row that clashes on ``conflict``
        (``upsert_of`` run for one row)."""
        return conn.execute(self.upsert_of(table, conflict, update), dict(values))

    def instant_processor(self) -> Callable[[datetime | None], Any] | None:
        """A UTC instant (an aware datetime) as the driver takes it for a timestamp column, in one step, where
        that is cheaper than the column type's own steps (``schema.UtcTimestamp`` binds with it); None: its own."""
        return None

    def upsert_rowcounts(self, rows: int) -> tuple[int, int]:
        """The least and most rows a run of ``upsert_of`` with ``rows`` rows may report written: one for each."""
        return rows, rows

    def insert_new(self, conn: Connection, table: Table, values: Mapping[str, Any]) -> CursorResult[Any]:
        """Insert a row that must be new: one clashing on a unique key fails with the database's error, in
        every engine alike (the counterpart of ``upsert`` for a writer that must never replace a row)."""
        return conn.execute(table.insert().values(**values))

    def insert_if_missing(self, conn: Connection, table: Table, values: Mapping[str, Any]) -> None:
        """Insert a row unless one with the same unique values exists already."""
        conn.execute(self.insert_if_missing_of(table), dict(values))

    # -- deletes of many rows ------------------------------------------------------------------------
    def in_rowid_order(self, table: Table, where: ColumnElement[bool]) -> ColumnElement[bool]:
        """The rows of ``table`` (which has an ``id`` primary key) that ``where`` selects, for one
        ``DELETE`` of many of them: the server plans a plain ``WHERE`` well."""
        return where

    # -- the keys a clean keeps (those of unfinished task instances) ---------------------------------
    # Whether a statement over the whole task table (a one-statement clean, a count) keeps them by id,
    # against the ids of the unfinished task instances' keys read once (``kept_ids``), rather than by an
    # EXISTS on each expired key's task instance. A batch always asks the EXISTS: it would read the list
    # again for each batch.
    keeps_by_id_list = False

    def kept_ids(self, ids: Select[Any]) -> Select[Any]:
        """``ids`` (one column) as the engine reads such a list once for a whole statement."""
        return ids

    def unfinished_instances(self, task_instance: Table, unfinished_ranges: ColumnElement[bool]) -> FromClause:
        """Where a statement looks up the task instances of the keys it may keep: the table itself, which
        the server plans as an anti-join or an index lookup. ``unfinished_ranges``: the unfinished states
        as ranges between the finished ones, in binary order of text (an index on ``state`` serves it)."""
        return task_instance

    # -- counting (`stats`) --------------------------------------------------------------------------
    def count_true(self, condition: ColumnElement[bool]) -> Any:
        """An aggregate: how many rows of the group ``condition`` holds for."""
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    def group_exactly(self, text: Any) -> list[Any]:
        """``GROUP BY`` terms that keep texts apart that differ in trailing spaces."""
        return [text]

    def whole_store_pass(self, task: Table, per_dag: Select[Any]) -> Select[Any]:
        """``per_dag`` (grouped by ``task.dag_id``) as this engine reads a whole task store fastest."""
        return per_dag

    def splits_pass(self, engine: Engine) -> bool:
        """Whether a pass over a large store is split into parts read at once on connections of their own."""
        return True

    def part_bounds(self, conn: Connection, task: Table, low: int, span: int, parts: int) -> tuple[Any, list[Any]]:
        """A column and the values that split ``task``'s rows (ids ``low`` to ``low + span - 1``) into
        ``parts`` parts: ranges of the primary key, each read in the table's order."""
        return task.c.id, [low + span * i // parts for i in range(1, parts)]

    def fetch_part(self, conn: Connection, query: Select[Any]) -> list[Row[Any]]:
        """The rows of one part of a split pass, on a connection of the part's own."""
        return list(conn.execute(query))

    def count_ranges(
        self, conn: Connection, narrow: Narrow, column: Any, ranges: Sequence[tuple[Any, Any]]
    ) -> list[int]:
        """The rows ``narrow`` keeps (it adds a ``WHERE`` to the query it is given) in each half-open range
        ``[low, high)`` of ``column``, the ranges back to back: one range count of its index each, in one
        statement (a CASE per row comparing timestamps is several times slower where many rows are in range)."""
        counts = [
            narrow(select(func.count())).where(column >= low, column < high).scalar_subquery() for low, high in ranges
        ]
        return [int(n) for n in conn.execute(select(*counts)).one()]

    # -- batched deletes (clean, clear, assets sweep) ------------------------------------------------
    def pause_between_batches(self, batch_seconds: float) -> float | None:
        """How long a batched delete waits before its next batch, the last one having taken
        ``batch_seconds``; None: it goes on at once (a server queues the writers waiting meanwhile)."""
        return None

    def tune_for_deletes(self, conn: Connection) -> None:
        """Set ``conn``'s session up for deleting many key rows (the caller discards the connection after)."""

    def set_statement_timeout(self, conn: Connection, seconds: float) -> str | None:
        """Bound each statement of a clean's session to ``seconds``; returns why it could not be, or None."""
        return f"{self.name} has no statement timeout"

    def unindexed(self, column: Any) -> Any:
        """``column`` as a batched delete walking the primary key compares it: where the engine would
        otherwise read the rows through the column's index instead, written so that it cannot."""
        return column

    def delete_counted(
        self, conn: Connection, table: Table, where: ColumnElement[bool], column: Any
    ) -> tuple[list[Any], int | None]:
        """Delete the rows of ``table`` that ``where`` selects, in the caller's transaction: ``column``'s value
        of each row deleted, and how many rows the database says went (None: it did not say)."""
        values = list(conn.execute(delete(table).where(where).returning(column)).scalars())
        return values, len(values)

    def clean_batch_step(
        self,
        conn: Connection,
        table: Table,
        now: datetime,
        where: ColumnElement[bool],
        window: ColumnElement[bool],
        batch_size: int,
        spare: bool,
    ) -> Callable[[int], tuple[int | None, int | None]]:
        """One batch of a clean of ``table``, walking its primary key: given the id it starts after, it deletes
        (in the caller's transaction) the rows of the next ``batch_size`` that ``where`` selects and returns
        their rowcount and the id the next batch starts after (None: the clean of the table is done).
        ``window``: the rows a batch looks at (the expired ones); ``where``: those of them it deletes (less
        the keys a clean keeps, with ``spare``); ``now``: the clean's cutoff.

        Here one statement, ``DELETE ... WHERE id IN (the next ids) RETURNING id``: each batch reads the next
        stretch of the table, instead of re-scanning the expiry index past everything the earlier batches
        deleted, and the ids of one batch at most are ever held. Where one statement reads one snapshot and
        no other writer runs until it ends (SQLite), the ids the subquery chose are still the rows ``where``
        selects: asking it again would only repeat its work."""
        after = bindparam("after", type_=Integer)
        ids = select(table.c.id).where(table.c.id > after, where).order_by(table.c.id).limit(batch_size)
        stmt = delete(table).where(table.c.id.in_(ids.scalar_subquery())).returning(table.c.id)

        def step(start: int) -> tuple[int | None, int | None]:
            deleted = conn.execute(stmt, {"after": start}).scalars().all()
            return len(deleted), max(deleted, default=None)

        return step

    def exclusive_clean(self, conn: Connection) -> AbstractContextManager[None]:
        """Hold the one-clean-at-a-time lock of this database for the block, or fail at once
        (``CleanRunningError``)."""
        raise NotImplementedError(f"no lock for an exclusive clean on {self.name}")

    # -- bulk writes (import) ----------------------------------------------------------------------------
    # Whether the unique indexes ignore trailing spaces (PAD SPACE collations): two texts differing only
    # there are one row, so a writer refuses such twins rather than overwrite one with the other.
    pads_unique_text = False
    # Whether a record must fit MySQL's columns (latin1 asset text, TIMESTAMP up to 2038) to be written.
    mysql_column_limits = False

    # -- backed-up deletes (--backup) ----------------------------------------------------------------
    # Ids per DELETE ... IN (...) of a backed-up batch's rows: well within any engine's limit of parameters.
    ids_per_delete = 10_000
    # Whether a bounded backed-up batch is a range of ``order`` too, not the ids a subquery takes (an engine
    # that refuses a LIMIT in an IN sub-select).
    backs_up_ranges = False

    def stored_moment(self, column: Any) -> Any:
        """A timestamp column as a backup reads it: Airflow's SQLite text form in UTC, ``YYYY-MM-DD
        HH:MM:SS.ffffff``, which ``ops.export_lines`` makes ISO 8601 a chunk at a time (no datetime per row)."""
        return type_coerce(column, String)

    def json_value(self, column: Any) -> tuple[Any, Any | None]:
        """The value column as a backup reads it, and a column that is 1 where the value is JSON as the
        standard has it (None: each value is checked as it is read). An engine may instead refuse such a value
        in the statement itself (a ``DataError``); the batch is then made again without this check."""
        return column, func.json_valid(column)

    def delete_returning(
        self,
        conn: Connection,
        table: Table,
        order: Any,
        where: ColumnElement[bool],
        walked: ColumnElement[bool],
        columns: Sequence[Any],
        size: int,
        after: Any,
        take: Callable[[Sequence[Any]], object],
        *,
        skip_locked: bool,
        primary_walk: bool,
    ) -> tuple[int, Any] | None:
        """Delete the next ``size`` rows after ``after`` (walking ``order`` upwards; ``walked``: the rows as the
        walk reads them, ``where``: as the delete checks them again) in the caller's transaction, handing
        ``take`` each row's ``order`` value and ``columns``, a thousand rows at a time; returns how many rows went
        and the ``order`` value the next delete starts after (None: the walk is done). None where the engine has
        no ``DELETE ... RETURNING``. ``skip_locked`` (a bounded batch): the rows are taken as the clean without a
        backup takes them, those another transaction holds skipped where the engine can; else (the chunks of a
        one-statement run) they are a range of ``order``.
        ``primary_walk``: ``order`` is the table's primary key."""
        if not conn.dialect.delete_returning:
            return None
        start = [order > after] if after is not None else []
        returned = [order, *columns]
        if skip_locked and not self.backs_up_ranges:
            ids = select(order).where(walked, *start).order_by(order).limit(size)
            count, last = _returned(conn, delete(table).where(self._taken(order, ids), where), returned, take)
            return count, (last if count == size else None)
        # A range: the ``order`` value that ends the next ``size`` rows, then the rows up to it, one range scan of
        # ``order``'s index (no list of ids looked up one by one).
        end = select(order).where(walked, *start).order_by(order).limit(1).offset(size - 1)
        upper = conn.execute(self.on_primary_key(end, table) if primary_walk else end).scalar()
        bounds = [*start, *([order <= upper] if upper is not None else [])]
        count, _ = _returned(conn, delete(table).where(*bounds, where), returned, take)
        return count, upper

    def stream_deleted(
        self, conn: Connection, table: Table, where: ColumnElement[bool], returned: Sequence[Any], chunk: int
    ) -> Generator[list[tuple[Any, ...]], None, None] | None:
        """Every row of ``table`` that ``where`` selects deleted in one statement, in the caller's transaction,
        the ``returned`` columns of the rows it deleted streamed ``chunk`` rows at a time (never all of them
        held); the stream checks at its end that as many rows came as were deleted. None where the engine
        streams no delete: the caller deletes ranges of rows instead (``delete_returning``)."""
        return None

    def on_primary_key(self, query: Select[Any], table: Table) -> Select[Any]:
        """``query`` made to read ``table`` by its primary key, where the engine might choose another index."""
        return query

    def _taken(self, order: Any, ids: Select[Any]) -> ColumnElement[bool]:
        """The rows whose ``order`` value ``ids`` selects, as a delete names them."""
        return order.in_(ids.scalar_subquery())  # type: ignore[no-any-return]

    def lock_before_reading(self, conn: Connection) -> None:
        """Begin the caller's transaction so that what it reads stays as read until it commits, where a
        locking read (``locked_read``) cannot."""

    def locked_read(
        self, query: Select[Any], table: Table, lock_of: Table | None, skip_locked: bool, primary_walk: bool
    ) -> Select[Any]:
        """``query``, the rows it reads locked until the transaction ends (only ``lock_of``'s where given)."""
        return query.with_for_update(skip_locked=skip_locked, of=lock_of)

    def delete_listed(
        self, conn: Connection, table: Table, order: Any, where: ColumnElement[bool], ids: Sequence[Any]
    ) -> int | None:
        """Delete the rows of ``table`` whose ``order`` value is one of ``ids`` and that ``where`` still
        selects; how many went (None: the database did not say)."""
        statement = delete(table).where(order.in_(bindparam("ids", expanding=True)), where)
        deleted = 0
        for start in range(0, len(ids), self.ids_per_delete):
            count = conn.execute(statement, {"ids": list(ids[start : start + self.ids_per_delete])}).rowcount
            if count is None or count < 0:
                return None
            deleted += count
        return deleted


def _returned(
    conn: Connection, statement: Delete, returned: Sequence[Any], take: Callable[[Sequence[Any]], object]
) -> tuple[int, Any]:
    """Run ``statement`` returning ``returned`` (the walked column first), handing ``take`` its rows a thousand
    at a time (never a whole batch of them made Python objects at once); how many, and the highest first column."""
    count, last = 0, None
    for rows in conn.execute(statement.returning(*returned)).partitions(1000):
        take(rows)
        count += len(rows)
        top = max(row[0] for row in rows)  # RETURNING gives the rows in no set order
        last = top if last is None or top > last else last
    return count, last


def another_clean_running(where: str) -> str:
    """The message of an exclusive clean that found another one holding the lock of ``where``."""
    return f"another {PARAMETER} clean is running on {where}"


IMPL_CLASS = EngineImpl
