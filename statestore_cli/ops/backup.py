"""A backup of what a deleting command deletes (``clean``, ``clear``, ``assets sweep`` with ``--backup FILE``):
every row it deletes, as a line of the export format (``statestore_cli.ops.records``), so that ``statestore import
FILE`` puts back exactly what went.

Each batch is one transaction whose lines are written, flushed and fsynced before it commits, so a commit never
happens before its lines are on disk: a command stopped by a signal, its deadline, a lost connection or a crash
leaves in FILE every row it deleted. The rows written are exactly the rows deleted: on SQLite a batch is one
``DELETE ... RETURNING`` the lines of the rows it deleted; on PostgreSQL (psycopg 3) one ``COPY (DELETE ...
RETURNING ...)`` (the rows it picks locked by the delete itself, ``FOR UPDATE SKIP LOCKED`` as without a
backup), but a clean's batch deletes on its own session while a second one reads the same rows on the same
snapshot (``pg_paired``), the counts compared, where it can; on MariaDB (10.0.5 and later) the
delete of the batch's id range (a one-statement run: of the whole selection, read through an unbuffered cursor),
as without a backup, ``RETURNING`` them; on MySQL, and for a one-statement run on SQLite (whose rows are too
many to hold at once), the batch selects its rows with their full content,
locked (``FOR UPDATE``; SQLite's write lock from ``BEGIN IMMEDIATE``), writes and syncs their lines, deletes
exactly those rows and checks that the row count is the number of lines. A batch that fails before its commit
is cut from the file again; one whose commit was under way when the connection went stays (its rows may or may
not be gone), so the file may hold one batch more than was deleted, never one row fewer.

The lines of task and dag-run keys are built by the database (one SQL expression per line: what Python would
spend per row costs more than the delete itself; on PostgreSQL with psycopg 3 the fields of each line, joined
by ``copy_lines``), but on SQLite, which runs in this process, from the columns as stored, a chunk of rows at a
time (``row_lines``); asset keys' lines, and a batch whose lines the database
cannot build (a value that is not JSON, a SQLite timestamp in another text form), are made in Python, as
``export`` makes them. Values are written as stored, as ``export`` writes them: with a worker-side backend they
are its references. The file itself, its writes, syncs and cuts: ``backup_file``.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    JSON,
    String,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    delete,
    func,
    literal_column,
    null,
    select,
    type_coerce,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.dialects import in_rowid_order
from statestore_cli.db.schema import asset, asset_state_store
from statestore_cli.errors import BackendError
from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops import copy_lines, pg_copy, pg_paired, row_lines
from statestore_cli.ops.backup_file import WRITE_CHUNK, BackupFile
from statestore_cli.ops.records import (
    asset_record,
    dag_run_record,
    encode_line,
    is_json,
    load_strict,
    task_record,
)

_MYSQL = ("mysql", "mariadb")
DELETE_CHUNK = 10_000  # ids per DELETE ... IN (...) on MySQL/MariaDB, well within any packet limit


# -- one batch -----------------------------------------------------------------------------------------------
# How a row becomes its line: ``columns`` selected (or returned) after the row's ``order`` value, and the line
# made of the row; None where the database could not build it (the batch is then made again from the rows).
class Lines(NamedTuple):
    """How rows become lines: ``columns`` selected (or returned) after each row's ``order`` value, and ``make``,
    the line of such a row, None where the database could not build it (the batch is then made again from
    the rows in Python). ``copied``: on PostgreSQL with psycopg 3, the fields ``COPY`` sends instead and the
    text of the line around them (``copy_lines.Shape``). ``block``: the lines of a chunk of rows made at once,
    each ending in a line break, or None (as ``make``); preferred to ``make`` where given."""

    columns: Sequence[Any]
    make: Callable[[Any], str | None]
    copied: copy_lines.Shape | None = None
    block: Callable[[Sequence[Any]], str | None] | None = None

    def add(self, rows: Sequence[Any], backup: BackupFile) -> None:
        """Write the lines of ``rows``; raises ``_Redo`` where one cannot be made (nothing of them written)."""
        if self.block is not None:
            text = self.block(rows)
            if text is None:
                raise _Redo
            backup.add_lines(text)
            return
        made = list(map(self.make, rows))
        if None in made:
            raise _Redo
        backup.add_many(made)  # type: ignore[arg-type]  # None ruled out just above


@dataclass(frozen=True, eq=False)  # compared (and hashed) by identity: it keys its compiled statements
class Selection:
    """What a backed-up delete deletes from one table, and how each row becomes a line.

    ``order`` is unique within ``where`` (a row id; an asset's key within its asset) and is walked upwards;
    ``where`` selects the rows and is re-checked by the delete; ``walk`` is the same selection written so that
    the engine walks ``order`` (see ``lifecycle._task_selection``), ``where`` when None. ``columns`` and
    ``record`` make each row's export record in Python; ``lines``, where given, has the database build the
    lines instead (for a dialect; None: not there), much cheaper for the many rows of a clean."""

    table: Table
    order: Any
    where: ColumnElement[bool]
    columns: Sequence[Any]
    record: Callable[[Any], dict[str, Any]]  # a Row, unpacked
    walk: ColumnElement[bool] | None = None
    lock_of: Table | None = None  # PostgreSQL: lock only this table's rows (a query that joins another)
    primary_walk: bool = False  # MySQL/MariaDB: keep the walk on the primary key (``order`` is the id)
    source: Any = None  # what the rows are selected from, when not ``table`` alone (a join)
    tiebreak: Any = None  # ordered by after ``order`` when that is not unique (a one-statement run only)
    lines: Callable[[str], Lines | None] | None = None

    def in_python(self) -> Lines:
        record = self.record
        return Lines(self.columns, lambda row: encode_line(record(row)))


class Batch(NamedTuple):
    """What one backed-up batch did: rows deleted (and written), and the ``order`` value the next batch
    starts after (None: the walk is done)."""

    deleted: int
    after: Any


class _Redo(Exception):
    """The database could not build a line of the batch (a value that is not JSON, a timestamp in an unusual
    form): the batch is rolled back and made again from its rows, which says which key it is."""


def backed_up_batch(
    conn: Connection,
    selection: Selection,
    backup: BackupFile,
    batch_size: int,
    after: Any = None,
    *,
    read_beside: bool = False,
) -> Batch:
    """One transaction that deletes the next ``batch_size`` rows after ``after`` (0: every row), their lines
    written and the file synced before it commits (see the module's docstring). A failure before the commit
    rolls the transaction back and cuts the batch's lines from the file again. ``read_beside``: on PostgreSQL
    the batch's rows are read on a second session while this one deletes them (``pg_paired``: a second
    connection, worth it for the many rows of a clean)."""
    backup.start()
    dialect = conn.dialect.name
    lines = selection.lines(dialect) if selection.lines is not None else None
    if lines is not None:
        try:
            if read_beside and dialect == "postgresql" and lines.copied and _copies(conn) and selection.source is None:
                try:
                    if not batch_size:
                        return _paired_batch(conn, selection, lines.copied, backup)
                    return _paired_range_batch(conn, selection, lines.copied, backup, batch_size, after)
                except pg_paired.Contended:
                    pass  # nothing was deleted: the one-session way (locked rows skipped, changed rows waited for)
            return _transaction(conn, backup, lambda: _lines_batch(conn, selection, lines, backup, batch_size, after))
        except _Redo:
            pass
        except sa_exc.DataError:  # PostgreSQL refused a value's cast to json: the batch again, from its rows
            if dialect != "postgresql":
                raise
    return _transaction(
        conn, backup, lambda: _select_then_delete(conn, selection, selection.in_python(), backup, batch_size, after)
    )


def _transaction(conn: Connection, backup: BackupFile, body: Callable[[], Batch]) -> Batch:
    mark = backup.mark()
    committing = False
    try:
        with conn.begin():
            batch = body()
            committing = True  # from here on the commit may have happened: the lines stay
    except BaseException:
        if not committing:
            backup.cut(mark)
        raise
    return batch


def _lines_batch(
    conn: Connection, selection: Selection, lines: Lines, backup: BackupFile, batch_size: int, after: Any
) -> Batch:
    """A batch whose lines the database builds: on PostgreSQL, SQLite and MariaDB one ``DELETE ... RETURNING``
    them (what is written is exactly what was deleted, the rows locked by the delete itself); on MySQL, and
    for a one-statement run on SQLite (whose rows are too many to hold), selected first and then deleted."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        _utc_session(conn)
        if lines.copied is not None and _copies(conn):
            return _copy_batch(conn, selection, lines.copied, backup, batch_size, after)
    if dialect in _MYSQL and selection.primary_walk and conn.dialect.delete_returning:
        if not batch_size:
            return _streamed_delete(conn, selection, lines, backup)
        return _range_batch(conn, selection, lines, backup, batch_size, after)
    if not batch_size or dialect not in ("postgresql", "sqlite"):
        return _select_then_delete(conn, selection, lines, backup, batch_size, after)
    columns = lines.columns
    order = selection.order
    walk = selection.walk if selection.walk is not None else selection.where
    ids = select(order).where(walk, *([order > after] if after is not None else [])).order_by(order).limit(batch_size)
    if dialect == "postgresql":  # rows another cleaner holds are skipped, as without a backup
        chosen = order == any_(func.array(ids.with_for_update(skip_locked=True).scalar_subquery()))
    else:
        chosen = order.in_(ids.scalar_subquery())
    result = conn.execute(delete(selection.table).where(chosen, selection.where).returning(order, *columns))
    count, last = _write_returned(result, lines, backup)
    return Batch(count, None if count < batch_size else last)


def _write_returned(result: Any, lines: Lines, backup: BackupFile) -> tuple[int, Any]:
    """Write the line of each row a ``DELETE ... RETURNING`` gave back (its ``order`` value, then the columns of
    its line), then sync: durable before the commit. How many rows, and the highest ``order`` value."""
    count = 0
    last = None
    for chunk in result.partitions(WRITE_CHUNK):  # the driver holds the batch's rows; Python a chunk of them
        lines.add(chunk, backup)
        top = max(row[0] for row in chunk)  # RETURNING gives the rows in no set order
        last = top if last is None or top > last else last
        count += len(chunk)
    if count:
        backup.sync()
    return count, last


def _range_batch(
    conn: Connection, selection: Selection, lines: Lines, backup: BackupFile, batch_size: int, after: Any
) -> Batch:
    """A bounded batch on MariaDB (``DELETE ... RETURNING`` since 10.0.5), as the clean without a backup
    walks: find the id that ends the next ``batch_size`` rows (on the primary key), then delete the selected rows
    up to it, returning their lines: what is written is exactly what was deleted, locked by the delete itself."""
    columns = lines.columns
    order = selection.order
    walk = selection.walk if selection.walk is not None else selection.where
    start = [order > after] if after is not None else []
    end = select(order).with_hint(selection.table, "FORCE INDEX (PRIMARY)").where(walk, *start).order_by(order)
    upper = conn.execute(end.limit(1).offset(batch_size - 1)).scalar()
    bounds = [*start, *([order <= upper] if upper is not None else [])]
    result = conn.execute(delete(selection.table).where(*bounds, selection.where).returning(order, *columns))
    count, _ = _write_returned(result, lines, backup)
    return Batch(count, upper)


def _streamed_delete(conn: Connection, selection: Selection, lines: Lines, backup: BackupFile) -> Batch:
    """A one-statement run on MariaDB: the selection's ``DELETE ... RETURNING`` its lines, as the clean without a
    backup deletes, read through an unbuffered cursor a thousand rows at a time (no run's rows held at once),
    then synced before the commit. A stop midway rolls the whole delete back and cuts its lines from the file
    again (``_transaction``). Selecting the rows locked and deleting them after took 10.9 s per 500,000 keys,
    this 7.9 s, the bare floor 7.8 s."""
    columns = lines.columns
    statement = delete(selection.table).where(selection.where).returning(selection.order, *columns)
    result = conn.execution_options(stream_results=True).execute(statement)
    count, _ = _write_returned(result, lines, backup)
    return Batch(count, None)


def _utc_session(conn: Connection) -> None:
    """PostgreSQL writes a timestamp (``to_json``, COPY's text) in the session's time zone and date style: UTC
    and ISO (``2026-11-30 01:02:03.1234+00``, what ``copy_lines.moment`` reads), for this transaction only."""
    conn.exec_driver_sql("SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO', true)")


def _copies(conn: Connection) -> bool:
    """Whether the connection is psycopg 3's, whose COPY streams a statement's rows as they come."""
    return hasattr(conn.connection.dbapi_connection, "pgconn")


def _copy_batch(
    conn: Connection, selection: Selection, shape: copy_lines.Shape, backup: BackupFile, batch_size: int, after: Any
) -> Batch:
    """A batch on PostgreSQL: ``COPY (DELETE ... RETURNING <columns>) TO STDOUT``, the deleted rows' lines made
    from COPY's text as the server sends it (``copy_lines``; a 256 KB block of it held at a time) and written,
    then synced before the commit. A bounded batch deletes the rows its subquery takes, locked (``FOR UPDATE
    SKIP LOCKED``, as without a backup), each returning its id too: the highest is where the next starts."""
    copy_all, copy_batch, _ = _copy_statements(conn, selection, shape.fields)
    compiled = copy_batch if batch_size else copy_all
    bound = {"after": 0 if after is None else after, "size": batch_size} if batch_size else None
    sql, params = f"COPY ({compiled.string}) TO STDOUT", compiled.construct_params(bound)
    taker = _CopyTaker(shape, backup, trailing=1 if batch_size else 0)
    dbapi_conn: Any = conn.connection.dbapi_connection
    with _copy_errors(conn, dbapi_conn, sql, params, invalidate=conn.invalidate):
        deleted = pg_copy.copy_out(dbapi_conn, sql, params, taker.take)
    count = taker.finish(deleted)
    return Batch(count, None if not batch_size or count < batch_size else taker.last)


class _CopyTaker:
    """Takes the rows a COPY of a batch sends (whole rows: the server sends each as a message of its own),
    writes their lines, and counts them; a row whose line must be made from its row has the rest read, then
    the batch made again (``_Redo``, from ``finish``)."""

    def __init__(self, shape: copy_lines.Shape, backup: BackupFile, trailing: int = 0) -> None:
        self.shape, self.backup, self.trailing = shape, backup, trailing
        self.count = self.last = 0
        self.unmade = False

    def take(self, rows: list[bytes]) -> None:
        self.count += len(rows)
        if self.unmade:
            return
        try:
            made, made_rows, ids = copy_lines.lines(b"".join(rows), self.shape, self.trailing)
        except copy_lines.Unmade:
            self.unmade = True
        else:
            self.backup.add_bytes(made, made_rows)
            if ids:
                self.last = max(self.last, max(map(int, ids[0])))

    def finish(self, deleted: int) -> int:
        """The lines written, checked against the rows ``deleted`` and synced: durable before the commit."""
        if self.unmade:
            raise _Redo
        if deleted != self.count:
            raise BackendError(
                f"the batch deleted {deleted:,} rows and wrote {self.count:,} lines: the rows changed meanwhile; "
                "the batch was rolled back, run the command again"
            )
        if self.count:
            self.backup.sync()
        return self.count


@contextmanager
def _copy_errors(
    conn: Connection, dbapi_conn: Any, sql: str, params: Any, invalidate: Callable[[], None]
) -> Iterator[None]:
    """psycopg's errors of a COPY read here as SQLAlchemy raises them (a lost connection noticed as one,
    ``invalidate`` called), but a value that is not JSON: the batch again, from its rows in Python."""
    errors = conn.dialect.loaded_dbapi
    try:
        yield
    except errors.DataError:
        raise _Redo from None
    except errors.Error as exc:
        gone = conn.dialect.is_disconnect(exc, dbapi_conn, None)
        if gone:
            invalidate()
        raise sa_exc.DBAPIError.instance(sql, params, exc, errors.Error, connection_invalidated=gone) from None


def _paired_batch(conn: Connection, selection: Selection, shape: copy_lines.Shape, backup: BackupFile) -> Batch:
    """A one-statement clean on PostgreSQL: the delete alone on this connection while a second session reads
    the same rows on its snapshot and this process makes their lines (``pg_paired``); raises
    ``pg_paired.Contended`` (nothing deleted) when the two cannot be paired."""
    _, _, read = _copy_statements(conn, selection, shape.fields)
    sql, params = f"COPY ({read.string}) TO STDOUT", read.construct_params()
    everything = delete(selection.table).where(selection.where)
    taker = _CopyTaker(shape, backup)

    def body() -> Batch:
        with _copy_errors(conn, None, sql, params, invalidate=lambda: None):
            deleted = pg_paired.delete_beside_read(conn, everything, sql, params, taker.take)
        return Batch(taker.finish(_counted(deleted)), None)

    with pg_paired.repeatable_read(conn):
        return _transaction(conn, backup, body)


def _paired_range_batch(
    conn: Connection, selection: Selection, shape: copy_lines.Shape, backup: BackupFile, batch_size: int, after: Any
) -> Batch:
    """A bounded batch on PostgreSQL, deleted on this connection while a second session reads the same rows on
    its snapshot (``pg_paired``): ``COPY (DELETE ... RETURNING ...)`` has the one server process that deletes
    also send every row, where here the reading runs beside the delete. Both sides must name the same rows,
    so the batch is a range of ``order``: the rows after ``after`` up to the ``batch_size``-th of them (found
    first, on the same snapshot; each side finding them itself took longer), not the rows a subquery takes
    locked, which only the deleting side would know. A row another transaction holds is waited for (briefly:
    ``PAIRED_LOCK_WAIT_MS``), and one it changed makes the delete fail; then (``pg_paired.Contended``, nothing
    deleted) the caller runs the batch the one-session way, which skips locked rows."""
    end, bounded, open_ended = _range_statements(conn, selection, shape.fields)
    start = 0 if after is None else after
    taker = _CopyTaker(shape, backup)

    def body() -> Batch:
        upper = conn.execute(end, {"after": start, "skip": batch_size - 1}).scalar()
        delete_rows, read = open_ended if upper is None else bounded
        bound = {"after": start} if upper is None else {"after": start, "upper": upper}
        sql, params = f"COPY ({read.string}) TO STDOUT", read.construct_params(bound)
        with _copy_errors(conn, None, sql, params, invalidate=lambda: None):
            deleted = pg_paired.delete_beside_read(
                conn, delete_rows, sql, params, taker.take, bound, lock_wait_ms=PAIRED_LOCK_WAIT_MS
            )
        return Batch(taker.finish(_counted(deleted)), upper)

    with pg_paired.repeatable_read(conn):
        return _transaction(conn, backup, body)


# How long a paired batch waits for a row another transaction holds (an Airflow task writing the key, a second
# cleaner's batch) before it is run the one-session way, which skips such rows as the clean without a backup.
PAIRED_LOCK_WAIT_MS = 200
_RANGE_STATEMENTS: weakref.WeakKeyDictionary[Selection, tuple[Any, Any, Any]] = weakref.WeakKeyDictionary()


def _range_statements(conn: Connection, selection: Selection, columns: Sequence[Any]) -> tuple[Any, Any, Any]:
    """The statements of ``_paired_range_batch``, made once per selection (see ``_COPY_STATEMENTS``): the
    ``order`` value that ends the ``:skip`` + 1 rows after ``:after`` (None: fewer are left); then, for the rows
    after ``:after`` up to ``:upper``, and for every row after ``:after``, the delete and the select of
    ``columns`` (compiled for this connection, for COPY)."""
    made = _RANGE_STATEMENTS.get(selection)
    if made is None:
        order = selection.order
        walk = selection.walk if selection.walk is not None else selection.where
        after = order > bindparam("after", type_=order.type)
        upper = order <= bindparam("upper", type_=order.type)
        end = select(order).where(walk, after).order_by(order).offset(bindparam("skip")).limit(1)
        pairs = []
        for bounds in ((after, upper), (after,)):
            read = select(*columns).select_from(selection.table).where(*bounds, selection.where)
            pairs.append((delete(selection.table).where(*bounds, selection.where), _for_copy(conn, read)))
        made = _RANGE_STATEMENTS[selection] = (end, pairs[0], pairs[1])
    return made


# The statements of each selection's COPY batches, made once: statements made per batch leave reference cycles
# for the garbage collector, and memory would grow with the batches until it ran.
_COPY_STATEMENTS: weakref.WeakKeyDictionary[Selection, tuple[Any, Any, Any]] = weakref.WeakKeyDictionary()


def _copy_statements(conn: Connection, selection: Selection, columns: Sequence[Any]) -> tuple[Any, Any, Any]:
    """The delete of every row of the selection returning ``columns``, that of a batch, the ``:size``
    rows after ``:after`` taken locked, returning ``columns`` and ``order``, and the select of every row's
    ``columns`` (``_paired_batch``); compiled for this connection.
    The rows are taken as the clean without a backup takes them, ``id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP
    LOCKED))``: an index scan of the array's ids, where ``id IN (SELECT ...)`` of a ``WITH`` made the server
    hash and de-duplicate the ids first (41 ms a batch of 10,000 against 29 ms)."""
    made = _COPY_STATEMENTS.get(selection)
    if made is None:
        order = selection.order
        walk = selection.walk if selection.walk is not None else selection.where
        picked = select(order).where(walk, order > bindparam("after", type_=order.type)).order_by(order)
        taken = picked.limit(bindparam("size")).with_for_update(skip_locked=True).scalar_subquery()
        every = delete(selection.table).where(selection.where).returning(*columns)
        batch = delete(selection.table).where(order == any_(func.array(taken)), selection.where)
        read = select(*columns).select_from(selection.table).where(selection.where)
        statements = (every, batch.returning(*columns, order), read)
        compiled = [_for_copy(conn, statement) for statement in statements]
        made = _COPY_STATEMENTS[selection] = (compiled[0], compiled[1], compiled[2])
    return made


def _for_copy(conn: Connection, statement: Any) -> Any:
    """``statement`` compiled for this connection (its schema translated), for the text of a ``COPY``."""
    translate = conn.get_execution_options().get("schema_translate_map")
    return statement.compile(dialect=conn.dialect, schema_translate_map=translate)


def _select_then_delete(
    conn: Connection, selection: Selection, lines: Lines, backup: BackupFile, batch_size: int, after: Any
) -> Batch:
    """Select the batch's rows with their full content, locked; write their lines and sync; delete exactly
    those rows, the row count checked against the lines written.

    The rows are read a thousand at a time, each read going on after the last row of the one before (in the
    same transaction, so every row stays locked): no server-side cursor, which would hold a whole
    one-statement run's rows, or whose end a lost connection turns into noise on PyMySQL. A selection whose
    ``order`` is not unique (an at-once sweep of every inactive asset: few keys) is read in one go."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        # The write lock from the start: no other writer can change what is selected before it is deleted.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    columns = lines.columns
    order = selection.order
    walk = selection.walk if selection.walk is not None else selection.where
    base = select(order, *columns).where(walk)
    if selection.source is not None:
        base = base.select_from(selection.source)
    base = base.order_by(order, *([selection.tiebreak] if selection.tiebreak is not None else []))
    if batch_size and dialect in _MYSQL and selection.primary_walk:
        base = base.with_hint(selection.table, "FORCE INDEX (PRIMARY)")
    if dialect != "sqlite":
        # PostgreSQL: rows another cleaner holds are skipped, as the clean without a backup does.
        of = selection.lock_of if dialect == "postgresql" else None
        base = base.with_for_update(skip_locked=dialect == "postgresql" and batch_size > 0, of=of)
    chunked = selection.tiebreak is None
    # Only the ids of a bounded batch are kept, to delete exactly those; a one-statement run deletes
    # its selection again instead (its rows are locked, and the count must match the lines).
    ids: list[Any] | None = [] if batch_size and dialect != "sqlite" else None
    count = 0
    last = None
    position = after
    onward = base.where(order > bindparam("position", type_=order.type))
    statements: dict[tuple[bool, int], Any] = {}  # made once each: a statement per chunk costs its cache key
    while True:
        wanted = min(WRITE_CHUNK, batch_size - count) if batch_size else WRITE_CHUNK
        shape = (position is None, wanted)
        if shape not in statements:
            query = base if position is None else onward
            statements[shape] = query.limit(wanted) if chunked else query
        rows = conn.execute(statements[shape], {} if position is None else {"position": position}).all()
        lines.add(rows, backup)
        if ids is not None:
            ids.extend(row[0] for row in rows)
        if rows:
            last = position = rows[-1][0]
        count += len(rows)
        if not chunked or len(rows) < wanted or (batch_size and count >= batch_size):
            break
    if count:
        backup.sync()  # durable before the rows go, so before the commit
        deleted = _delete(conn, selection, after, last, ids)
        if deleted != count:
            raise BackendError(
                f"the batch wrote {count:,} keys to the backup and deleting them removed {deleted:,} rows: "
                "the rows changed meanwhile; the batch was rolled back, run the command again"
            )
    done = batch_size == 0 or count < batch_size
    return Batch(count, None if done else last)


def _delete(conn: Connection, selection: Selection, after: Any, last: Any, ids: list[Any] | None) -> int:
    """Delete the rows just written: by their ids where other sessions may write meanwhile (their rows are
    locked by the select), by the range they span on SQLite (whose write lock this transaction holds) and in
    a one-statement run (the selection again, up to the last row written)."""
    table, order, where = selection.table, selection.order, selection.where
    if ids is None:
        bounds = [order <= last] + ([order > after] if after is not None else [])
        chosen = and_(where, *bounds)
        if selection.primary_walk:  # ``order`` is the table's id
            chosen = in_rowid_order(conn.dialect.name, table, chosen)
        return _counted(conn.execute(delete(table).where(chosen)).rowcount)
    if conn.dialect.name == "postgresql":  # one array parameter, whatever the batch size
        chosen = order == any_(bindparam("ids", ids, type_=ARRAY(order.type)))
        return _counted(conn.execute(delete(table).where(chosen, where)).rowcount)
    deleted = 0
    statement = delete(table).where(order.in_(bindparam("ids", expanding=True)), where)
    for start in range(0, len(ids), DELETE_CHUNK):
        deleted += _counted(conn.execute(statement, {"ids": ids[start : start + DELETE_CHUNK]}).rowcount)
    return deleted


def _counted(rowcount: int | None) -> int:
    if rowcount is None or rowcount < 0:
        raise BackendError("the database did not report how many rows the delete removed")
    return int(rowcount)


def decoded(value: str, key: str, scope: Callable[[], str]) -> Any:
    """A stored value as the export writes it (the JSON it holds); a value that is not JSON stops the batch
    (rolled back: nothing of it deleted), since no import could read its line back."""
    try:
        return load_strict(value)
    except ValueError as exc:
        raise BackendError(
            f"the value of key {key!r} for {scope()} is not valid JSON ({getattr(exc, 'msg', exc)}), so it cannot "
            "be backed up; the batch was rolled back: fix or delete that key, or run without --backup"
        ) from None


# -- lines built by the database -------------------------------------------------------------------------------
# The export line of a task or dag-run key as one SQL expression (PostgreSQL, MySQL, MariaDB; SQLite's lines are
# made from its raw columns instead, ``_in_blocks``): the same fields in the same order, strings JSON-quoted by the
# engine (as Python quotes them; MariaDB writes hex digits in capitals), timestamps in ISO 8601 UTC, the stored
# value embedded as the JSON it is (line breaks in it, which valid JSON has only between its tokens, made spaces).
# On a server, Python's line for the same row would cost more than the delete itself.
def _text(sql: str) -> Any:
    return literal_column("'" + sql.replace("'", "''") + "'", String)


def _joined(dialect: str, parts: Sequence[Any]) -> Any:
    if dialect in _MYSQL:
        return func.concat(*parts)
    out = parts[0]
    for part in parts[1:]:
        out = out.op("||")(part)
    return type_coerce(out, String)


def _quoted(dialect: str, column: Any) -> Any:
    """A text column as a JSON string."""
    if dialect == "postgresql":
        return cast(func.to_json(column), Text)
    return func.json_quote(column)


def _number(column: Any) -> Any:
    return cast(column, Text)


def _moment(dialect: str, column: Any) -> Any:
    """A timestamp column as a JSON string ``"YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00"``."""
    if dialect == "postgresql":  # ISO 8601 in the session's zone, UTC (_utc_session); microseconds trimmed
        return cast(func.to_json(column), Text)
    # MySQL and MariaDB: naive UTC (sessions run at +00:00)
    fraction = case(
        (func.microsecond(column) == 0, _text("")),
        else_=func.concat(_text("."), func.lpad(func.microsecond(column), 6, _text("0"))),
    )
    return func.concat(_text('"'), func.date_format(column, _text("%Y-%m-%dT%H:%i:%s")), fraction, _text('+00:00"'))


def _maybe_moment(dialect: str, column: Any) -> Any:
    if dialect == "postgresql":
        return func.coalesce(_moment(dialect, column), _text("null"))
    return case((column.is_(None), _text("null")), else_=_moment(dialect, column))


def _sqlite_json_valid_is_strict() -> bool:
    """Whether SQLite's json_valid(X) accepts RFC 8259 JSON only: before JSON5 came (3.42) and since its one
    argument form went back to RFC 8259 (3.45). Between, a value is checked in Python instead."""
    import sqlite3

    return not (3, 42, 0) <= sqlite3.sqlite_version_info < (3, 45, 0)


def _json(dialect: str, column: Any) -> Any:
    """The stored value as the JSON it holds, on one line; on PostgreSQL the cast to json refuses text that is
    not JSON (the batch is then made in Python, which names the key), on MySQL and MariaDB the line is NULL
    for it."""
    if dialect == "postgresql":  # tabs too, which COPY's text format would escape
        breaks = func.chr(13).op("||")(func.chr(10)).op("||")(func.chr(9))
        return func.translate(cast(cast(column, JSON), Text), breaks, _text("   "))
    cr: Any = literal_column("CHAR(13 USING utf8mb4)")
    lf: Any = literal_column("CHAR(10 USING utf8mb4)")
    flat = func.replace(func.replace(column, cr, _text(" ")), lf, _text(" "))
    return case((func.json_valid(column) == 1, flat), else_=null())


def _task_lines(table: Table) -> Callable[[str], Lines | None]:
    regions = "region_id" in table.c

    @cache  # every batch asks: the expressions are made once per selection and engine
    def build(dialect: str) -> Lines | None:
        c = table.c
        if dialect == "sqlite":
            fields = [c.dag_id, c.run_id, c.task_id, *([c.region_id] if regions else []), c.map_index, c.key]
            before = ['{"store": "task", "dag_id": "', '", "run_id": "', '", "task_id": "']
            before += ['"', ', "map_index": '] if regions else ['", "map_index": ']
            before += [', "key": "']
            finish = [row_lines.strings] * 3 + ([row_lines.regions] if regions else []) + [row_lines.numbers]
            return _in_blocks(fields, before, [*finish, row_lines.strings], c)
        head = [_text('{"store": "task", "dag_id": '), _quoted(dialect, c.dag_id), _text(', "run_id": ')]
        head += [_quoted(dialect, c.run_id), _text(', "task_id": '), _quoted(dialect, c.task_id)]
        tail = [_text(', "map_index": '), _number(c.map_index), _text(', "key": '), _quoted(dialect, c.key)]
        tail += [_text(', "updated_at": '), _moment(dialect, c.updated_at), _text(', "expires_at": ')]
        tail += [_maybe_moment(dialect, c.expires_at), _text(', "value": '), _json(dialect, c.value), _text("}")]
        copied = copy_lines.task_shape(table) if dialect == "postgresql" else None
        if not regions:
            return Lines([_joined(dialect, head + tail)], _as_export(dialect, _line), copied)
        columns = [_joined(dialect, head), _joined(dialect, tail), c.region_id]
        return Lines(columns, _as_export(dialect, _region_line), copied)

    return build


def _dag_run_lines(table: Table) -> Callable[[str], Lines | None]:
    @cache  # every batch asks: the expressions are made once per selection and engine
    def build(dialect: str) -> Lines | None:
        c = table.c
        if dialect == "sqlite":
            before = ['{"store": "dag_run", "dag_id": "', '", "run_id": "', '", "key": "']
            return _in_blocks([c.dag_id, c.run_id, c.key], before, [row_lines.strings] * 3, c)
        parts = [_text('{"store": "dag_run", "dag_id": '), _quoted(dialect, c.dag_id), _text(', "run_id": ')]
        parts += [_quoted(dialect, c.run_id), _text(', "key": '), _quoted(dialect, c.key)]
        parts += [_text(', "updated_at": '), _moment(dialect, c.updated_at), _text(', "expires_at": ')]
        parts += [_maybe_moment(dialect, c.expires_at), _text(', "value": '), _json(dialect, c.value), _text("}")]
        copied = copy_lines.dag_run_shape(table) if dialect == "postgresql" else None
        return Lines([_joined(dialect, parts)], _as_export(dialect, _line), copied)

    return build


def _in_blocks(fields: list[Any], before: list[str], finish: list[Any], c: Any) -> Lines:
    """SQLite's lines, made in this process a chunk of rows at a time (``row_lines``): ``fields``, the line's up to
    its key (``c.key``, the last), ``before`` the text before each, ``finish`` what makes each column; then the
    timestamps and the value as stored, and ``json_valid`` of the value where SQLite's follows RFC 8259."""
    strict = _sqlite_json_valid_is_strict()
    columns = [*fields, _raw(c.updated_at), _raw(c.expires_at), c.value]
    columns += [func.json_valid(c.value)] if strict else []
    before = [*before, '", "updated_at": ', ', "expires_at": ', ', "value": ']
    finish = [*finish, row_lines.moments, row_lines.expiries, row_lines.values]
    block = partial(row_lines.lines, shape=row_lines.Shape(before, finish, strict, is_json))

    def make(row: Any) -> str | None:
        text = block([row])
        return None if text is None else text[:-1]

    return Lines(columns, make, None, block)


# MySQL's and MariaDB's JSON_QUOTE write a control character as \u000B where json.dumps writes \u000b: the hex
# digits of such an escape (not of an escaped backslash followed by "u00") in lower case, as export writes them.
_UPPER_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*\\u00)([01][A-F])")


