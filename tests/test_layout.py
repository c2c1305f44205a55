"""The state store layout read from each database (``statestore_cli.db.layout``): Airflow 3.3's, 3.4's, the one
between, and a revision this tool does not know, on copies of the SQLite fixtures (tests/fixtures/README.md)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_running import run_cli, run_statestore_process
from servers import engine_of

from statestore_cli.db.layout import layout_of

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = "scheduled__2026-11-30T00:00:00+00:00"
TASK = ["--dag-id", "etl_orders_daily", "--run-id", RUN, "--task-id", "submit_spark_job"]
REGION = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"  # a region's id as the CHAR(32) column stores it


def copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copyfile(FIXTURES / name, target)
    target.chmod(0o644)
    with sqlite3.connect(target) as db:
        db.execute(
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES ('etl_orders_daily', ?, 'scheduled', '2026-11-30 00:00:00.000000', 0, 'not_started')",
            (RUN,),
        )
    return target


def rows(path: Path, statement: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(statement).fetchall()


@pytest.mark.parametrize(
    "name, layout, revision, region, dag_run_store",
    [
        ("airflow-3.3.2.sqlite", "3.3", "d2f4e1b3c5a7", False, False),
        ("airflow-3.4-between.sqlite", "3.4-between", "54a27b6f9d01", True, False),
        ("airflow-3.4.sqlite", "3.4", "a5d7b9c13e40", True, True),
    ],
)
def test_the_layout_is_read_from_the_database(tmp_path, name, layout, revision, region, dag_run_store):
    engine = engine_of(f"sqlite:///{copy(name, tmp_path)}")
    try:
        with engine.connect() as conn:
            found = layout_of(conn)
    finally:
        engine.dispose()
    assert (found.name, found.revision, found.has_region) == (layout, revision, region)
    assert (found.dag_run_store is not None, found.problems) == (dag_run_store, ())
    identity = ("dag_run_id", "task_id", *(("region_id",) if region else ()), "map_index", "key")
    assert found.task_identity == identity


def test_db_check_names_the_layout_of_a_3_4_database(tmp_path):
    path = copy("airflow-3.4.sqlite", tmp_path)
    check = run_cli("db", "check", "-o", "json", conn=f"sqlite:///{path}")
    assert check.exit_code == 0, check.output
    doc = json.loads(check.stdout)
    assert (doc["ok"], doc["airflow_version"], doc["layout"], doc["revision_known"]) == (True, "3.4.0", "3.4", True)
    assert "problems" not in doc


@pytest.mark.slow
def test_the_fast_get_path_never_reads_a_key_of_a_region(tmp_path):
    """On the in-between layout (region_id beside map_index) a key stored in a region is not the key of the
    same task outside it: `get` as a real process (the fast path for SQLite) must not print it."""
    path = copy("airflow-3.4-between.sqlite", tmp_path)
    run_pk = rows(path, "SELECT id FROM dag_run")[0][0]
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, region_id, key, dag_id, run_id, value, "
            "updated_at) VALUES (?, 'submit_spark_job', -1, ?, 'spark_job_id', 'etl_orders_daily', ?, '\"in-region\"', "
            "'2026-11-30 00:00:00.000000')",
            (run_pk, REGION, RUN),
        )
    conn = f"sqlite:///{path}"
    result = run_statestore_process("--conn", conn, "get", *TASK, "spark_job_id")
    assert (result.exit_code, result.stdout) == (1, ""), result.stderr
    assert result.stderr == (
        "statestore: error: no key 'spark_job_id' for dag_id=etl_orders_daily run_id="
        f"{RUN} task_id=submit_spark_job map_index=-1\n"
    )
    assert run_cli("set", *TASK, "spark_job_id", '"outside"', conn=conn).exit_code == 0
    result = run_statestore_process("--conn", conn, "get", *TASK, "spark_job_id")
    assert (result.exit_code, result.stdout) == (0, '"outside"\n'), result.stderr
    stored = rows(path, "SELECT region_id, value FROM task_state_store ORDER BY region_id")
    assert stored == [("0" * 32, '"outside"'), (REGION, '"in-region"')]


def _unknown_revision(path: Path, *, keep_unique_key: bool) -> None:
    """A database at a revision this tool does not know: the 3.4 tables, but (unless ``keep_unique_key``)
    the task table's unique key gone, so writes have nothing to land on."""
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = 'ffff00001234'")
        if keep_unique_key:
            return
        (create,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'task_state_store'").fetchone()
        without = re.sub(r",\s*CONSTRAINT task_state_store_uq UNIQUE \([^)]*\)", "", create)
        assert without != create
        db.executescript(
            f"""
            ALTER TABLE task_state_store RENAME TO task_state_store_old;
            {without};
            INSERT INTO task_state_store SELECT * FROM task_state_store_old;
            DROP TABLE task_state_store_old;
            """
        )


def test_a_revision_not_known_with_the_3_4_tables_works_and_says_so(tmp_path):
    path = copy("airflow-3.4.sqlite", tmp_path)
    _unknown_revision(path, keep_unique_key=True)
    conn = f"sqlite:///{path}"
    doc = json.loads(run_cli("db", "check", "-o", "json", conn=conn).stdout)
    assert (doc["ok"], doc["airflow_version"], doc["layout"], doc["revision_known"]) == (True, None, "3.4", False)
    assert doc["problems"] == [] and doc["commands_not_working"] == []
    assert "region_index" in doc["found_columns"] and doc["dag_run_store"] is True
    assert run_cli("set", *TASK, "k", "1", conn=conn).exit_code == 0
    assert json.loads(run_cli("get", *TASK, "k", "-o", "json", conn=conn).stdout)["value"] == 1


def test_a_revision_not_known_without_a_unique_key_refuses_writes_and_reads_the_rest(tmp_path):
    path = copy("airflow-3.4.sqlite", tmp_path)
    _unknown_revision(path, keep_unique_key=False)
    conn = f"sqlite:///{path}"
    check = run_cli("db", "check", "-o", "json", conn=conn)
    assert check.exit_code == 3, check.output
    doc = json.loads(check.stdout)
    assert doc["ok"] is False and doc["revision_known"] is False
    problem = (
        "task_state_store has no unique key (dag_run_id, task_id, region_id, region_index, key) for writes to land on"
    )
    assert doc["problems"] == [problem]
    assert doc["commands_not_working"] == ["set", "import"]
    assert doc["commands_working"] == ["get", "list", "stats", "export", "clean", "delete", "clear"]
    refused = run_cli("set", *TASK, "k", "1", conn=conn)
    assert refused.exit_code == 3
    assert refused.stderr == (
        "statestore: error: cannot write task keys on this Airflow metadata database (revision ffff00001234, "
        f"a revision this tool does not know): {problem}; `statestore db check` shows what was found\n"
    )
    assert rows(path, "SELECT count(*) FROM task_state_store") == [(0,)]
    listed = run_cli("list", "-o", "json", conn=conn)
    assert (listed.exit_code, json.loads(listed.stdout)) == (0, [])
    assert run_cli("clean", "-o", "json", conn=conn).exit_code == 0


def test_dag_run_keys_do_not_load_the_worker_backend(tmp_path, monkeypatch):
    """A worker-side backend's hooks are for task and asset keys: dag-run keys are stored as they are, so
    the configured class is not even imported for them (a task key still needs it)."""
    path = copy("airflow-3.4.sqlite", tmp_path)
    conn = f"sqlite:///{path}"
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "no_such_module_here.RefBackend")
    scope = ["--dag-id", "etl_orders_daily", "--run-id", RUN]
    assert run_cli("set", *scope, "watermark", '"2026-11-30"', conn=conn).exit_code == 0
    got = run_cli("get", *scope, "watermark", conn=conn)
    assert (got.exit_code, got.stdout) == (0, '"2026-11-30"\n'), got.output
    assert rows(path, "SELECT key, value FROM dag_run_state_store") == [("watermark", '"2026-11-30"')]
    assert run_cli("set", *TASK, "k", "1", conn=conn).exit_code == 2  # the task key needs the backend
