"""Garbage collection of expired keys: task rows (and, on Airflow 3.4's layout, dag-run rows) whose
``expires_at`` is set and has passed, deleted in one statement or in batches walking the primary key
(``ops.batches``), each batch one transaction, stopped between batches when asked.

Asset rows and rows without an expiry (``NEVER_EXPIRE``, or written with ``default_retention_days = 0``)
are never touched. What is deleted is ``cleaned()`` (``ops.clean_selection``, shared with the dry run);
each delete re-checks the condition on the rows it removes: a key a writer refreshed after it was
selected survives. How each engine runs a batch is ``EngineImpl.clean_batch_step``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, delete
from sqlalchemy.engine import Connection, Engine

from statestore_cli.db.database import translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.errors import EXIT_OK, PARAMETER, BackendError, Note, StopReason, failed_midway
from statestore_cli.model.entries import Timeouts
from statestore_cli.ops.batches import Hooks, Step, Tally, checked_batch_size, checked_rowcount, walk
from statestore_cli.ops.clean_selection import (
    ExpiredRow,
    by_count,
    cleaned,
    count_expired,
    expired,
    expiring_tables,
    iter_expired,
    spared_by_state,
    spares,
)

if TYPE_CHECKING:  # --backup's modules are imported only by a clean that writes a backup
    from statestore_cli.ops.backup_file import BackupFile

# What other modules took from here before the selection had a module of its own.
__all__ = [
    "CleanControl",
    "CleanReport",
    "ExpiredRow",
    "by_count",
    "cleaned",
    "count_expired",
    "delete_expired",
    "expired",
    "expiring_tables",
    "iter_expired",
    "prepare_session",
    "spared_by_state",
    "spares",
]


@dataclass(frozen=True)
class CleanReport:
    deleted: int
    batches: int
    batch_size: int
    cutoff: datetime
    notes: tuple[Note, ...] = ()
    elapsed: float = 0.0
    stopped: StopReason | None = None  # why the clean stopped before it was done
    older_than: timedelta = timedelta(0)  # the grace window: ``cutoff`` is this long before the clean started
    # rows deleted per store cleaned, in order: "task", then "dag_run" where the layout has it (0: not reached)
    deleted_by_store: dict[str, int] = field(default_factory=dict)
    # expired task keys kept since their task instance has not finished, by its state ("no_status": not set yet);
    # None where nothing was spared by rule: a standalone store, --include-unfinished, or a clean stopped early
    spared: dict[str, int] | None = None
    # the requests made through Airflow's REST API (``--api-url``), where the clean went that way
    api_requests: int | None = None

    @property
    def spared_unfinished(self) -> int:
        return sum((self.spared or {}).values())

    @property
    def rows_per_second(self) -> float:
        return self.deleted / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """0 when the clean ran to its end, else the stop reason's code (an ``Outcome``)."""
        return EXIT_OK if self.stopped is None else self.stopped.exit_code


@dataclass(frozen=True)
class CleanControl:
    """How a clean runs: a statement timeout, a lock against a second clean, and when to stop early.

    ``should_stop`` is asked before every batch after the first and returns a reason to stop (or None);
    ``deadline`` (a ``time.monotonic()`` value) stops the clean once passed; ``on_progress`` hears the
    number of rows deleted so far after every batch; ``on_connected`` hears that the clean's session
    is open and prepared (the CLI stops honouring signals at once from then on, and stops between batches);
    ``on_store`` hears each store's name before its first batch (what ``on_progress`` hears counts on).
    """

    timeouts: Timeouts = field(default_factory=Timeouts)
    exclusive: bool = False
    deadline: float | None = None
    should_stop: Callable[[], StopReason | None] | None = None
    on_progress: Callable[[int], None] | None = None
    on_connected: Callable[[], None] | None = None  # the session is ready: deleting starts now
    on_store: Callable[[str], None] | None = None  # a store's walk starts ("task", "dag_run"): its rows follow

    def stop_reason(self) -> StopReason | None:
        reason = self.should_stop() if self.should_stop else None
        if reason is None and self.deadline is not None and time.monotonic() >= self.deadline:
            return StopReason.MAX_RUNTIME
        return reason


