"""MySQL and MariaDB: PAD SPACE collations, latin1 asset text, ``TIMESTAMP`` up to 2038, InnoDB's clustered
primary key. What MariaDB does differently is said where it matters (``self.name == "mariadb"``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Integer, Table, func, null, select
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.functions import FunctionElement

from statestore_cli.db.engines.base import EngineImpl
from statestore_cli.db.mysql_text import check_asset_text, index_equal, twin_problem, twins
from statestore_cli.db.schema import dag_run
from statestore_cli.errors import InvalidInputError

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

    def upsert(
        self, conn: Connection, table: Table, values: Mapping[str, Any], conflict: Sequence[str], update: Sequence[str]
    ) -> CursorResult[Any]:
        stmt = self.insert(table).values(**values)
        return conn.execute(stmt.on_duplicate_key_update({c: stmt.inserted[c] for c in update}))

    def insert_if_missing(self, conn: Connection, table: Table, values: Mapping[str, Any]) -> None:
        conn.execute(self.insert(table).values(**values).prefix_with("IGNORE"))

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

    # -- bulk writes (import) ----------------------------------------------------------------------------
    pads_unique_text = True  # every collation here is PAD SPACE
    mysql_column_limits = True

    def quoted_column(self, name: str) -> str:
        return "`key`" if name == "key" else name

    def insert_if_missing_statement(self, table: str, columns: Sequence[str]) -> str:
        marks = ", ".join([self.param_mark] * len(columns))
        return f"INSERT IGNORE INTO {table} ({', '.join(columns)}) VALUES ({marks})"

    def upsert_statement(
        self, table: str, columns: Sequence[str], conflict: Sequence[str], update: Sequence[str]
    ) -> str:
        # PyMySQL's executemany turns it into multi-row inserts.
        sets = ", ".join(f"{c} = VALUES({c})" for c in update)
        return self._insert_head(table, columns) + " ON DUPLICATE KEY UPDATE " + sets

    def upsert_rowcounts(self, rows: int) -> tuple[int, int]:
        # 1 for an inserted row and 2 for an updated one (1 when nothing changed: SQLAlchemy connects with
        # CLIENT_FOUND_ROWS).
        return rows, 2 * rows

    def instant_binder(self) -> Callable[[datetime | None], Any]:
        return lambda m: None if m is None else m.replace(tzinfo=None)  # naive UTC: sessions run at +00:00


class Utf8Bytes(FunctionElement[Any]):
    """A MySQL text as the bytes of its UTF-8 form (``CONVERT ... USING`` has no function syntax)."""

    name = "mysql_utf8_bytes"
    inherit_cache = True


@compiles(Utf8Bytes)
def _utf8_bytes_sql(element: Utf8Bytes, compiler: Any, **kw: Any) -> str:
    return f"CAST(CONVERT({compiler.process(element.clauses.clauses[0], **kw)} USING utf8mb4) AS BINARY)"


IMPL_CLASS = MySQLImpl
