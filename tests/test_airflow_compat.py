"""Compatibility with Airflow 3.3.2's metadata database, checked against real files.

Our tables, columns, constraints and indexes are Airflow 3.3.2's (migration ``fde9ed84d07b``), and on
SQLite timestamps are written in the text form Airflow reads and compares. ``tests/fixtures`` holds
databases made by Airflow itself (``airflow db migrate``; its README says how each was made); the
schema we create is compared with theirs statement by statement, and rows we write into a copy of
Airflow's database are checked in that text form.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_running import run_cli
from servers import throwaway_database
from sqlalchemy import create_engine
from stores import sql

FIXTURES = Path(__file__).resolve().parent / "fixtures"
AIRFLOW_332 = FIXTURES / "airflow-3.3.2.sqlite"
AIRFLOW_320 = FIXTURES / "airflow-3.2.0.sqlite"
TIMESTAMP_TEXT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}")


def fixture(path: Path, tmp_path: Path) -> Path:
    """A writable copy of one of the repository's Airflow databases, in tmp_path: the original is never touched."""
    copy = tmp_path / path.name
    shutil.copyfile(path, copy)
    copy.chmod(0o644)
    return copy


def ddl(path: Path, names: tuple[str, ...]) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            f"SELECT name, sql FROM sqlite_master WHERE tbl_name IN ({','.join('?' * len(names))}) AND sql IS NOT NULL",
            names,
        ).fetchall()
    return {name: " ".join(sql.split()) for name, sql in rows}


STATE_TABLES = ("task_state_store", "asset_state_store")


def test_state_store_schema_is_airflows_statement_for_statement(db_url, tmp_path):
    airflow = ddl(fixture(AIRFLOW_332, tmp_path), STATE_TABLES)
    ours = ddl(Path(db_url.removeprefix("sqlite:///")), STATE_TABLES)
    assert set(airflow) == {
        "task_state_store",
        "asset_state_store",
        "idx_task_state_store_expires_at",
        "idx_task_state_store_lookup",
    }
    assert ours == airflow


def test_asset_ids_are_never_reused_on_sqlite(db_url):
    """``asset.id`` is AUTOINCREMENT on SQLite, as Airflow makes it: the id of a deleted asset is not given again
    (a key of the old asset must never become one of a new asset)."""
    path = db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO asset (name, uri) VALUES ('a', 's3://a')")
        conn.execute("DELETE FROM asset")
        conn.execute("INSERT INTO asset (name, uri) VALUES ('b', 's3://b')")
        assert conn.execute("SELECT id FROM asset").fetchall() == [(2,)]
        [(created,)] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'asset'").fetchall()
    assert "AUTOINCREMENT" in created


def test_the_schema_loads_no_sqlite_dialect():
    """The tables are declared without importing SQLAlchemy's SQLite dialect: a command on PostgreSQL or MySQL
    never loads it (SQLite's option is given as the table is created)."""
    probe = "import sys, statestore_cli.db.schema; print('sqlalchemy.dialects.sqlite' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout == "False\n"


def test_schema_has_airflow_3_3_2_names_and_types(db_url):
    """Independently of any fixture: Airflow 3.3.2's columns, types, defaults, indexes and keys, written out."""
    path = db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        columns = {row[1]: (row[2], row[3], row[4]) for row in conn.execute("PRAGMA table_info(task_state_store)")}
        indexes = {row[1]: row[2] for row in conn.execute("PRAGMA index_list(task_state_store)")}
        fks = conn.execute("PRAGMA foreign_key_list(task_state_store)").fetchall()
        asset_pk = [r[1] for r in conn.execute("PRAGMA table_info(asset_state_store)") if r[5]]
    assert columns == {
        "id": ("INTEGER", 1, None),
        "dag_run_id": ("INTEGER", 1, None),
        "task_id": ("VARCHAR(250)", 1, None),
        "map_index": ("INTEGER", 1, "'-1'"),
        "key": ("VARCHAR(512)", 1, None),
        "dag_id": ("VARCHAR(250)", 1, None),
        "run_id": ("VARCHAR(250)", 1, None),
        "value": ("TEXT", 1, None),
        "updated_at": ("TIMESTAMP", 1, None),
        "expires_at": ("TIMESTAMP", 0, None),
    }
    assert {"idx_task_state_store_lookup", "idx_task_state_store_expires_at"} <= set(indexes)
    assert [(fk[2], fk[3], fk[4], fk[6]) for fk in fks] == [("dag_run", "dag_run_id", "id", "CASCADE")]
    assert asset_pk == ["asset_id", "key"]


