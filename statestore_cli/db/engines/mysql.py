"""MySQL and MariaDB: PAD SPACE collations, latin1 asset text, ``TIMESTAMP`` up to 2038, InnoDB's clustered
primary key. What MariaDB does differently is said where it matters (``self.name == "mariadb"``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Integer, String, Table, bindparam, delete, func, null, select, text, type_coerce
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement, Insert, Select
from sqlalchemy.sql.functions import FunctionElement

from statestore_cli.db.database import describe_engine
from statestore_cli.db.engines.base import EngineImpl, another_clean_running
from statestore_cli.db.mysql_text import check_asset_text, index_equal, twin_problem, twins
from statestore_cli.db.schema import dag_run, qualified, store_schema
from statestore_cli.errors import CleanRunningError, InvalidInputError

TIMESTAMP_MAX = datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)  # the last instant a MySQL TIMESTAMP holds


_NO_LIMIT = 2**64 - 1  # MySQL's way of a LIMIT that limits nothing


class MySQLImpl(EngineImpl):
    # The parts of a split pass also wait on InnoDB page reads, so two per core keep the cores busy.
    parts_per_core = 2

    # A lookup in a list read once, where an EXISTS per expired key costs InnoDB an index dive of three
    # 250-character columns each: the keep rule cost a one-statement clean about half again its time.
    keeps_by_id_list = True

    def kept_ids(self, ids: Select[Any]) -> Select[Any]:
        # A derived table with a LIMIT is materialized once, not merged into the statement: merged, MySQL
        # would refuse a DELETE whose subquery reads the table it deletes from, and MariaDB would look
        # the ids up row by row.
        kept = ids.limit(_NO_LIMIT).subquery("kept")
        return select(kept.c[0])

    def value_bytes(self, column: Any) -> Any:
        return func.length(column)  # bytes there; ``CHAR_LENGTH`` counts characters

    def code_point_order(self, column: Any) -> Any:
        # The bytes of the text converted to UTF-8: ``CAST ... AS BINARY`` of a latin1 column would order
        # its 0x80-0x9F characters as bytes, not as the characters MySQL's latin1 maps them to.
        return Utf8Bytes(column)

    def check_asset_text(self, name: str | None, uri: str | None) -> None:
        check_asset_text(self.name, name, uri)

    def check_expiry(self, expires_at: datetime | None) -> None:
        if expires_at is not None and expires_at > TIMESTAMP_MAX:
            raise InvalidInputError(
                f"expires_at {expires_at:%Y-%m-%d %H:%M:%S} UTC is past 2038-01-19 03:14:07, the last instant a "
                "MySQL TIMESTAMP holds; use a shorter retention or never"
            )

    def refuse_twin_row(
        self, conn: Connection, what: str, table: Any, texts: dict[str, Any], within: dict[str, Any] | None = None
    ) -> None:
        # The stored row the unique index would land on may differ in trailing spaces (every collation here
        # ignores them), or in what a column's own collation ignores besides (letter case, accents: Airflow
        # 3.4's ``dag_run_state_store.key`` takes the database's default collation).
        columns = [table.c[name] for name in texts]
        conds = [index_equal(table.c[name], value) for name, value in texts.items()]
        conds += [table.c[name] == value for name, value in (within or {}).items()]
        given = tuple(texts.values())
        for stored in conn.execute(select(*columns).where(*conds).limit(2)):
            if twins(given, tuple(stored)):
                raise InvalidInputError(twin_problem(what, tuple(texts), given, tuple(stored)))
            if tuple(stored) != given:  # the index holds them for one: its collation ignores more than spaces
                pairs = [
                    f"{n} {g!r} and the stored {o!r}" for n, g, o in zip(texts, given, stored, strict=True) if g != o
                ]
                raise InvalidInputError(
                    f"cannot write {what}: {', '.join(pairs)} are one in the database's unique index (its "
                    "collation ignores letter case or accents), so they cannot be stored apart"
                )

    def insert(self, table: Table) -> Any:
        from sqlalchemy.dialects import mysql

        return mysql.insert(table)

    def upsert_of(self, table: Table, conflict: Sequence[str], update: Sequence[str]) -> Insert:
        # The clash is on any unique key (MySQL names none). Run with many rows, PyMySQL's executemany sends
        # them as multi-row inserts.
        ins = self.insert(table)
        return self.counted(ins.on_duplicate_key_update({c: ins.inserted[c] for c in update}))

    def insert_if_missing_of(self, table: Table) -> Insert:
        return self.insert(table).prefix_with("IGNORE")  # type: ignore[no-any-return]

    def upsert_rowcounts(self, rows: int) -> tuple[int, int]:
        # 1 for an inserted row and 2 for an updated one (1 when nothing changed: SQLAlchemy connects with
        # CLIENT_FOUND_ROWS).
        return rows, 2 * rows

    # -- counting (`stats`) --------------------------------------------------------------------------
    def count_true(self, condition: ColumnElement[bool]) -> Any:
        return func.sum(condition, type_=Integer)  # a comparison adds up as 0 or 1, cheaper than a CASE

    def group_exactly(self, text: Any) -> list[Any]:
        # The collations ignore trailing spaces when grouping too, so the length joins the key.
        return [text, func.char_length(text)]

    def whole_store_pass(self, task: Table, per_dag: Select[Any]) -> Select[Any]:
        """Read as the table lies: by the (dag_id, ...) index it would fetch every row through that index, a
        random read each. It groups by the integer dag_run_id, and the few groups are then added up per dag
        through dag_run's primary key: a temporary table keyed by a 250-character id costs MariaDB more than
        one keyed by an integer."""
        per_run = per_dag.with_only_columns(task.c.dag_run_id, *list(per_dag.selected_columns)[1:])
        # ORDER BY NULL: MariaDB would sort the groups, which nothing needs.
        per_run = per_run.group_by(None).group_by(task.c.dag_run_id).order_by(null())
        runs = per_run.with_hint(task, "FORCE INDEX (PRIMARY)", self.name).subquery()
        n, nbytes, first, last, *rest = list(runs.c)[1:]
        return (
            select(
                dag_run.c.dag_id, func.sum(n), func.sum(nbytes), func.min(first), func.max(last), *map(func.sum, rest)
            )
            .join_from(runs, dag_run, dag_run.c.id == runs.c.dag_run_id)
            .group_by(*self.group_exactly(dag_run.c.dag_id))
            # The groups first, then one primary-key lookup each: left to itself the optimizer may walk all
            # of dag_run's (dag_id, run_id) index instead, and an Airflow database holds every run ever made.
            .prefix_with("STRAIGHT_JOIN", dialect=self.name)
        )

    # -- batched deletes (clean, clear, assets sweep) ------------------------------------------------
    def set_statement_timeout(self, conn: Connection, seconds: float) -> str | None:
        if self.name != "mariadb":
            return "MySQL has no statement timeout for DELETE"
        conn.exec_driver_sql(f"SET SESSION max_statement_time = {seconds:.3f}")
        return None

    def delete_counted(
        self, conn: Connection, table: Table, where: ColumnElement[bool], column: Any
    ) -> tuple[list[Any], int | None]:
        if conn.dialect.delete_returning:  # MariaDB's single-table DELETE ... RETURNING
            return super().delete_counted(conn, table, where, column)
        # MySQL has no RETURNING: the rows are locked as they are read, then deleted.
        values = list(conn.execute(select(column).where(where).with_for_update()).scalars())
        return values, conn.execute(delete(table).where(where)).rowcount

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
        # MySQL and MariaDB refuse a LIMIT in an IN sub-select and have no (MySQL) or only a single-table
        # (MariaDB) DELETE ... RETURNING, so a batch here is two statements: find the id that ends the next
        # ``batch_size`` expired rows, then delete the expired rows up to it (less the keys a clean keeps: the
        # keep rule is asked of that range alone, not of every expired key the batch end walks past). Both
        # walk the primary key from where the last batch ended. A ``DELETE ... LIMIT`` instead re-scans the
        # expiry index from its start every time, past every row earlier batches deleted: InnoDB keeps those
        # as delete-marked records until purge removes them, and purge lags on busy servers and stops behind
        # any long read transaction, so each batch got slower than the one before. FORCE INDEX keeps both
        # statements on the primary key even where the optimizer's estimate for the expiry index is low.
        # Another clean may have taken the rows of a range already: the walk goes on past it, and ends with
        # the batch that had fewer than ``batch_size`` rows left.
        after = bindparam("after", type_=Integer)
        end = (
            select(table.c.id)
            .with_hint(table, "FORCE INDEX (PRIMARY)")
            .where(table.c.id > after, window)
            .order_by(table.c.id)
            .limit(1)
            .offset(batch_size - 1)
        )
        now_param = bindparam("now", now, type_=table.c.expires_at.type)
        upper = bindparam("upper", type_=Integer)
        upto = text(_range_delete(conn, table, upper=True, spare=spare)).bindparams(now_param, upper)
        rest = text(_range_delete(conn, table, upper=False, spare=spare)).bindparams(now_param)

        def step(start: int) -> tuple[int | None, int | None]:
            last = conn.execute(end, {"after": start}).scalar()
            if last is None:
                return conn.execute(rest, {"after": start}).rowcount, None
            return conn.execute(upto, {"after": start, "upper": last}).rowcount, last

        return step

    def exclusive_clean(self, conn: Connection) -> AbstractContextManager[None]:
        return _named_lock(conn)

    # -- bulk writes (import) ----------------------------------------------------------------------------
    pads_unique_text = True  # every collation here is PAD SPACE
    mysql_column_limits = True

    # -- backed-up deletes (--backup) ----------------------------------------------------------------
    # MariaDB's single-table DELETE ... RETURNING (MySQL has none: delete_returning gives None there) walks ranges,
    # as the clean without a backup does: no LIMIT in an IN sub-select, no SKIP LOCKED before MariaDB 10.6.
    backs_up_ranges = True

    def stored_moment(self, column: Any) -> Any:
        return type_coerce(func.date_format(column, "%Y-%m-%d %H:%i:%s.%f"), String)  # naive UTC: sessions at +00:00

    def on_primary_key(self, query: Select[Any], table: Table) -> Select[Any]:
        # The optimizer's estimate for another index may be low where the primary key walk is what is cheap.
        return query.with_hint(table, "FORCE INDEX (PRIMARY)")

    def locked_read(
        self, query: Select[Any], table: Table, lock_of: Table | None, skip_locked: bool, primary_walk: bool
    ) -> Select[Any]:
        # No SKIP LOCKED (MySQL before 8.0, MariaDB before 10.6 have none): locked rows are waited for.
        return (self.on_primary_key(query, table) if primary_walk else query).with_for_update()


@contextmanager
def _named_lock(conn: Connection) -> Iterator[None]:
    # MySQL's named locks are server-wide: name the database (the schema, where one is configured)
    params = {"k": f"statestore-clean:{store_schema(conn) or conn.engine.url.database}"}
    got = bool(conn.execute(text("SELECT GET_LOCK(:k, 0)"), params).scalar())
    conn.commit()
    if not got:
        raise CleanRunningError(another_clean_running(describe_engine(conn.engine)), parameter="exclusive")
    try:
        yield
    finally:
        conn.execute(text("SELECT RELEASE_LOCK(:k)"), params)
        conn.commit()


def _range_delete(conn: Connection, table: Table, upper: bool, spare: bool) -> str:
    """``DELETE t FROM t FORCE INDEX (PRIMARY) WHERE`` the expired rows after ``:after`` (up to ``:upper``):
    the condition of a clean's window, written out, since SQLAlchemy renders no multi-table DELETE with a
    hint (MySQL accepts an index hint in a DELETE only in that form). Names come from ``table``, as the
    layout has them, the table's qualified with ``[database] sql_alchemy_schema`` when that is set.
    ``spare``: the keys of unfinished task instances are kept (``Layout.unfinished_sql``)."""
    from statestore_cli.db.layout import layout_of

    quote = conn.dialect.identifier_preparer
    name = qualified(conn, table.name)
    pk, expiry = (f"{name}.{quote.quote(table.c[c].name)}" for c in ("id", "expires_at"))
    bound = f"AND {pk} <= :upper " if upper else ""
    kept = layout_of(conn).unfinished_sql(conn, table, name) if spare else None
    return (
        f"DELETE {name} FROM {name} FORCE INDEX (PRIMARY) "
        f"WHERE {pk} > :after {bound}AND {expiry} IS NOT NULL AND {expiry} < :now"
        + ("" if kept is None else f" AND NOT {kept}")
    )


class Utf8Bytes(FunctionElement[Any]):
    """A MySQL text as the bytes of its UTF-8 form (``CONVERT ... USING`` has no function syntax)."""

    name = "mysql_utf8_bytes"
    inherit_cache = True


@compiles(Utf8Bytes)
def _utf8_bytes_sql(element: Utf8Bytes, compiler: Any, **kw: Any) -> str:
    return f"CAST(CONVERT({compiler.process(element.clauses.clauses[0], **kw)} USING utf8mb4) AS BINARY)"


IMPL_CLASS = MySQLImpl
