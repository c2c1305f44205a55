"""SQLite: a file (or memory) read in process, text compared as UTF-8 bytes, timestamps stored as text."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import LargeBinary, Table, cast, func, select
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.engine.url import URL
from sqlalchemy.sql import ColumnElement, FromClause, Select

from statestore_cli.db.engines.base import EngineImpl, another_clean_running
from statestore_cli.errors import CleanRunningError

_SAMPLES = 64  # rows sampled to place the dag_id bounds of a split pass


class SQLiteImpl(EngineImpl):
    has_server = False

    def database_file(self, url: URL) -> Path | None:
        if url.database in (None, "", ":memory:"):
            return None
        return Path(url.database)

    def read_one_snapshot(self, conn: Connection) -> Connection:
        return conn  # a read transaction sees one snapshot already

    def value_bytes(self, column: Any) -> Any:
        # ``length`` of text counts characters; of a BLOB, bytes.
        return func.length(cast(column, LargeBinary))

    # code_point_order: SQLite compares text with ``memcmp`` of UTF-8, which is code point order already.

    def insert(self, table: Table) -> Any:
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    def instant_processor(self) -> Callable[[datetime | None], Any] | None:
        # Text ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, what SQLAlchemy's SQLite DATETIME writes (and Airflow, which
        # compares it as text), made by one isoformat: SQLAlchemy's %-formatting of the fields, after the type's
        # conversion to naive UTC, was the dearer part of binding the rows of an import's executemany.
        return lambda m: None if m is None else _utc(m).replace(tzinfo=None).isoformat(" ", "microseconds")

    def in_rowid_order(self, table: Table, where: ColumnElement[bool]) -> ColumnElement[bool]:
        # SQLite deletes what an index finds in the index's order, so a ``DELETE ... WHERE expires_at < ?``
        # visits the table's pages at random, one per row; with the ids collected first (the expiry index
        # covers them) it deletes in rowid order, page after page: much faster where many rows go, and no
        # slower where few do.
        return table.c.id.in_(select(table.c.id).where(where))

    keeps_by_id_list = True  # an integer lookup per expired key, where the EXISTS compares four text columns

    def unfinished_instances(self, task_instance: Table, unfinished_ranges: ColumnElement[bool]) -> FromClause:
        # SQLite would look each expired key's task instance up in ``task_instance`` itself (its unique
        # key, then the row for the state). From a subquery of the unfinished ones alone, which the
        # ``LIMIT`` keeps it from flattening into the statement, it reads that small set once into an
        # automatic index and probes that; read through Airflow's index on ``state`` (the ranges), so a
        # batched clean, which reads it once per batch, does not scan every task instance each time.
        columns = [column.label(column.key) for column in task_instance.c]
        return select(*columns).where(unfinished_ranges).limit(-1).subquery("unfinished_ti")

    def splits_pass(self, engine: Engine) -> bool:
        return self.database_file(engine.url) is not None  # an in-memory database is private to its connection

    def part_bounds(self, conn: Connection, task: Table, low: int, span: int, parts: int) -> tuple[Any, list[Any]]:
        """Ranges of dag_id: each part walks its share of the dag_id index in order, as the whole pass would.
        The bounds come from the dag_ids of rows sampled at evenly spaced ids: each sample is one seek of
        the primary key, where an exact quantile (``ORDER BY dag_id OFFSET n``) would walk half the index,
        giving back much of what the split saves."""
        at = tuple(low + span * i // _SAMPLES for i in range(_SAMPLES))
        sample = sorted(d for d in conn.exec_driver_sql(_sample_sql(task), at).one() if d is not None)
        bounds = sorted({sample[len(sample) * i // parts] for i in range(1, parts)}) if sample else []
        return task.c.dag_id, bounds

    def fetch_part(self, conn: Connection, query: Select[Any]) -> list[Row[Any]]:
        # A part reads its pages once: SQLite's page cache (2 MB a connection) would only add each extra
        # connection's 2 MB to the peak memory. Restored before the connection goes back to the pool.
        cache = conn.exec_driver_sql("PRAGMA cache_size").scalar_one()
        conn.exec_driver_sql("PRAGMA cache_size=-256")
        try:
            return list(conn.execute(query))
        finally:
            conn.exec_driver_sql(f"PRAGMA cache_size={int(cache)}")

    # -- batched deletes (clean, clear, assets sweep) ------------------------------------------------
    def pause_between_batches(self, batch_seconds: float) -> float | None:
        # SQLite has one write lock and no queue: a writer waiting on it retries every 100 ms at most, and
        # would almost never find it free between two batches. A pause of a quarter of the batch's time
        # (100 ms at most) lets waiting writers in.
        return min(0.1, batch_seconds / 4)

    def tune_for_deletes(self, conn: Connection) -> None:
        # Nothing references the key tables, so deleting from them cannot break a foreign key; with the
        # checks on, SQLite would still look for references of every row it deletes.
        conn.exec_driver_sql("PRAGMA foreign_keys = OFF")
        # A 4 MiB page cache (the default is 2) keeps the index pages that consecutive batches share, for a
        # fixed, small amount of memory.
        conn.exec_driver_sql("PRAGMA cache_size = -4096")

    def set_statement_timeout(self, conn: Connection, seconds: float) -> str | None:
        return "SQLite has no statement timeout"

    def unindexed(self, column: Any) -> Any:
        # Walking the primary key, SQLite would otherwise read every remaining row of the dag from the index
        # on (dag_id, run_id, ...) for each batch.
        return column.concat("")

    # clean_batch_step: the default's one DELETE ... RETURNING, which SQLite runs on one snapshot.

    def exclusive_clean(self, conn: Connection) -> AbstractContextManager[None]:
        return _file_lock(conn.engine.url.database)

    # -- backed-up deletes (--backup) ----------------------------------------------------------------
    ids_per_delete = 500  # builds before 3.32 take at most 999 parameters a statement

    def json_value(self, column: Any) -> tuple[Any, Any | None]:
        # json_valid(X) follows RFC 8259 before 3.42 (JSON5 came) and again since 3.45; between, each value
        # is checked as it is read.
        import sqlite3  # loaded by the driver already, by the time a backup runs

        if (3, 42, 0) <= sqlite3.sqlite_version_info < (3, 45, 0):
            return column, None
        return column, func.json_valid(column)

    def lock_before_reading(self, conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now: nothing read changes before it is deleted

    def locked_read(
        self, query: Select[Any], table: Table, lock_of: Table | None, skip_locked: bool, primary_walk: bool
    ) -> Select[Any]:
        return query  # no row locks: the transaction holds the database's write lock (lock_before_reading)


@contextmanager
def _file_lock(path: str | None) -> Iterator[None]:
    # SQLite has no advisory lock; flock() on the database file is one, and Linux keeps it apart from
    # the fcntl() byte-range locks SQLite itself takes on the same file.
    import fcntl

    with open(path or "", "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CleanRunningError(another_clean_running(str(path)), parameter="exclusive") from None
        yield


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: state store timestamps must be timezone-aware")
    return moment.astimezone(UTC)


def _sample_sql(task: Table) -> str:
    """Written out for SQLite's driver (qmark parameters): SQLAlchemy is slow to compile 64 subqueries, and
    the parts wait for the bounds. Names from ``task``, as the layout has them."""
    dag_id, pk = task.c.dag_id.name, task.c.id.name
    one = f"(SELECT {dag_id} FROM {task.name} WHERE {pk} >= ? ORDER BY {pk} LIMIT 1)"
    return "SELECT " + ", ".join([one] * _SAMPLES)


IMPL_CLASS = SQLiteImpl
