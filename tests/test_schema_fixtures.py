"""The Airflow schema fixtures are what tests/fixtures/README.md says they are.

Only the fixtures are checked here, not ``statestore``: for each engine the 3.3.2 schema is loaded into a
throwaway database (SQLite: the files themselves, read-only), the hand-written 3.4 DDL steps are applied on
top, and the tables, columns, unique keys and alembic revision are compared with the README's account.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_schema import (
    AIRFLOW_STEPS,
    BETWEEN,
    FILE_ENGINE,
    FIXTURES,
    HEAD_34,
    HEAD_332,
    SQLITE_FIXTURES,
    STEP_FILE,
    load_airflow_schema,
    throwaway_airflow_database,
)
from servers import engine_of
from sqlalchemy import inspect

SQLITE_FILES = SQLITE_FIXTURES
STEPS = AIRFLOW_STEPS  # the DDL files applied on the 3.3.2 schema
ZERO_HEX = "0" * 32
NIL_UUID = "00000000-0000-0000-0000-000000000000"

DAG_RUN_STATE_STORE = ["id", "dag_run_id", "key", "dag_id", "run_id", "value", "updated_at", "expires_at"]
ASSET_ATTRIBUTION = [
    "last_updated_by_task_instance_id",
    "last_updated_by_region_id",
    "last_updated_by_region_index",
    "last_updated_by_try_number",
]


def expected(revision: str) -> dict[str, object]:
    """The README's account of the layout at ``revision``."""
    index = "region_index" if revision == HEAD_34 else "map_index"
    region = [] if revision == HEAD_332 else ["region_id"]
    return {
        "task_state_store_uq": ["dag_run_id", "task_id", *region, index, "key"],
        "task_state_store_columns": {"region_id", index} if region else {index},
        "task_instance_columns": {"region_id", index} if region else {index},
        "dynamic_region": revision != HEAD_332,
        "dag_run_state_store": revision == HEAD_34,
        "asset_attribution": revision == HEAD_34,
    }


