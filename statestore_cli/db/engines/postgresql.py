"""PostgreSQL: parallel scans of its own, ``timestamptz``, collations that need ``C`` for code point order."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    Integer,
    String,
    Table,
    Text,
    any_,
    bindparam,
    case,
    cast,
    delete,
    func,
    inspect,
    literal_column,
    select,
    text,
    type_coerce,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement, Delete, Select
from sqlalchemy.types import Uuid

from statestore_cli.db.database import describe_engine, set_per_transaction
from statestore_cli.db.engines.base import (
    LAYOUT_TABLES,
    TASK_INSTANCE,
    TASK_TABLE,
    EngineImpl,
    Narrow,
    StoreTables,
    another_clean_running,
)
from statestore_cli.db.schema import store_schema
from statestore_cli.errors import BackendError, CleanRunningError


class PostgreSQLImpl(EngineImpl):
    # A CASE per row costs PostgreSQL little next to a range count of the index each.
    buckets_in_pass = True

    def code_point_order(self, column: Any) -> Any:
        return column.collate("C")

    def region_order(self, column: Any) -> Any:
        if getattr(column.type, "form", "text") == "native":
            return column  # the uuid type orders as its text does
        return super().region_order(column)

    def insert(self, table: Table) -> Any:
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    def splits_pass(self, engine: Engine) -> bool:
        return False  # PostgreSQL spreads a scan over parallel workers itself

    def count_ranges(
        self, conn: Connection, narrow: Narrow, column: Any, ranges: Sequence[tuple[Any, Any]]
    ) -> list[int]:
        # The range's number as a CASE over the bound ends, grouped: one range scan of the whole window.
        number = case(*[(column < high, i) for i, (_low, high) in enumerate(ranges)], else_=len(ranges))
        inner = narrow(select(number.label("n"))).where(column >= ranges[0][0], column < ranges[-1][1]).subquery()
        found = {int(n): int(count) for n, count in conn.execute(select(inner.c.n, func.count()).group_by(inner.c.n))}
        return [int(found.get(i, 0)) for i in range(len(ranges))]

    # -- batched deletes (clean, clear, assets sweep) ------------------------------------------------
    def set_statement_timeout(self, conn: Connection, seconds: float) -> str | None:
        # Nothing is set on the session: the statement timeout starts each transaction (each batch) with the
        # engine's lock timeout in one statement, and ends with it, so a pooler's server connection keeps none.
        set_per_transaction(conn, "statement_timeout", math.ceil(seconds * 1000))
        return None

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
        # The batch takes the next ``batch_size`` expired rows and deletes those ``where`` allows; the next
        # batch starts after the window, kept rows or not. Asking the keep rule in the window's select
        # instead would make the planner join every expired key with the task instances for each batch.
        # Rows another cleaner holds are skipped, not waited for: two cleans share the work. The ids go in
        # as an array so the delete looks them up by primary key; only the count and the window's last id
        # come back.
        after = bindparam("after", type_=Integer)
        ids = select(table.c.id).where(table.c.id > after, window).order_by(table.c.id).limit(batch_size)
        taken = ids.with_for_update(skip_locked=True).cte("window")
        chosen = table.c.id == any_(func.array(select(taken.c.id).scalar_subquery()))
        gone = delete(table).where(chosen, where).returning(table.c.id).cte("gone")
        stmt = select(
            select(func.count()).select_from(gone).scalar_subquery(),
            select(func.max(taken.c.id)).scalar_subquery(),
        )

        def step(start: int) -> tuple[int | None, int | None]:
            count, last = conn.execute(stmt, {"after": start}).one()
            return int(count), last

        return step

    def exclusive_clean(self, conn: Connection) -> AbstractContextManager[None]:
        return _transaction_lock(conn.engine, _lock_key(store_schema(conn)))

    # -- the layout ------------------------------------------------------------------------------------
    def store_tables(self, conn: Connection, schema: str | None) -> StoreTables:
        # Two catalog queries, where reflection asks a dozen and loads every enum and domain of the database
        # first: the relations of the schema the layout names (with their columns), then the task table's
        # unique indexes (every unique constraint has one).
        relations = _relations(conn, schema, *LAYOUT_TABLES)
        tables = frozenset(name for name, (is_table, _, _) in relations.items() if is_table)
        if TASK_TABLE not in tables:
            return StoreTables(tables)
        _, oid, columns = relations[TASK_TABLE]
        keys = conn.execute(_UNIQUE_KEYS, {"oid": oid}).scalars()
        region = _reflected_type(columns["region_id"]) if "region_id" in columns else None
        if region is None and "region_id" in columns:  # a type named otherwise: as reflection reads it
            region = {c["name"]: c["type"] for c in inspect(conn).get_columns(TASK_TABLE, schema=schema)}["region_id"]
        ti = relations.get(TASK_INSTANCE)
        return StoreTables(
            tables,
            frozenset(columns),
            tuple(tuple(map(str, key)) for key in keys),
            region,
            frozenset(ti[2]) if ti is not None and TASK_INSTANCE in tables else None,
        )

    def table_columns(self, conn: Connection, schema: str | None, table: str) -> frozenset[str] | None:
        found = _relations(conn, schema, table).get(table)
        return None if found is None else frozenset(found[2])

    # -- backed-up deletes (--backup) ----------------------------------------------------------------
    def stored_moment(self, column: Any) -> Any:
        # A year before 1 keeps its era (" BC"), out of that form: its key is then named, never written wrong.
        stored = func.to_char(func.timezone("UTC", column), "YYYY-MM-DD HH24:MI:SS.US BC")
        return type_coerce(func.replace(stored, " AD", ""), String)

    def json_value(self, column: Any) -> tuple[Any, Any | None]:
        # No json_valid before PostgreSQL 16: the cast to json checks each value (a DataError for one that is
        # not JSON) and gives back the text as stored, so every row that comes back holds JSON.
        return cast(cast(column, JSON), Text), literal_column("1", Integer)

    def _taken(self, order: Any, ids: Select[Any]) -> ColumnElement[bool]:
        # As the clean without a backup takes a batch's rows: locked by the subquery, those another cleaner holds
        # skipped, looked up by primary key from the array.
        return order == any_(func.array(ids.with_for_update(skip_locked=True).scalar_subquery()))  # type: ignore[no-any-return]

    def stream_deleted(
        self, conn: Connection, table: Table, where: ColumnElement[bool], returned: Sequence[Any], chunk: int
    ) -> Generator[list[tuple[Any, ...]], None, None] | None:
        return _copied(conn, delete(table).where(where), returned, chunk)

    def delete_listed(
        self, conn: Connection, table: Table, order: Any, where: ColumnElement[bool], ids: Sequence[Any]
    ) -> int | None:
        chosen = order == any_(bindparam("ids", list(ids), type_=ARRAY(order.type)))  # one parameter, any count
        return conn.execute(delete(table).where(chosen, where)).rowcount


# PostgreSQL's advisory locks are per database already: a fixed key ("statestore" in hex), and with a
# [database] sql_alchemy_schema one per schema, so two stores in two schemas of one database do not
# keep each other's exclusive clean waiting.
_LOCK_KEY = 0x73746174657374


def _lock_key(schema: str | None) -> int:
    import zlib

    return _LOCK_KEY if schema is None else _LOCK_KEY + 1 + zlib.crc32(schema.encode("utf-8"))


# Taken in the lock's transaction: the transaction then sits idle for the whole clean, and a server (or
# role, or database) setting of idle_in_transaction_session_timeout would end the session, and the
# lock with it, while the clean still runs. The key is written into the statement: a statement sent
# with parameters (psycopg's extended protocol) leaves its portal, and the snapshot the portal holds,
# open until the next statement, which would hold back vacuum for the whole clean.
_TAKE_LOCK = "SELECT set_config('idle_in_transaction_session_timeout', '0', true), pg_try_advisory_xact_lock({key})"


@contextmanager
def _transaction_lock(engine: Engine, key: int) -> Iterator[None]:
    """The advisory lock of PostgreSQL, held by a transaction on a connection of its own, open from
    before the first batch to after the last, then rolled back.

    A session-level lock would outlive us behind a pooler in transaction mode (PgBouncer, as Airflow's
    Helm chart runs it): it stays with the server connection, which the pooler keeps, and which serves
    other clients, a second clean among them, for which it would be granted again (advisory locks are
    re-entrant within a session). A transaction-level lock ends with its transaction, however that ends:
    the pooler gives the open transaction one server connection for all of it, and when our process dies
    the server (or the pooler, which then discards that server connection) rolls it back. READ COMMITTED:
    the idle transaction then holds no snapshot and writes nothing, so it keeps vacuum from nothing the
    clean deletes; it holds one connection of the pool while the clean runs."""
    holder = engine.connect()
    try:
        holder.execution_options(isolation_level="READ COMMITTED")
        holder.begin()
        got = bool(holder.exec_driver_sql(_TAKE_LOCK.format(key=int(key))).one()[1])
        if not got:
            raise CleanRunningError(another_clean_running(describe_engine(engine)), parameter="exclusive")
        yield
    finally:
        try:
            holder.rollback()
            holder.close()
        except sa_exc.DBAPIError:
            # The session is gone (a server restart, an administrator's pg_terminate_backend): so is the
            # lock, and the batches the clean committed stay committed; the clean's outcome stands.
            holder.invalidate()


IMPL_CLASS = PostgreSQLImpl


def _copied(
    conn: Connection, statement: Delete, returned: Sequence[Any], chunk: int
) -> Generator[list[tuple[Any, ...]], None, None] | None:
    """The ``returned`` columns of the rows ``statement`` deletes, ``chunk`` rows at a time, through
    ``COPY (DELETE ... RETURNING ...) TO STDOUT`` (psycopg 3; None with another driver): the server streams
    the rows as it deletes them, one statement however many there are, never all held: a one-statement
    backup made of ranges of rows instead cost about half as much again (see bench/README.md)."""
    dbapi_conn: Any = conn.connection.dbapi_connection
    if not hasattr(dbapi_conn, "pgconn"):
        return None
    compiled = _for_copy(conn, statement.returning(*returned))
    sql, params = f"COPY ({compiled.string}) TO STDOUT", compiled.construct_params()
    return _streamed(conn, dbapi_conn, sql, params, [_copy_type(column) for column in returned], chunk)


def _for_copy(conn: Connection, statement: Any) -> Any:
    """``statement`` compiled for this connection, its schema (``[database] sql_alchemy_schema``) written into
    its text: a COPY's text is sent as it is, where an execution would put the schema in."""
    translate = conn.get_execution_options().get("schema_translate_map")
    if not translate:
        return statement.compile(dialect=conn.dialect)
    return statement.compile(dialect=conn.dialect, schema_translate_map=translate, render_schema_translate=True)


