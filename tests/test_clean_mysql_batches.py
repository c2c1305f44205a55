"""Batched cleans on MariaDB cost the same per batch however much earlier batches deleted.

InnoDB keeps deleted rows in every index as delete-marked records until its purge thread removes
them, and purge cannot remove any that an open read transaction may still see. A batch that re-scans
the expiry index from its start (``DELETE ... LIMIT n``) walks past all of them, so every batch costs
more than the one before. The clean walks the primary key from where the last batch ended instead.

The cost of a statement is MariaDB's own count of the index and data pages it touched
(``ANALYZE FORMAT=JSON``: ``r_engine_stats.pages_accessed``), measured while another session holds a
consistent snapshot open, as a backup or a long report does, so purge removes nothing meanwhile.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from servers import engine_of
from sqlalchemy import event, insert, text
from sqlalchemy.engine import Engine
from stores import isolated_database, sql

from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine
from statestore_cli.db.schema import dag_run, task_state_store
from statestore_cli.ops.cleanup import CleanControl, delete_expired
from statestore_cli.ops.commands import db_init

ROWS = 12_000  # every other row expired, as in a store cleaned too rarely
BATCH = 500  # 12 batches
NOW = datetime.now(UTC)


@pytest.fixture
def store(tmp_path) -> Iterator[str]:
    with isolated_database("mariadb", tmp_path) as url:
        db_init(Store.open(load_settings(conn_override=url), create_file=True))
        engine = engine_of(url)
        with engine.begin() as conn:
            conn.execute(
                insert(dag_run), [{"id": 1, "dag_id": "etl", "run_id": "scheduled__2026-11-30T00:00:00+00:00"}]
            )
            conn.execute(insert(task_state_store), [_row(i) for i in range(ROWS)])
            conn.exec_driver_sql("ANALYZE TABLE task_state_store")
        engine.dispose()
        yield url


def _row(i: int) -> dict[str, object]:
    expires = NOW - timedelta(days=1, seconds=i) if i % 2 else NOW + timedelta(days=30)
    return {
        "dag_run_id": 1,
        "dag_id": "etl",
        "run_id": "scheduled__2026-11-30T00:00:00+00:00",
        "task_id": f"task_{i % 40}",
        "map_index": -1,
        "key": f"job_id_{i:06}",
        "value": '{"job": "j-123"}',
        "updated_at": NOW - timedelta(days=2),
        "expires_at": expires,
    }


@contextmanager
def snapshot_held(url: str) -> Iterator[None]:
    """Another session with a consistent snapshot open: purge keeps every delete-marked record."""
    reader = engine_of(url).connect()
    try:
        reader.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        reader.exec_driver_sql("SELECT count(*) FROM task_state_store").scalar()
        yield
    finally:
        reader.close()
        reader.engine.dispose()


def _pages(plan: str) -> int:
    return sum(int(n) for n in re.findall(r'"pages_accessed":\s*(\d+)', plan))


def measure_statements(engine: Engine) -> list[tuple[str, int]]:
    """Every statement the engine sends to task_state_store runs first as ``ANALYZE FORMAT=JSON``.

    ANALYZE executes the statement, so the batch's rows are gone when the statement itself runs next
    and deletes nothing: the clean's own counts are off, but it walks the same batches and leaves the
    store as it would have.
    """
    seen: list[tuple[str, int]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def analyze_first(_conn, cursor, statement, parameters, _context, _many):
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb in ("SELECT", "DELETE") and "task_state_store" in statement:
            cursor.execute("ANALYZE FORMAT=JSON " + statement, parameters)
            seen.append((verb, _pages(cursor.fetchone()[0])))

    return seen


@pytest.mark.slow  # on the database servers
def test_every_batch_of_a_clean_touches_no_more_pages_than_the_first(store):
    engine = make_engine(store)
    statements = measure_statements(engine)
    batches: list[int] = []  # pages per batch; the clean reports progress after every batch

    def batch_done(_deleted: int) -> None:
        batches.append(sum(pages for _verb, pages in statements) - sum(batches))

    with snapshot_held(store):
        delete_expired(engine, NOW, BATCH, CleanControl(on_progress=batch_done))
    engine.dispose()

    assert max(batches[1:]) <= batches[0] * 1.2, f"pages per batch grew: {batches}"
    assert len(batches) > ROWS // 2 // BATCH - 1, batches
    assert sql(store, "SELECT count(*) FROM task_state_store WHERE expires_at < :now", now=NOW) == [(0,)]


@pytest.mark.slow  # on the database servers
def test_the_measurement_sees_a_batch_that_rescans_deleted_rows(store):
    """The counter can fail the test above: ``DELETE ... LIMIT`` batches grow under the same snapshot."""
    engine = engine_of(store)
    statement = text(
        f"ANALYZE FORMAT=JSON DELETE FROM task_state_store WHERE expires_at IS NOT NULL AND expires_at < :now "
        f"LIMIT {BATCH}"
    )
    pages = []
    with snapshot_held(store), engine.connect() as conn:
        conn.exec_driver_sql("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.commit()
        for _ in range(ROWS // 2 // BATCH):
            with conn.begin():
                pages.append(_pages(conn.execute(statement, {"now": NOW.replace(tzinfo=None)}).scalar_one()))
    engine.dispose()
    assert pages[-1] > 2 * pages[0], pages