def check_layout(url: str, revision: str, *, revision_row: bool = True) -> None:
    want = expected(revision)
    engine = engine_of(url)
    try:
        insp = inspect(engine)
        tables = set(insp.get_table_names())
        assert {"task_state_store", "asset_state_store", "task_instance", "dag_run"} <= tables
        assert ("dynamic_region" in tables) is want["dynamic_region"]
        assert ("dag_run_state_store" in tables) is want["dag_run_state_store"]

        uniques = {u["name"]: u["column_names"] for u in insp.get_unique_constraints("task_state_store")}
        assert uniques == {"task_state_store_uq": want["task_state_store_uq"]}
        columns = {c["name"]: c for c in insp.get_columns("task_state_store")}
        assert {"region_id", "map_index", "region_index"} & set(columns) == want["task_state_store_columns"]
        ti_columns = {c["name"]: c for c in insp.get_columns("task_instance")}
        assert {"region_id", "map_index", "region_index"} & set(ti_columns) == want["task_instance_columns"]
        for table_columns in (columns, ti_columns):
            if "region_id" in table_columns:
                region_id = table_columns["region_id"]
                assert not region_id["nullable"]
                assert ZERO_HEX in str(region_id["default"]) or NIL_UUID in str(region_id["default"])

        asset_columns = [c["name"] for c in insp.get_columns("asset_state_store")]
        assert (asset_columns[-4:] == ASSET_ATTRIBUTION) is want["asset_attribution"]
        assert "last_updated_by_map_index" in asset_columns  # 3.4 keeps it

        if want["dag_run_state_store"]:
            drss = insp.get_columns("dag_run_state_store")
            assert [c["name"] for c in drss] == DAG_RUN_STATE_STORE
            assert [c["name"] for c in drss if c["nullable"]] == ["expires_at"]
            uniques = {u["name"]: u["column_names"] for u in insp.get_unique_constraints("dag_run_state_store")}
            assert uniques == {"dag_run_state_store_uq": ["dag_run_id", "key"]}
            indexes = {i["name"]: i["column_names"] for i in insp.get_indexes("dag_run_state_store")}
            assert indexes["idx_dag_run_state_store_lookup"] == ["dag_id", "run_id"]
            assert indexes["idx_dag_run_state_store_expires_at"] == ["expires_at"]
            fks = insp.get_foreign_keys("dag_run_state_store")
            assert [(f["name"], f["referred_table"], f["options"].get("ondelete")) for f in fks] == [
                ("dag_run_state_store_dag_run_fkey", "dag_run", "CASCADE")
            ]
        if want["dynamic_region"]:
            uniques = {u["name"]: u["column_names"] for u in insp.get_unique_constraints("dynamic_region")}
            slot = {"dynamic_region_slot_key_uq": ["slot_key"]} if revision == HEAD_34 else {}
            assert uniques == {"dynamic_region_forked_from_region_id_uq": ["forked_from_region_id"], **slot}
        with engine.connect() as conn:
            rows = [row[0] for row in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
        assert rows == ([revision] if revision_row else [])
    finally:
        engine.dispose()


# -- SQLite: the committed files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("revision", [HEAD_332, BETWEEN, HEAD_34])
def test_sqlite_fixture_layout(revision):
    path = FIXTURES / SQLITE_FILES[revision]
    check_layout(f"sqlite:///file:{path}?mode=ro&uri=true", revision)


def schema(path: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def test_sqlite_fixtures_are_rebuilt_from_the_ddl_steps(tmp_path):
    """make_airflow_3_4.py, run again, gives the committed files' schema exactly."""
    spec = importlib.util.spec_from_file_location("make_airflow_3_4", FIXTURES / "make_airflow_3_4.py")
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    for name, steps in maker.STEPS.items():
        maker.build(tmp_path / name, steps)
        assert schema(tmp_path / name) == schema(FIXTURES / name)


def test_sqlite_rebuilt_tables_keep_their_rows(tmp_path):
    """The between step rebuilds task_state_store; a row written under 3.3.2 survives with the sentinel region."""
    db = tmp_path / "rows.sqlite"
    db.write_bytes((FIXTURES / SQLITE_FILES[HEAD_332]).read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES (1, 'etl', 'r1', 'manual', '2026-11-30 00:00:00.000000', 0, 'not_started')"
        )
        conn.execute(
            'INSERT INTO task_state_store (dag_run_id, task_id, map_index, "key", dag_id, run_id, value, updated_at) '
            "VALUES (1, 't', 3, 'k', 'etl', 'r1', '1', '2026-11-30 00:00:00.000000')"
        )
        for step in STEPS[HEAD_34]:
            conn.executescript((FIXTURES / STEP_FILE[step].format(engine=FILE_ENGINE["sqlite"])).read_text())
        rows = conn.execute('SELECT task_id, region_id, region_index, "key", value FROM task_state_store').fetchall()
    assert rows == [("t", ZERO_HEX, 3, "k", "1")]


# -- PostgreSQL and MariaDB: the dumps and DDL steps loaded into throwaway databases --------------------------------


@pytest.fixture
def server_database(request) -> Iterator[tuple[str, str]]:
    with throwaway_airflow_database(request.param) as url:
        yield request.param, url


@pytest.mark.parametrize("server_database", ["postgresql", "mariadb"], indirect=True)
@pytest.mark.parametrize("revision", [HEAD_332, BETWEEN, HEAD_34])
def test_server_fixture_layout(server_database, revision):
    engine_name, url = server_database
    load_airflow_schema(engine_name, url, revision)
    check_layout(url, revision, revision_row=revision != HEAD_332)  # the 3.3.2 dumps hold no rows


@pytest.mark.parametrize("server_database", ["mariadb"], indirect=True)
def test_mariadb_dump_is_airflows_own_332_schema(server_database):
    """The dump is a whole 3.3.2 database: the state store tables and their parents, with Airflow's MySQL types."""
    _, url = server_database
    load_airflow_schema("mariadb", url, HEAD_332)
    engine = engine_of(url)
    try:
        insp = inspect(engine)
        assert set(insp.get_table_names()) == SQLITE_332_TABLES  # the same 58 tables as Airflow's SQLite file
        columns = {c["name"]: c for c in insp.get_columns("task_state_store")}
        assert str(columns["value"]["type"]) == "MEDIUMTEXT"
        assert columns["key"]["type"].collation == "utf8mb3_bin"
        assert str(columns["updated_at"]["type"]) == "TIMESTAMP"
    finally:
        engine.dispose()


def _sqlite_tables(path: Path) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return {
            n
            for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not n.startswith("sqlite_")
        }


SQLITE_332_TABLES = _sqlite_tables(FIXTURES / SQLITE_FILES[HEAD_332])
