"""A selection's rows deleted in batches walking one of its columns, with or without a backup: what the
asset sweep (each asset's keys) and the clear of a run or dag (its keys) delete with, on ``ops.batches``'s
walk. A clean has statements of its own per engine (``ops.cleanup``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, delete, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.engines import impl_of
from statestore_cli.ops.backup import backed_up_batch
from statestore_cli.ops.backup_file import BackupFile
from statestore_cli.ops.backup_rows import Selection
from statestore_cli.ops.batches import Hooks, Tally, checked_rowcount, walk


def tune(conn: Connection) -> None:
    """Set ``conn`` up for deleting many key rows (``EngineImpl.tune_for_deletes``), that setting committed;
    the caller discards the connection afterwards, so that the next user of the pool does not inherit it."""
    impl_of(conn).tune_for_deletes(conn)
    conn.commit()


def delete_batched(
    engine: Engine,
    order: ColumnElement[object],
    where: ColumnElement[bool],
    batch_size: int,
    pause: Callable[[float], None] = time.sleep,
    walked: ColumnElement[bool] | None = None,
    tally: Tally | None = None,
) -> tuple[int, int]:
    """Delete the rows ``where`` selects, ``batch_size`` per transaction walking ``order`` (a unique
    column within ``where``), or all in one statement with 0; returns (rows deleted, batches).

    A batch finds the value that ends the next ``batch_size`` rows and deletes the rows up to it: no
    ``LIMIT`` in a sub-select (MySQL refuses one) and no list of keys sent back to the server. Every
    delete repeats the selection, so a row that stopped matching since it was counted stays. ``walked``
    is the same selection written so that the engine walks ``order`` rather than an index of
    ``where``'s columns; the walk is bounded by the first and last ``order`` value ``where`` selects.
    Each committed batch is added to ``tally`` (not the one statement of a ``batch_size`` of 0).
    """
    table = order.table
    with engine.connect() as conn:
        try:
            tune(conn)
            if batch_size == 0:
                everything = delete(table).where(where)
                once = Tally()
                walk(conn, lambda _start: (checked_rowcount(conn.execute(everything).rowcount), None), once)
                return once.deleted, once.batches
            return _bounded_walk(conn, table, order, where, batch_size, pause, walked, tally or Tally())
        finally:
            conn.invalidate()  # the tuned session must not reach the next user of the pool


def _bounded_walk(
    conn: Connection,
    table: Any,
    order: ColumnElement[object],
    where: ColumnElement[bool],
    batch_size: int,
    pause: Callable[[float], None],
    walked: ColumnElement[bool] | None,
    tally: Tally,
) -> tuple[int, int]:
    """The batches of ``delete_batched``, from the first to the last ``order`` value ``where`` selects when
    the walk starts."""
    with conn.begin():
        first, last = conn.execute(select(func.min(order), func.max(order)).where(where)).one()
    if first is None:
        return 0, 0
    bounded_walk = and_(walked if walked is not None else where, order >= first, order <= last)

    def step(after: Any) -> tuple[int, Any]:
        rest = bounded_walk if after is None else and_(bounded_walk, order > after)
        upper = conn.execute(select(order).where(rest).order_by(order).limit(1).offset(batch_size - 1)).scalar()
        bounded = rest if upper is None else and_(rest, order <= upper)
        return checked_rowcount(conn.execute(delete(table).where(bounded)).rowcount), upper

    before = (tally.deleted, tally.batches)
    walk(conn, step, tally, hooks=Hooks(pause=pause))
    return tally.deleted - before[0], tally.batches - before[1]


def walk_backed_up(
    conn: Connection,
    rows: Selection,
    batch_size: int,
    pause: Callable[[float], None],
    tally: Tally,
    backup: BackupFile,
) -> int:
    """The batches of a backed-up delete of ``rows``, each its own transaction (``backed_up_batch``), walking
    ``rows.order``; each committed batch is added to ``tally``. Returns the rows deleted."""
    before = tally.deleted

    def step(after: Any) -> tuple[int, Any]:
        return backed_up_batch(conn, rows, backup, batch_size, after)

    walk(conn, step, tally, own_transaction=False, hooks=Hooks(pause=pause))
    return tally.deleted - before