def prepare_session(conn: Connection, timeouts: Timeouts) -> tuple[Note, ...]:
    """Tune the clean's session for deleting and set its statement timeout (its lock timeout is the
    engine's); returns a note when the engine has no statement timeout. On PostgreSQL nothing is set on
    the session: the statement timeout starts each transaction (each batch) with the engine's lock timeout
    in one statement, and ends with it, so a pooler's server connection keeps none of it."""
    impl = impl_of(conn)
    impl.tune_for_deletes(conn)
    statement = timeouts.statement_seconds
    why = impl.set_statement_timeout(conn, statement) if statement is not None else None
    conn.commit()
    return () if why is None else (Note(f"{why}; {PARAMETER} was not applied", parameter="statement_seconds"),)


def _batch_step(
    conn: Connection,
    table: Table,
    now: datetime,
    batch_size: int,
    backup: BackupFile | None = None,
    store: str = "",
    spare: bool = True,
) -> Step:
    """The function that runs one batch of ``table`` starting after a given id (0: the first), in the
    walk's transaction, or (with ``backup``) in one of its own, its lines synced before it commits."""
    where = cleaned(conn, table, now, spare, per_batch=batch_size > 0 or backup is not None)
    if backup is not None:
        from statestore_cli.ops.backup import backed_up_batch
        from statestore_cli.ops.backup_rows import dag_run_rows, task_rows

        rows = task_rows if store == "task" else dag_run_rows
        selection = rows(table, where)

        def backed_up(after: int) -> tuple[int, Any]:
            return backed_up_batch(conn, selection, backup, batch_size, after or None)

        return backed_up
    if batch_size == 0:
        everything = delete(table).where(impl_of(conn).in_rowid_order(table, where))
        return lambda _after: (checked_rowcount(conn.execute(everything).rowcount), None)
    run = impl_of(conn).clean_batch_step(conn, table, now, where, expired(table, now), batch_size, spare)

    def step(after: int) -> tuple[int, Any]:
        count, following = run(after)
        return checked_rowcount(count), following

    return step


def delete_expired(
    engine: Engine,
    now: datetime,
    batch_size: int,
    control: CleanControl | None = None,
    backup: BackupFile | None = None,
    spare: bool = True,
) -> CleanReport:
    """Delete what ``iter_expired(now, spare)`` lists: in one statement, or ``batch_size`` rows per commit.
    With ``backup`` every row deleted is first written to it (see ``statestore_cli.ops.backup``): each batch's
    lines are on disk before the batch commits. A clean that ran to its end counts what it spared."""
    checked_batch_size(batch_size)
    control = control or CleanControl()
    hooks = Hooks(progress=control.on_progress, stop=control.stop_reason)
    started = time.monotonic()
    tally = Tally()
    stopped: StopReason | None = None
    with translate_errors(engine), _clean_session(engine, control) as (conn, notes):
        tables = expiring_tables(conn)
        conn.commit()  # reading the layout may have begun a transaction; every batch is one of its own
        if backup is not None:
            backup.start()  # connected, the lock held: the file exists before anything is deleted
        by_store = dict.fromkeys((store for store, _ in tables), 0)
        for store, table in tables:
            if control.on_store:
                control.on_store(store)
            store_started = tally.deleted
            step = _batch_step(conn, table, now, batch_size, backup, store, spare)
            try:
                with translate_errors(engine):
                    stopped = walk(conn, step, tally, 0, own_transaction=backup is None, hooks=hooks)
            except BackendError as exc:
                from statestore_cli.ops.backup_file import with_backup

                midway = failed_midway(exc, "clean", tally.deleted, tally.batches, kind="expired ")
                raise with_backup(midway, backup) from None
            by_store[store] = tally.deleted - store_started
            if stopped:
                break
        spared = spared_by_state(conn, now) if spare and stopped is None else None
        conn.rollback()  # the count's transaction, if it began one
    elapsed = time.monotonic() - started
    return CleanReport(
        tally.deleted, tally.batches, batch_size, now, notes, elapsed, stopped, deleted_by_store=by_store, spared=spared
    )


@contextmanager
def _clean_session(engine: Engine, control: CleanControl) -> Iterator[tuple[Connection, tuple[Note, ...]]]:
    """A connection of its own for one clean: tuned, timed out and locked as asked, then discarded."""
    with engine.connect() as conn:
        try:
            notes = prepare_session(conn, control.timeouts)
            with impl_of(conn).exclusive_clean(conn) if control.exclusive else nullcontext():
                if control.on_connected:
                    control.on_connected()
                yield conn, notes
        finally:
            conn.invalidate()  # its settings (timeouts, SQLite pragmas) must not reach the next user of the pool