def test_timestamps_are_stored_in_airflows_text_form(cli, db_url):
    cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k", "1", "--retention", "1d")
    cli("set", "--asset-name", "a", "k", "1")
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        stamps = conn.execute(
            "SELECT updated_at, expires_at FROM task_state_store "
            "UNION ALL SELECT updated_at, NULL FROM asset_state_store"
        ).fetchall()
    for updated, expires in stamps:
        assert TIMESTAMP_TEXT.fullmatch(updated), updated
        assert expires is None or TIMESTAMP_TEXT.fullmatch(expires), expires


def _add_dag_run(path: Path, dag_id: str, run_id: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES (?, ?, 'manual', '2026-11-01 00:00:00.000000', 0, 'not_started')",
            (dag_id, run_id),
        )


def test_airflow_database_mode(tmp_path):
    """Our tool on Airflow's own database: reads and cleans it, never invents runs or assets."""
    path = fixture(AIRFLOW_332, tmp_path)
    conn = f"sqlite:///{path}"

    def run(*args: str):
        return run_cli(*args, conn=conn)

    check = run("db", "check", "-o", "json")
    assert check.exit_code == 0, check.output
    doc = json.loads(check.stdout)
    assert (doc["ok"], doc["mode"], doc["alembic_revision"]) == (True, "airflow", "d2f4e1b3c5a7")
    assert run("db", "init").exit_code == 0  # idempotent: the tables are Airflow's and stay as they are

    task = ["--dag-id", "etl", "--run-id", "manual__1", "--task-id", "t"]
    refused = run("set", *task, "k", "1")
    assert refused.exit_code == 2
    assert "no dag run dag_id=etl run_id=manual__1 in this Airflow database" in refused.stderr
    refused = run("set", "--asset-name", "nope", "k", "1")
    assert refused.exit_code == 2 and "assets are created by Airflow" in refused.stderr
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM dag_run").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM asset").fetchone() == (0,)

    _add_dag_run(path, "etl", "manual__1")
    assert run("set", *task, "expired", '"x"', "--retention", "1s").exit_code == 0
    assert run("set", *task, "alive", '"y"', "--retention", "7d").exit_code == 0
    assert run("set", *task, "pinned", '"z"', "--retention", "never").exit_code == 0
    with sqlite3.connect(path) as db:
        db.execute("UPDATE task_state_store SET expires_at = '2020-01-01 00:00:00.000000' WHERE key = 'expired'")
    assert json.loads(run("get", *task, "alive").stdout) == "y"

    # Airflow compares expires_at as text against now in the same form: it would pick the same rows.
    now_text = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(path) as db:
        airflow_would_delete = {
            r[0]
            for r in db.execute(
                "SELECT key FROM task_state_store WHERE expires_at IS NOT NULL AND expires_at < ?", (now_text,)
            )
        }
    plan = json.loads(run("clean", "--dry-run", "-o", "json").stdout)
    assert {r["key"] for r in plan["rows"]} == airflow_would_delete == {"expired"}
    assert json.loads(run("clean", "-o", "json").stdout)["deleted"] == 1
    assert sorted(d["key"] for d in json.loads(run("list", "-o", "json").stdout)) == ["alive", "pinned"]


def test_airflow_3_2_database_without_state_store_is_not_altered(tmp_path):
    path = fixture(AIRFLOW_320, tmp_path)
    before = path.read_bytes()
    result = run_cli("db", "init", conn=f"sqlite:///{path}")
    assert result.exit_code == 3
    assert "is an Airflow metadata database (revision 1d6611b6ab7c) without the state store tables" in result.stderr
    assert "airflow db migrate" in result.stderr
    check = run_cli("db", "check", "-o", "json", conn=f"sqlite:///{path}")
    assert check.exit_code == 3
    doc = json.loads(check.stdout)
    assert doc["ok"] is False and doc["mode"] == "airflow"
    assert set(doc["tables_missing"]) == {"task_state_store", "asset_state_store"}
    assert (doc["airflow_version"], doc["task_keys"], doc["asset_keys"]) == ("3.2.0", None, None)
    assert check.stderr == (
        "statestore: error: this is an Airflow 3.2.0 metadata database (revision 1d6611b6ab7c) without the "
        "state store, which needs Airflow 3.3.0 or later: upgrade Airflow and run `airflow db migrate`\n"
    )
    assert path.read_bytes() == before


