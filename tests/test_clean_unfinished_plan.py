"""How SQLite answers the rule that keeps the expired keys of unfinished task instances (what it selects
is tests/test_clean_unfinished.py's): it reads the unfinished task instances once, through Airflow's index
on ``state``, instead of looking each expired key's task instance up in ``task_instance`` by its unique key
and reading the row for its state."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow_schema import BETWEEN, HEAD_34, HEAD_332, airflow_database
from sqlalchemy import create_engine, func, select

from statestore_cli.db.layout import layout_of
from statestore_cli.ops.cleanup import cleaned

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def _plan(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            table = layout_of(conn).task
            compiled = select(func.count()).select_from(table).where(cleaned(conn, table, NOW)).compile(engine)
            params = compiled.construct_params()
            values = [params[name] for name in compiled.positiontup or ()]
            values = [value.isoformat(" ") if isinstance(value, datetime) else value for value in values]
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", tuple(values)).all()
            return [str(row[3]) for row in rows]
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", [HEAD_332, BETWEEN, HEAD_34])
def test_sqlite_reads_the_unfinished_task_instances_once_through_the_state_index(revision: str, tmp_path: Path) -> None:
    with airflow_database("sqlite", revision, tmp_path) as url:
        plan = _plan(url)
    assert any("USING INDEX ti_state " in step for step in plan), plan
    assert not any("sqlite_autoindex_task_instance" in step for step in plan), plan
    assert any("AUTOMATIC" in step for step in plan), plan
