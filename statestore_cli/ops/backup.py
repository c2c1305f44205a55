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

The rows a batch deletes, and how they become lines (built by the database where it can, or made in Python as
``export`` makes them): ``backup_rows``. The file, its writes, syncs and cuts: ``backup_file``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    and_,
    any_,
    bindparam,
    delete,
    func,
    select,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from statestore_cli.db.dialects import in_rowid_order
from statestore_cli.db.mysql_text import MYSQL_ENGINES
from statestore_cli.errors import BackendError
from statestore_cli.ops import copy_lines, pg_copy, pg_paired
from statestore_cli.ops.backup_file import WRITE_CHUNK, BackupFile
from statestore_cli.ops.backup_rows import Lines, Redo, Selection

DELETE_CHUNK = 10_000  # ids per DELETE ... IN (...) on MySQL/MariaDB, well within any packet limit


# -- one batch -----------------------------------------------------------------------------------------------
class Batch(NamedTuple):
    """What one backed-up batch did: rows deleted (and written), and the ``order`` value the next batch
    starts after (None: the walk is done)."""

    deleted: int
    after: Any


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
        except Redo:
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
    if dialect in MYSQL_ENGINES and selection.primary_walk and conn.dialect.delete_returning:
        if not batch_size:
            return _streamed_delete(conn, selection, lines, backup)
        return _range_batch(conn, selection, lines, backup, batch_size, after)
    if not batch_size or dialect not in ("postgresql", "sqlite"):
        return _select_then_delete(conn, selection, lines, backup, batch_size, after)
    columns = lines.columns
    order = selection.order
    walk = selection.walked
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
    walk = selection.walked
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
    the batch made again (``Redo``, from ``finish``)."""

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
            raise Redo
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
        raise Redo from None
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
        walk = selection.walked
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
        walk = selection.walked
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
    """``statement`` compiled for this connection (its schema translated), for the text of a ``COPY``.
    Compiled with a schema map, a statement's text holds a placeholder for the schema, which only an
    execution replaces; a COPY's text is sent as it is, so the schema is written into it here."""
    translate = conn.get_execution_options().get("schema_translate_map")
    if not translate:
        return statement.compile(dialect=conn.dialect)
    return statement.compile(dialect=conn.dialect, schema_translate_map=translate, render_schema_translate=True)


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
    walk = selection.walked
    base = select(order, *columns).where(walk)
    if selection.source is not None:
        base = base.select_from(selection.source)
    base = base.order_by(order, *([selection.tiebreak] if selection.tiebreak is not None else []))
    if batch_size and dialect in MYSQL_ENGINES and selection.primary_walk:
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
