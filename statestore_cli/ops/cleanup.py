"""Garbage collection of expired keys: task rows (and, on Airflow 3.4's layout, dag-run rows) whose
``expires_at`` is set and has passed.

Asset rows and rows without an expiry (``NEVER_EXPIRE``, or written with
``default_retention_days = 0``) are never touched.

The task keys of a task instance that has not finished (a retry waiting for its ``retry_delay`` finds
its earlier try's job id in them) are kept by default, on an Airflow database: ``cleaned()``.

The dry run and the real run share ``cleaned()``, evaluated against one cutoff fixed when the run
starts (its start, or ``--older-than`` before it), so what a dry run lists is exactly what a real run
at the same instant deletes. Each
delete re-checks the condition on the rows it removes: a key a writer refreshed after it was
selected survives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NamedTuple

from sqlalchemy import Integer, String, Table, and_, any_, bindparam, delete, func, null, select, text, type_coerce
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement, Executable, Select

from statestore_cli.db.database import describe_engine, retry_deadlocks, set_per_transaction, translate_errors
from statestore_cli.db.dialects import in_rowid_order
from statestore_cli.db.layout import FINISHED_STATES, layout_of
from statestore_cli.db.schema import qualified, store_schema
from statestore_cli.errors import (
    EXIT_OK,
    PARAMETER,
    BackendError,
    CleanRunningError,
    InvalidInputError,
    Note,
    StopReason,
    failed_midway,
)
from statestore_cli.model.entries import Timeouts
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops.backup import backed_up_batch
from statestore_cli.ops.backup_file import BackupFile, with_backup
from statestore_cli.ops.backup_rows import dag_run_rows, task_rows


class ExpiredRow(NamedTuple):
    """One row a clean deletes. A tuple, not a dataclass: dry runs stream hundreds of thousands.
    A dag-run key (``store`` "dag_run") has no task: ``task_id`` and ``map_index`` are None."""

    dag_id: str
    run_id: str
    task_id: str | None
    map_index: int | None
    key: str
    expires_at: str  # ISO 8601 in UTC, as datetime.isoformat() writes it
    store: str = "task"
    region_id: str | None = None  # a task key's region where the table has regions and it is not the nil one


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


def expired(table: Table, now: datetime) -> ColumnElement[bool]:
    """The one selection both runs use: rows of ``table`` with a non-NULL expiry before ``now``."""
    return and_(table.c.expires_at.is_not(None), table.c.expires_at < now)


def cleaned(
    conn: Connection, table: Table, now: datetime, spare: bool = True, per_batch: bool = False
) -> ColumnElement[bool]:
    """What a clean at ``now`` deletes from ``table``: its expired rows, except (with ``spare``) the task keys
    whose task instance has not finished. A task waiting for its retry (a ``retry_delay`` longer than the
    keys' retention) finds the job id its earlier try stored in them; a task key with no task instance row,
    and every key of a standalone store (no ``task_instance`` table), is deleted as expired. ``per_batch``:
    the condition goes into a statement run once per batch (``Layout.unfinished`` words it for that)."""
    kept = layout_of(conn).unfinished(table, conn.dialect.name, per_batch) if spare else None
    return expired(table, now) if kept is None else and_(expired(table, now), ~kept)


def spares(engine: Engine) -> bool:
    """Whether a clean of this database keeps the keys of unfinished task instances (it has task instances)."""
    with translate_errors(engine), engine.connect() as conn:
        return layout_of(conn).task_instance is not None


def by_count(spared: dict[str, int]) -> dict[str, int]:
    """States by how many keys they kept, most first (then by name)."""
    return dict(sorted(spared.items(), key=lambda item: (-item[1], item[0])))


def spared_by_state(conn: Connection, now: datetime) -> dict[str, int] | None:
    """The expired task keys a clean at ``now`` keeps for their unfinished task instances, by the task
    instance's state ("no_status" where it has none yet); None where the database has no task instances."""
    layout = layout_of(conn)
    if layout.task_instance is None:
        return None
    table = layout.task
    ti = layout.task_instances(conn.dialect.name)
    query = (
        select(ti.c.state, func.count())
        .select_from(table.join(ti, and_(*layout.task_instance_of(table, ti))))
        .where(expired(table, now), layout.unfinished_state(ti))
        .group_by(ti.c.state)
    )
    return by_count({_state_name(state): int(n) for state, n in conn.execute(query)})


def _state_name(state: str | None) -> str:
    return "no_status" if state is None else str(state)


def expiring_tables(conn: Connection) -> tuple[tuple[str, Table], ...]:
    """The stores a clean cleans, as (store, table): task keys, and dag-run keys where the layout has them."""
    layout = layout_of(conn)
    runs = (("dag_run", layout.dag_run_store),) if layout.dag_run_store is not None else ()
    return (("task", layout.task), *runs)


def iter_expired(
    engine: Engine, now: datetime, spare: bool = True, spared: dict[str, int] | None = None
) -> Iterator[ExpiredRow]:
    """What a clean at ``now`` deletes, ordered by dag, run, task, map index and key (task keys first,
    then dag-run keys); streamed. ``spare``: as ``cleaned``; with ``spared`` as well, what is kept is counted
    there by task instance state as the rows go by (as ``spared_by_state``)."""
    with translate_errors(engine), engine.connect() as conn:
        layout = layout_of(conn)
        for store, table in expiring_tables(conn):
            if spared is not None and spare and layout.unfinished(table, conn.dialect.name) is not None:
                yield from _expired_or_spared(conn, table, now, spared)
                continue
            task = store == "task"
            scope: list[Any] = [table.c.task_id, table.c.map_index.label("map_index")] if task else [null(), null()]
            cols = [table.c.dag_id, table.c.run_id, *scope, table.c.key]
            # The raw column value (SQLite text, or the driver's datetime) skips SQLAlchemy's per-row parsing.
            raw_expiry = type_coerce(table.c.expires_at, String)
            regions = task and "region_id" in table.c
            region = [table.c.region_id] if regions else []
            order = [*cols[:3], *region, *cols[3:]] if task else [table.c.dag_id, table.c.run_id, table.c.key]
            query = select(*cols, raw_expiry, *region).where(cleaned(conn, table, now, spare)).order_by(*order)
            # 1000 rows a fetch: larger fetches are no faster and only hold more rows at the peak.
            for chunk in conn.execution_options(yield_per=1000).execute(query).partitions():
                for row in chunk:
                    where = str(row[6]) if regions and row[6].int else None
                    yield ExpiredRow(*row[:5], iso_utc(row[5]), store, where)


def _expired_or_spared(conn: Connection, table: Table, now: datetime, spared: dict[str, int]) -> Iterator[ExpiredRow]:
    """The task keys of ``iter_expired`` in one pass over the expired rows, each with its task instance (an
    outer join: at most one, the task instance's key is unique); the keys ``cleaned`` keeps are counted in
    ``spared`` instead of listed. One lookup of the task instance per row, where the count and the listing
    apart took two."""
    layout = layout_of(conn)
    assert layout.task_instance is not None
    ti = layout.task_instances(conn.dialect.name)
    regions = "region_id" in table.c
    region = [table.c.region_id] if regions else []
    cols = [table.c.dag_id, table.c.run_id, table.c.task_id, table.c.map_index.label("map_index"), table.c.key]
    raw_expiry = type_coerce(table.c.expires_at, String)
    query = (
        select(*cols, raw_expiry, *region, ti.c.dag_id.label("ti_dag_id"), ti.c.state.label("ti_state"))
        .select_from(table.outerjoin(ti, and_(*layout.task_instance_of(table, ti))))
        .where(expired(table, now))
        .order_by(*cols[:3], *region, *cols[3:])
    )
    for chunk in conn.execution_options(yield_per=1000).execute(query).partitions():
        for row in chunk:
            state = row[-1]
            if row[-2] is not None and (state is None or state not in FINISHED_STATES):
                name = _state_name(state)
                spared[name] = spared.get(name, 0) + 1
                continue
            where = str(row[6]) if regions and row[6].int else None
            yield ExpiredRow(*row[:5], iso_utc(row[5]), "task", where)


def prepare_session(conn: Connection, timeouts: Timeouts) -> tuple[Note, ...]:
    """Tune the clean's session and set its statement timeout (its lock timeout is the engine's);
    returns a note when the engine has no statement timeout. On PostgreSQL nothing is set on the
    session: the statement timeout starts each transaction (each batch) with the engine's lock timeout
    in one statement, and ends with it, so a pooler's server connection keeps none of it."""
    dialect = conn.dialect.name
    statement = timeouts.statement_seconds
    notes: list[Note] = []
    if dialect == "postgresql":
        if statement is not None:
            set_per_transaction(conn, "statement_timeout", math.ceil(statement * 1000))
    elif dialect in ("mysql", "mariadb"):
        if statement is not None:
            if getattr(conn.dialect, "is_mariadb", False):
                conn.exec_driver_sql(f"SET SESSION max_statement_time = {statement:.3f}")
            else:
                notes.append(_no_statement_timeout("MySQL has no statement timeout for DELETE"))
    else:
        # Nothing references task_state_store, so deleting from it cannot break a foreign key; with
        # the checks on, SQLite would still look for references of every row it deletes.
        conn.exec_driver_sql("PRAGMA foreign_keys = OFF")
        # A 4 MiB page cache (the default is 2) keeps the index pages that consecutive batches share,
        # for a fixed, small amount of memory.
        conn.exec_driver_sql("PRAGMA cache_size = -4096")
        if statement is not None:
            notes.append(_no_statement_timeout("SQLite has no statement timeout"))
    conn.commit()
    return tuple(notes)


def _no_statement_timeout(why: str) -> Note:
    return Note(f"{why}; {PARAMETER} was not applied", parameter="statement_seconds")


class _Batch(NamedTuple):
    """What one batch did: rows deleted, and the id the next batch starts after (None: the clean is done)."""

    deleted: int
    after: int | None


def _checked_rowcount(count: int | None) -> int:
    if count is None or count < 0:
        raise BackendError("the database did not report how many rows the clean deleted")
    return int(count)


def _keyset_statement(
    dialect: str, table: Table, where: ColumnElement[bool], window: ColumnElement[bool], batch_size: int
) -> Executable:
    """One batch on SQLite or PostgreSQL, walking the primary key (``id > :after``): each batch reads the
    next stretch of the table, instead of re-scanning the expiry index past everything the earlier
    batches deleted, and the ids of one batch at most are ever held. ``window``: the rows a batch looks
    at (the expired ones), ``where``: those of them it deletes (less the keys a clean keeps)."""
    after = bindparam("after", type_=Integer)
    if dialect == "postgresql":
        # The batch takes the next ``batch_size`` expired rows and deletes those ``where`` allows; the
        # next batch starts after the window, kept rows or not. Asking the keep rule in the window's
        # select instead would make the planner join every expired key with the task instances for
        # each batch. Rows another cleaner holds are skipped, not waited for: two cleans share the
        # work. The ids go in as an array so the delete looks them up by primary key; only the count
        # and the window's last id come back.
        ids = select(table.c.id).where(table.c.id > after, window).order_by(table.c.id).limit(batch_size)
        taken = ids.with_for_update(skip_locked=True).cte("window")
        chosen = table.c.id == any_(func.array(select(taken.c.id).scalar_subquery()))
        gone = delete(table).where(chosen, where).returning(table.c.id).cte("gone")
        return select(
            select(func.count()).select_from(gone).scalar_subquery(),
            select(func.max(taken.c.id)).scalar_subquery(),
        )
    # One SQLite statement reads one snapshot and no other writer runs until it ends, so the ids the
    # subquery chose are still the rows ``where`` selects: asking it again would only repeat its work.
    ids = select(table.c.id).where(table.c.id > after, where).order_by(table.c.id).limit(batch_size)
    return delete(table).where(table.c.id.in_(ids.scalar_subquery())).returning(table.c.id)


def _keyset_batch(conn: Connection, stmt: Executable, after: int) -> _Batch:
    """Run one SQLite or PostgreSQL batch; the walk ends with the first batch that finds nothing."""
    result = conn.execute(stmt, {"after": after})
    if isinstance(stmt, Select):  # PostgreSQL: the rows deleted, and the last id of the window
        count, last = result.one()
        return _Batch(int(count), last)
    ids = result.scalars().all()
    return _Batch(len(ids), max(ids, default=None))


# MySQL and MariaDB refuse a LIMIT in an IN sub-select and have no (MySQL) or only a single-table
# (MariaDB) DELETE ... RETURNING, so a batch there is two statements in one transaction: find the id
# that ends the next ``batch_size`` expired rows, then delete the expired rows up to it (less the keys
# a clean keeps: the keep rule is asked of that range alone, not of every expired key the batch end
# walks past). Both walk the primary key from where the last batch ended. A ``DELETE ... LIMIT``
# instead re-scans the expiry index from its start every time, past every row earlier batches deleted:
# InnoDB keeps those as delete-marked records until purge removes them, and purge lags on busy servers
# and stops behind any long read transaction, so each batch got slower than the one before. FORCE
# INDEX keeps both statements on the primary key even where the optimizer's estimate for the expiry
# index is low; MySQL accepts an index hint in a DELETE only in its multi-table form.
def _mysql_range_delete(conn: Connection, table: Table, upper: bool, spare: bool) -> str:
    """``DELETE t FROM t FORCE INDEX (PRIMARY) WHERE`` the expired rows after ``:after`` (up to
    ``:upper``): the same condition as ``expired()``, written out, since SQLAlchemy renders no
    multi-table DELETE with a hint. Names come from ``table``, as the layout has them, the table's
    qualified with ``[database] sql_alchemy_schema`` when that is set. ``spare``: as ``cleaned``."""
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


def _mysql_statements(
    conn: Connection, table: Table, now: datetime, batch_size: int, spare: bool
) -> tuple[Executable, Executable, Executable]:
    """The batch end, the bounded delete, and the delete of the rest (when fewer than a batch remain)."""
    after = bindparam("after", type_=Integer)
    end = (
        select(table.c.id)
        .with_hint(table, "FORCE INDEX (PRIMARY)")
        .where(table.c.id > after, expired(table, now))
        .order_by(table.c.id)
        .limit(1)
        .offset(batch_size - 1)
    )
    now_param = bindparam("now", now, type_=table.c.expires_at.type)
    upper = bindparam("upper", type_=Integer)
    upto = text(_mysql_range_delete(conn, table, upper=True, spare=spare)).bindparams(now_param, upper)
    rest = text(_mysql_range_delete(conn, table, upper=False, spare=spare)).bindparams(now_param)
    return end, upto, rest


def _mysql_batch(conn: Connection, statements: tuple[Executable, Executable, Executable], after: int) -> _Batch:
    """Run one MySQL/MariaDB batch. Another clean may have taken the rows of this range already: the
    walk goes on past it, and ends with the batch that had fewer than ``batch_size`` rows left."""
    end, upto, rest = statements
    upper = conn.execute(end, {"after": after}).scalar()
    if upper is None:
        return _Batch(_checked_rowcount(conn.execute(rest, {"after": after}).rowcount), None)
    return _Batch(_checked_rowcount(conn.execute(upto, {"after": after, "upper": upper}).rowcount), upper)


def count_expired(engine: Engine, now: datetime, spare: bool = True) -> int:
    """How many rows a clean at ``now`` deletes, every store it cleans together (``spare``: as ``cleaned``)."""
    with translate_errors(engine), engine.connect() as conn:
        tables = expiring_tables(conn)
        counts = [select(func.count()).select_from(t).where(cleaned(conn, t, now, spare)) for _, t in tables]
        return sum(int(conn.execute(count).scalar_one()) for count in counts)


def _batch_runner(
    conn: Connection,
    table: Table,
    now: datetime,
    batch_size: int,
    backup: BackupFile | None = None,
    store: str = "",
    spare: bool = True,
) -> Callable[[int], _Batch]:
    """The function that runs one batch (its own transaction) of ``table`` starting after a given id."""
    dialect = conn.dialect.name
    where = cleaned(conn, table, now, spare, per_batch=batch_size > 0)
    if backup is not None:
        rows = task_rows if store == "task" else dag_run_rows
        selection = rows(table, where)

        def backed_up(after: int) -> _Batch:
            done = backed_up_batch(conn, selection, backup, batch_size, after or None, read_beside=True)
            return _Batch(done.deleted, done.after)

        return backed_up
    if batch_size == 0:
        everything = delete(table).where(in_rowid_order(dialect, table, where))
        return lambda _after: _Batch(_checked_rowcount(conn.execute(everything).rowcount), None)
    if dialect in ("mysql", "mariadb"):
        statements = _mysql_statements(conn, table, now, batch_size, spare)
        return lambda after: _mysql_batch(conn, statements, after)
    stmt = _keyset_statement(dialect, table, where, expired(table, now), batch_size)
    return lambda after: _keyset_batch(conn, stmt, after)


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
    if batch_size < 0:
        raise InvalidInputError(f"batch size must be 0 (one statement) or a positive number, got {batch_size}")
    control = control or CleanControl()
    started = time.monotonic()
    deleted = batches = 0
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
            store_started = deleted
            run = _batch_runner(conn, table, now, batch_size, backup, store, spare)
            after: int | None = 0  # the id the next batch starts after; None once the walk is done

            def one_batch(start: int, run: Callable[[int], _Batch] = run) -> _Batch:
                if backup is not None:  # its own transaction, the lines synced before the commit
                    return run(start)
                with conn.begin():
                    return run(start)

            while after is not None:
                batch_started = time.monotonic()
                try:
                    with translate_errors(engine):
                        batch = retry_deadlocks(partial(one_batch, after))
                except BackendError as exc:
                    raise with_backup(failed_midway(exc, "clean", deleted, batches, kind="expired "), backup) from None
                deleted += batch.deleted
                by_store[store] = deleted - store_started
                batches += 1 if batch.deleted else 0
                after = batch.after
                if control.on_progress:
                    control.on_progress(deleted)
                if after is None:
                    break
                stopped = control.stop_reason()
                if stopped:
                    break
                if engine.dialect.name == "sqlite":
                    # SQLite has one write lock and no queue: a writer waiting on it retries every 100 ms
                    # at most, and would almost never find it free between two batches. A pause of a
                    # quarter of the batch's time (100 ms at most) lets waiting writers in.
                    time.sleep(min(0.1, (time.monotonic() - batch_started) / 4))
            if stopped:
                break
        spared = spared_by_state(conn, now) if spare and stopped is None else None
        conn.rollback()  # the count's transaction, if it began one
    elapsed = time.monotonic() - started
    return CleanReport(
        deleted, batches, batch_size, now, notes, elapsed, stopped, deleted_by_store=by_store, spared=spared
    )


@contextmanager
def _clean_session(engine: Engine, control: CleanControl) -> Iterator[tuple[Connection, tuple[Note, ...]]]:
    """A connection of its own for one clean: tuned, timed out and locked as asked, then discarded."""
    with engine.connect() as conn:
        try:
            notes = prepare_session(conn, control.timeouts)
            with _exclusive(conn, control.exclusive):
                if control.on_connected:
                    control.on_connected()
                yield conn, notes
        finally:
            conn.invalidate()  # its settings (timeouts, SQLite pragmas) must not reach the next user of the pool


def _another_clean(where: str) -> str:
    return f"another {PARAMETER} clean is running on {where}"


# PostgreSQL's advisory locks are per database already: a fixed key ("statestore" in hex), and with a
# [database] sql_alchemy_schema one per schema, so two stores in two schemas of one database do not
# keep each other's exclusive clean waiting.
_PG_LOCK_KEY = 0x73746174657374


def _pg_lock_key(schema: str | None) -> int:
    import zlib

    return _PG_LOCK_KEY if schema is None else _PG_LOCK_KEY + 1 + zlib.crc32(schema.encode("utf-8"))


@contextmanager
def _exclusive(conn: Connection, wanted: bool) -> Iterator[None]:
    """Hold the one-clean-at-a-time lock of this database for the block, or fail at once."""
    if not wanted:
        yield
        return
    if conn.dialect.name == "sqlite":
        with _file_lock(conn.engine.url.database):
            yield
        return
    if conn.dialect.name == "postgresql":
        with _pg_transaction_lock(conn.engine, _pg_lock_key(store_schema(conn))):
            yield
        return
    # MySQL's named locks are server-wide: name the database (the schema, where one is configured)
    params = {"k": f"statestore-clean:{store_schema(conn) or conn.engine.url.database}"}
    got = bool(conn.execute(text("SELECT GET_LOCK(:k, 0)"), params).scalar())
    conn.commit()
    if not got:
        raise CleanRunningError(_another_clean(describe_engine(conn.engine)), parameter="exclusive")
    try:
        yield
    finally:
        conn.execute(text("SELECT RELEASE_LOCK(:k)"), params)
        conn.commit()


# Taken in the lock's transaction: the transaction then sits idle for the whole clean, and a server (or
# role, or database) setting of idle_in_transaction_session_timeout would end the session, and the
# lock with it, while the clean still runs. The key is written into the statement: a statement sent
# with parameters (psycopg's extended protocol) leaves its portal, and the snapshot the portal holds,
# open until the next statement, which would hold back vacuum for the whole clean.
_PG_TAKE_LOCK = "SELECT set_config('idle_in_transaction_session_timeout', '0', true), pg_try_advisory_xact_lock({key})"


@contextmanager
def _pg_transaction_lock(engine: Engine, key: int) -> Iterator[None]:
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
        got = bool(holder.exec_driver_sql(_PG_TAKE_LOCK.format(key=int(key))).one()[1])
        if not got:
            raise CleanRunningError(_another_clean(describe_engine(engine)), parameter="exclusive")
        yield
    finally:
        try:
            holder.rollback()
            holder.close()
        except sa_exc.DBAPIError:
            # The session is gone (a server restart, an administrator's pg_terminate_backend): so is the
            # lock, and the batches the clean committed stay committed; the clean's outcome stands.
            holder.invalidate()


@contextmanager
def _file_lock(path: str | None) -> Iterator[None]:
    # SQLite has no advisory lock; flock() on the database file is one, and Linux keeps it apart from
    # the fcntl() byte-range locks SQLite itself takes on the same file.
    import fcntl

    with open(path or "", "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CleanRunningError(_another_clean(str(path)), parameter="exclusive") from None
        yield
