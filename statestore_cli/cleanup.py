"""Garbage collection of expired task keys (SPEC section 4).

The dry run and the real run share ``expired()``, evaluated against one ``now`` fixed when the
run starts, so what a dry run lists is exactly what a real run at the same instant deletes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement, Delete

from statestore_cli.database import translate_errors
from statestore_cli.errors import BackendError, InvalidInputError
from statestore_cli.schema import task_state_store as _task


@dataclass(frozen=True)
class ExpiredRow:
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    key: str
    expires_at: datetime


@dataclass(frozen=True)
class CleanReport:
    deleted: int
    batches: int
    batch_size: int
    cutoff: datetime


def expired(now: datetime) -> ColumnElement[bool]:
    """The one selection both runs use: task rows with a non-NULL expiry before ``now``."""
    return and_(_task.c.expires_at.is_not(None), _task.c.expires_at < now)


def iter_expired(engine: Engine, now: datetime) -> Iterator[ExpiredRow]:
    """What a clean at ``now`` deletes, ordered by dag, run, task, map index and key; streamed."""
    cols = (_task.c.dag_id, _task.c.run_id, _task.c.task_id, _task.c.map_index, _task.c.key)
    query = select(*cols, _task.c.expires_at).where(expired(now)).order_by(*cols)
    with translate_errors(engine), engine.connect() as conn:
        for row in conn.execution_options(yield_per=2000).execute(query):
            yield ExpiredRow(*row)


def _batch_statement(conn: Connection, now: datetime, batch_size: int) -> Delete:
    if conn.dialect.name in ("mysql", "mariadb"):
        # MySQL refuses LIMIT in an IN sub-select, but has DELETE ... LIMIT.
        return delete(_task).where(expired(now)).with_dialect_options(mysql_limit=batch_size)
    ids = select(_task.c.id).where(expired(now)).limit(batch_size).scalar_subquery()
    return delete(_task).where(_task.c.id.in_(ids))


def delete_expired(engine: Engine, now: datetime, batch_size: int) -> CleanReport:
    """Delete what ``iter_expired(now)`` lists: in one statement, or ``batch_size`` rows per commit."""
    if batch_size < 0:
        raise InvalidInputError(f"batch size must be 0 (one statement) or a positive number, got {batch_size}")
    deleted = batches = 0
    with translate_errors(engine):
        while True:
            with engine.begin() as conn:
                stmt = delete(_task).where(expired(now)) if batch_size == 0 else _batch_statement(conn, now, batch_size)
                count = conn.execute(stmt).rowcount
            if count is None or count < 0:
                raise BackendError("the database did not report how many rows the clean deleted")
            deleted += count
            batches += 1 if count else 0
            if batch_size == 0 or count < batch_size:
                break
    return CleanReport(deleted=deleted, batches=batches, batch_size=batch_size, cutoff=now)