def test_db_check_names_the_airflow_release_and_counts_both_stores(tmp_path):
    path = fixture(AIRFLOW_332, tmp_path)
    conn = f"sqlite:///{path}"
    _add_dag_run(path, "etl", "manual__1")
    with sqlite3.connect(path) as db:
        db.execute(
            'INSERT INTO asset (name, uri, "group", extra, created_at, updated_at) '
            "VALUES ('orders', 's3://orders', 'asset', '{}', :t, :t)",
            {"t": "2026-11-01 00:00:00.000000"},
        )
        db.execute("INSERT INTO asset_active (name, uri) VALUES ('orders', 's3://orders')")
    task = ["--dag-id", "etl", "--run-id", "manual__1", "--task-id", "t"]
    for key, when in (
        ("old", "2020-01-01T00:00:00Z"),
        ("older", "2019-01-01T00:00:00Z"),
        ("new", "2099-01-01T00:00:00Z"),
    ):
        assert run_cli("set", *task, key, "1", "--expires-at", when, "--force", conn=conn).exit_code == 0
    assert run_cli("set", "--asset-name", "orders", "watermark", "1", conn=conn).exit_code == 0
    check = run_cli("db", "check", "-o", "json", conn=conn)
    assert check.exit_code == 0, check.output
    doc = json.loads(check.stdout)
    assert (doc["airflow_version"], doc["task_keys"], doc["task_keys_expired"], doc["asset_keys"]) == (
        "3.3.0",
        3,
        2,
        1,
    )
    plain = run_cli("db", "check", "-o", "plain", conn=conn).stdout.splitlines()
    assert plain[-6:] == [
        "airflow_version\t3.3.0",
        "task_keys\t3",
        "task_keys_expired\t2",
        "asset_keys\t1",
        "layout\t3.3",
        "revision_known\ttrue",
    ]


def test_db_check_on_a_standalone_store_has_no_airflow_fields(db_url):
    doc = json.loads(run_cli("db", "check", "-o", "json", conn=db_url).stdout)
    assert doc["mode"] == "standalone" and "airflow_version" not in doc and "task_keys" not in doc


AIRFLOW_332_PG = FIXTURES / "airflow-3.3.2-postgres-schema.sql"


@pytest.fixture
def airflow_postgres(tmp_path):
    """A PostgreSQL database holding Airflow 3.3.2's own schema (the pg_dump of a migrated database)."""
    lines = fixture(AIRFLOW_332_PG, tmp_path).read_text().splitlines()
    dump = "\n".join(line for line in lines if not line.startswith("\\"))  # psql meta-commands (\restrict)
    with throwaway_database("postgresql", "af") as url:
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql(dump)
            conn.exec_driver_sql("SELECT pg_catalog.set_config('search_path', 'public', false)")
            conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('d2f4e1b3c5a7')")
        engine.dispose()
        yield url


@pytest.mark.slow  # on the database servers
def test_airflow_postgres_database_is_read_and_cleaned_in_place(airflow_postgres):
    def run(*args: str):
        result = run_cli(*args, conn=airflow_postgres)
        assert result.exit_code == 0, result.output
        return result

    doc = json.loads(run("db", "check", "-o", "json").stdout)
    assert (doc["ok"], doc["mode"], doc["alembic_revision"]) == (True, "airflow", "d2f4e1b3c5a7")
    assert (doc["airflow_version"], doc["task_keys"], doc["task_keys_expired"], doc["asset_keys"]) == ("3.3.0", 0, 0, 0)
    sql(
        airflow_postgres,
        "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
        "VALUES ('etl', 'manual__1', 'manual', now(), 0, 'not_started')",
    )
    task = ["--dag-id", "etl", "--run-id", "manual__1", "--task-id", "t"]
    run("set", *task, "gone", '"x"', "--retention", "1s")
    run("set", *task, "kept", '{"job": 1}')
    sql(airflow_postgres, "UPDATE task_state_store SET expires_at = now() - interval '1 hour' WHERE key = 'gone'")
    types = dict(
        sql(
            airflow_postgres,
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'task_state_store'",
        )
    )
    assert types["expires_at"] == types["updated_at"] == "timestamp with time zone"
    plan = json.loads(run("clean", "--dry-run", "-o", "json").stdout)
    assert [r["key"] for r in plan["rows"]] == ["gone"]
    doc = json.loads(run("db", "check", "-o", "json").stdout)
    assert (doc["task_keys"], doc["task_keys_expired"], doc["asset_keys"]) == (2, 1, 0)
    assert json.loads(run("clean", "--batch-size", "10", "-o", "json").stdout)["deleted"] == 1
    assert json.loads(run("get", *task, "kept").stdout) == {"job": 1}
