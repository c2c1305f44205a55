"""A backup of what a deleting command deletes (``clean``, ``clear``, ``assets sweep`` with ``--backup FILE``):
every row it deletes, as a line of the export format (``statestore_cli.ops.records``), so that ``statestore import
FILE`` puts back exactly what went.

Each batch is one transaction whose lines are written, flushed and fsynced before it commits, so a commit never
happens before its lines are on disk: a command stopped by a signal, its deadline, a lost connection or a crash
leaves in FILE every row it deleted. The rows written are exactly the rows deleted: where the engine has
``DELETE ... RETURNING`` a batch is one such delete returning the columns of its rows' lines (the rows it picks
locked by the delete itself; on a server, rows another cleaner holds skipped in a bounded batch, as without a
backup); elsewhere (MySQL) the batch selects its rows locked, and deletes exactly those, the row count checked
against the lines written. A one-statement run (``--batch-size 0``) is one delete whose rows the engine streams
(``EngineImpl.stream_deleted``), or where it streams none such deletes of ``CHUNK`` rows at a time, all in one
transaction: one commit, as without a backup, and never a whole run's rows held at once.

A batch that fails before its commit is cut from the file again; one whose commit was under way when the
connection went stays (its rows may or may not be gone), so the file may hold one batch more than was deleted,
never one row fewer. The rows a batch deletes and how they become lines: ``backup_rows``; the file, its writes,
syncs and cuts: ``backup_file``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from typing import Any, NamedTuple

from sqlalchemy import bindparam, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from statestore_cli.db.engines import impl_of
from statestore_cli.db.engines.base import EngineImpl
from statestore_cli.errors import BackendError
from statestore_cli.ops.backup_file import WRITE_CHUNK, BackupFile
from statestore_cli.ops.backup_rows import Selection
from statestore_cli.ops.batches import checked_rowcount
from statestore_cli.ops.export_lines import Lines

CHUNK = 10_000  # rows per delete of a one-statement run: a few MB held at a time


class Batch(NamedTuple):
    """What one backed-up batch did: rows deleted (and written), and the ``order`` value the next batch
    starts after (None: the walk is done)."""

    deleted: int
    after: Any


def backed_up_batch(
    conn: Connection, selection: Selection, backup: BackupFile, batch_size: int, after: Any = None
) -> Batch:
    """One transaction that deletes the next ``batch_size`` rows after ``after`` (0: every row), their lines
    written and the file synced before it commits (see the module's docstring). A failure before the commit
    rolls the transaction back and cuts the batch's lines from the file again."""
    backup.start()
    impl = impl_of(conn)
    try:
        return _transaction(
            conn, backup, lambda: _batch(conn, impl, selection, selection.lines(impl), backup, batch_size, after)
        )
    except sa_exc.DataError:
        # The engine's own JSON check refused a value (``EngineImpl.json_value``): the batch again, each value
        # checked here, which names the key that is not JSON.
        plain = selection.lines(impl, engine_checks=False)
        return _transaction(conn, backup, lambda: _batch(conn, impl, selection, plain, backup, batch_size, after))


def _transaction(conn: Connection, backup: BackupFile, body: Callable[[], Batch]) -> Batch:
    mark = backup.mark()
    committing = False
    try:
        with conn.begin():
            batch = body()
            if batch.deleted:
                backup.sync()  # durable before the commit
            committing = True  # from here on the commit may have happened: the lines stay
    except BaseException:
        if not committing:
            backup.cut(mark)
        raise
    return batch


def _batch(
    conn: Connection,
    impl: EngineImpl,
    selection: Selection,
    lines: Lines,
    backup: BackupFile,
    batch_size: int,
    after: Any,
) -> Batch:
    """A bounded batch is one chunk; a one-statement run every chunk of the selection, in one transaction."""
    if batch_size:
        return _chunk(conn, impl, selection, lines, backup, batch_size, after, skip_locked=True)
    if selection.tiebreak is not None:  # ``order`` is not unique: no walk on it, every row in one read
        return _select_then_delete(conn, impl, selection, lines, backup, 0, None, skip_locked=False)
    returned = [selection.order, *lines.columns]
    streamed = impl.stream_deleted(conn, selection.table, selection.where, returned, WRITE_CHUNK)
    deleted = 0
    if streamed is not None:
        with closing(streamed):  # a failure here ends the stream (and its hold on the connection) at once
            for rows in streamed:
                _write(rows, lines, backup)
                deleted += len(rows)
        return Batch(deleted, None)
    while True:
        chunk = _chunk(conn, impl, selection, lines, backup, CHUNK, after, skip_locked=False)
        deleted += chunk.deleted
        if chunk.after is None:
            return Batch(deleted, None)
        after = chunk.after


def _chunk(
    conn: Connection,
    impl: EngineImpl,
    selection: Selection,
    lines: Lines,
    backup: BackupFile,
    size: int,
    after: Any,
    skip_locked: bool,
) -> Batch:
    """Delete the next ``size`` rows after ``after`` and write their lines: one ``DELETE ... RETURNING`` where
    the engine has it, else a select then a delete."""
    returned = impl.delete_returning(
        conn,
        selection.table,
        selection.order,
        selection.where,
        selection.walked,
        lines.columns,
        size,
        after,
        lambda rows: _write(rows, lines, backup),
        skip_locked=skip_locked,
        primary_walk=selection.primary_walk,
    )
    if returned is None:
        return _select_then_delete(conn, impl, selection, lines, backup, size, after, skip_locked=skip_locked)
    return Batch(*returned)


def _write(rows: Any, lines: Lines, backup: BackupFile) -> None:
    for start in range(0, len(rows), WRITE_CHUNK):
        backup.add_lines(lines.text(rows[start : start + WRITE_CHUNK]))


def _select_then_delete(
    conn: Connection,
    impl: EngineImpl,
    selection: Selection,
    lines: Lines,
    backup: BackupFile,
    size: int,
    after: Any,
    skip_locked: bool,
) -> Batch:
    """Select the next ``size`` rows after ``after`` (0: every row, read in one go) with their lines' columns,
    locked; write their lines; delete exactly those rows, the row count checked against the lines written."""
    impl.lock_before_reading(conn)
    order = selection.order
    query = select(order, *lines.columns).where(selection.walked)
    if selection.source is not None:
        query = query.select_from(selection.source)
    query = query.order_by(order, *([selection.tiebreak] if selection.tiebreak is not None else []))
    if after is not None:
        query = query.where(order > bindparam("after", after, type_=order.type))
    if size:
        query = query.limit(size)
    query = impl.locked_read(query, selection.table, selection.lock_of, skip_locked, selection.primary_walk)
    rows = conn.execute(query).all()
    if not rows:
        return Batch(0, None)
    _write(rows, lines, backup)
    ids = sorted({row[0] for row in rows})
    deleted = checked_rowcount(impl.delete_listed(conn, selection.table, order, selection.where, ids))
    if deleted != len(rows):
        raise BackendError(
            f"the batch wrote {len(rows):,} keys to the backup and deleting them removed {deleted:,} rows: "
            "the rows changed meanwhile; the batch was rolled back, run the command again"
        )
    return Batch(deleted, rows[-1][0] if size and len(rows) == size else None)
