"""How SQLite answers the rule that keeps the expired keys of unfinished task instances (what it selects
is tests/test_clean_unfinished.py's): it reads the unfinished task instances through Airflow's index on
``state``, instead of looking each expired key's task instance up in ``task_instance`` by its unique key and
reading the row for its state. A statement over the whole table (one-statement clean, counts) then finds
those task instances' keys through the task table's lookup index and checks each expired key's id against
that list; a batch probes an automatic index of the unfinished task instances instead. Both on a database
with no statistics (Airflow's own SQLite database has none)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow_schema import BETWEEN, HEAD_34, HEAD_332, airflow_database
from sqlalchemy import create_engine, func, select

from statestore_cli.db.layout import layout_of
from statestore_cli.ops.cleanup import cleaned

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def _plan(url: str, per_batch: bool) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            table = layout_of(conn).task
            counted = select(func.count()).select_from(table).where(cleaned(conn, table, NOW, per_batch=per_batch))
            compiled = counted.compile(engine)
            params = compiled.construct_params()
            values = [params[name] for name in compiled.positiontup or ()]
            values = [value.isoformat(" ") if isinstance(value, datetime) else value for value in values]
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", tuple(values)).all()
            return [str(row[3]) for row in rows]
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", [HEAD_332, BETWEEN, HEAD_34])
def test_a_batch_reads_the_unfinished_task_instances_through_the_state_index(revision: str, tmp_path: Path) -> None:
    with airflow_database("sqlite", revision, tmp_path) as url:
        plan = _plan(url, per_batch=True)
    assert any("USING INDEX ti_state " in step for step in plan), plan
    assert not any("sqlite_autoindex_task_instance" in step for step in plan), plan
    assert any("AUTOMATIC" in step for step in plan), plan


@pytest.mark.parametrize("revision", [HEAD_332, BETWEEN, HEAD_34])
def test_the_whole_table_checks_ids_against_the_unfinished_task_instances_keys(revision: str, tmp_path: Path) -> None:
    with airflow_database("sqlite", revision, tmp_path) as url:
        plan = _plan(url, per_batch=False)
    assert any("USING INDEX ti_state " in step for step in plan), plan
    assert not any("sqlite_autoindex_task_instance" in step for step in plan), plan
    lookup = [step for step in plan if step.startswith("SEARCH unfinished_key USING")]
    assert lookup and all("INDEX idx_task_state_store_lookup (dag_id=? AND run_id=?" in s for s in lookup), plan
    assert not any(step.startswith("SCAN unfinished_key") for step in plan), plan
    assert not any("AUTOMATIC" in step for step in plan), plan