def _copy_type(column: Any) -> str:
    """The PostgreSQL type psycopg reads a returned column's COPY text as."""
    if isinstance(column.type, Integer):
        return "int8"
    return "uuid" if isinstance(column.type, Uuid) else "text"


def _streamed(
    conn: Connection, dbapi_conn: Any, sql: str, params: Any, types: list[str], chunk: int
) -> Generator[list[tuple[Any, ...]], None, None]:
    """The rows of the COPY ``sql``, ``chunk`` at a time, checked at the end against the rows it deleted;
    psycopg's errors raised as SQLAlchemy raises them (a lost connection noticed as one)."""
    errors = conn.dialect.loaded_dbapi
    cursor = dbapi_conn.cursor()
    count = 0
    try:
        with cursor.copy(sql, params) as copy:
            copy.set_types(types)
            rows: list[tuple[Any, ...]] = []
            for row in copy.rows():
                rows.append(row)
                if len(rows) == chunk:
                    yield rows
                    count += len(rows)
                    rows = []
            if rows:
                yield rows
                count += len(rows)
        deleted = cursor.rowcount  # the COPY's own count, once it has ended
    except errors.Error as exc:
        gone = conn.dialect.is_disconnect(exc, dbapi_conn, cursor)
        if gone:
            conn.invalidate()
        raise sa_exc.DBAPIError.instance(sql, params, exc, errors.Error, connection_invalidated=gone) from None
    finally:
        cursor.close()
    if deleted != count:
        raise BackendError(
            f"the delete removed {deleted:,} rows and sent {count:,}: the batch was rolled back, run the command again"
        )