def _lower_escape(found: re.Match[str]) -> str:
    return found[1] + found[2].lower()


def _lowered(line: str | None) -> str | None:
    return line if line is None or "\\u00" not in line else _UPPER_ESCAPE.sub(_lower_escape, line)


def _as_export(dialect: str, make: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """``make``, its lines' escapes as export writes them where the database's JSON_QUOTE does not."""
    return make if dialect not in _MYSQL else lambda row: _lowered(make(row))


def _line(row: Any) -> str | None:
    """The line of a row (``row[1]``), None when the database could not build it."""
    return row[1]


def _region_line(row: Any) -> str | None:
    """A line spliced from its head, its region (where it is not the nil one) and its tail."""
    _, head, tail, region = row
    if head is None or tail is None:
        return None
    if region is None or region == NIL_REGION:
        return head + tail
    return f'{head}, "region_id": "{region}"{tail}'


# -- the rows of each store as lines ---------------------------------------------------------------------------
def _raw(column: Any) -> Any:
    # The driver's own value (SQLite text, a datetime elsewhere) skips SQLAlchemy's per-row parsing.
    return type_coerce(column, String)


def task_rows(table: Table, where: ColumnElement[bool], walk: ColumnElement[bool] | None = None) -> Selection:
    """Task keys (``table``: the layout's task table) that ``where`` selects, as export lines."""
    regions = "region_id" in table.c
    columns = [table.c.dag_id, table.c.run_id, table.c.task_id, table.c.map_index, table.c.key]
    columns += [_raw(table.c.updated_at), _raw(table.c.expires_at), table.c.value]
    columns += [table.c.region_id] if regions else []

    def record(row: Any) -> dict[str, Any]:
        _, dag_id, run_id, task_id, map_index, key, updated_at, expires_at, value, *in_region = row
        value = decoded(value, key, lambda: f"dag_id={dag_id} run_id={run_id} task_id={task_id} map_index={map_index}")
        region = str(in_region[0]) if in_region and in_region[0] != NIL_REGION else None  # outside any: none
        expiry = None if expires_at is None else iso_utc(expires_at)
        return task_record(dag_id, run_id, task_id, region, map_index, key, iso_utc(updated_at), expiry, value)

    return Selection(table, table.c.id, where, columns, record, walk, primary_walk=True, lines=_task_lines(table))


def dag_run_rows(table: Table, where: ColumnElement[bool], walk: ColumnElement[bool] | None = None) -> Selection:
    """Dag-run keys (Airflow 3.4's ``dag_run_state_store``) that ``where`` selects, as export lines."""
    columns = [table.c.dag_id, table.c.run_id, table.c.key, _raw(table.c.updated_at), _raw(table.c.expires_at)]
    columns.append(table.c.value)

    def record(row: Any) -> dict[str, Any]:
        _, dag_id, run_id, key, updated_at, expires_at, value = row
        value = decoded(value, key, lambda: f"dag run dag_id={dag_id} run_id={run_id}")
        expiry = None if expires_at is None else iso_utc(expires_at)
        return dag_run_record(dag_id, run_id, key, iso_utc(updated_at), expiry, value)

    return Selection(table, table.c.id, where, columns, record, walk, primary_walk=True, lines=_dag_run_lines(table))


_WRITER = (
    asset_state_store.c.last_updated_by_kind,
    asset_state_store.c.last_updated_by_dag_id,
    asset_state_store.c.last_updated_by_run_id,
    asset_state_store.c.last_updated_by_task_id,
    asset_state_store.c.last_updated_by_map_index,
)


def asset_rows(where: ColumnElement[bool], name: str, uri: str) -> Selection:
    """The keys of one asset (named ``name`` and ``uri``) that ``where`` selects, walked by key, as export lines."""
    kv = asset_state_store
    columns = [_raw(kv.c.updated_at), kv.c.value, *_WRITER]

    def record(row: Any) -> dict[str, Any]:
        key, updated_at, value, *writer = row
        value = decoded(value, key, lambda: f"asset name={name} uri={uri}")
        return asset_record(name, uri, key, iso_utc(updated_at), tuple(writer), value)

    return Selection(kv, kv.c.key, where, columns, record)


def assets_rows(where: ColumnElement[bool]) -> Selection:
    """The asset keys ``where`` selects, of any assets (their names joined in), as export lines: for a
    one-statement delete, walked by (asset id, key) in one transaction, so never bounded by ``order``."""
    kv = asset_state_store
    joined = kv.join(asset, asset.c.id == kv.c.asset_id)
    columns = [asset.c.name, asset.c.uri, kv.c.key, _raw(kv.c.updated_at), kv.c.value, *_WRITER]

    def record(row: Any) -> dict[str, Any]:
        _, name, uri, key, updated_at, value, *writer = row
        value = decoded(value, key, lambda: f"asset name={name} uri={uri}")
        return asset_record(name, uri, key, iso_utc(updated_at), tuple(writer), value)

    return Selection(kv, kv.c.asset_id, where, columns, record, lock_of=kv, source=joined, tiebreak=kv.c.key)