# The relations of the schema named so, as SQLAlchemy's reflection sees them (tables, foreign tables, views
# and materialized views; with no schema named, those the search path shows), each with whether reflection
# counts it a table, its oid, and its columns (each with its type as format_type gives it).
_RELATIONS = """
SELECT c.relname, c.relkind IN ('r', 'p') AND c.relpersistence <> 't', c.oid::bigint, a.attname,
       pg_catalog.format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relname = ANY(:named) AND c.relkind IN ('r', 'p', 'f', 'v', 'm') AND {where}
ORDER BY c.relname, a.attnum
"""
_IN_PATH = "pg_catalog.pg_table_is_visible(c.oid) AND n.nspname <> 'pg_catalog'"
_RELATIONS_IN_PATH = text(_RELATIONS.format(where=_IN_PATH))
_RELATIONS_IN_SCHEMA = text(_RELATIONS.format(where="n.nspname = :schema"))

# The key columns of each unique index of a table but its primary key's, in the index's order (an expression
# as NULL, as reflection gives it; INCLUDE columns left out).
_UNIQUE_KEYS = text("""
SELECT array_agg(a.attname ORDER BY k.ord)
FROM pg_catalog.pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = :oid AND i.indisunique AND NOT i.indisprimary AND k.ord <= i.indnkeyatts
GROUP BY i.indexrelid
ORDER BY i.indexrelid
""")


def _relations(conn: Connection, schema: str | None, *named: str) -> dict[str, tuple[bool, int, dict[str, str]]]:
    """``_RELATIONS`` by name, of those ``named``: whether a table, its oid, and its columns (name -> type)."""
    query, params = (_RELATIONS_IN_PATH, {}) if schema is None else (_RELATIONS_IN_SCHEMA, {"schema": schema})
    found: dict[str, tuple[bool, int, dict[str, str]]] = {}
    for name, is_table, oid, column, column_type in conn.execute(query, {"named": list(named), **params}):
        entry = found.setdefault(name, (bool(is_table), int(oid), {}))
        if column is not None:
            entry[2][column] = column_type
    return found


def _reflected_type(formatted: str) -> Any:
    """The type SQLAlchemy's reflection makes of a column that ``format_type`` names so, for the forms a
    ``region_id`` is known to take; None for any other (the caller then reflects it)."""
    from sqlalchemy.dialects.postgresql import BYTEA, CHAR, UUID, VARCHAR

    if formatted == "uuid":
        return UUID()
    if formatted == "bytea":
        return BYTEA()
    for prefix, kind in (("character(", CHAR), ("character varying(", VARCHAR)):
        if formatted.startswith(prefix) and formatted.endswith(")") and formatted[len(prefix) : -1].isdigit():
            return kind(int(formatted[len(prefix) : -1]))
    return None
