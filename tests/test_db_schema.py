"""``[database] sql_alchemy_schema`` and the engine options Airflow shares (``sql_alchemy_connect_args``,
``sql_alchemy_engine_args``), on the real servers.

A store in a schema gets a database of its own (PostgreSQL; on MariaDB two: the URL's and the schema,
which is a database there), so what lands outside the schema is seen, and so is an ``alembic_version``
in the default schema. No ``search_path`` is set anywhere: the URL names only the database.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_running import ok, run_cli
from schema_stores import SCHEMA_ENV, STATE_TABLES, SchemaStore, schema_store, tables_in
from servers import require_server
from servers import server_statements as admin
from sqlalchemy import make_url
from stores import sql

from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings

TASK = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract")


@pytest.fixture(params=["postgresql", "mariadb"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[SchemaStore]:
    with schema_store(request.param) as made:
        monkeypatch.setenv(SCHEMA_ENV, made.schema)
        yield made


def test_db_init_creates_the_tables_in_the_schema(store):
    ok("db", "init", conn=store.url)
    assert tables_in(store, store.schema) == STATE_TABLES
    assert tables_in(store, store.default) & STATE_TABLES == set()
    check = json.loads(ok("db", "check", "-o", "json", conn=store.url))
    assert check["ok"] is True and check["mode"] == "standalone", check
    ok("db", "init", conn=store.url)  # idempotent: it sees its tables there


def test_every_command_works_in_the_schema(store, tmp_path):
    url = store.url
    ok("db", "init", conn=url)
    ok("set", *TASK, "job", '{"id": 42}', conn=url)
    ok("set", *TASK, "old", '"gone"', "--expires-at", "2000-01-01T00:00:00Z", "--force", conn=url)
    ok("set", "--asset-name", "orders", "--asset-uri", "s3://b/orders", "watermark", '"2026-01-01"', conn=url)
    assert ok("get", *TASK, "job", conn=url) == '{"id": 42}\n'
    listed = json.loads(ok("list", "-o", "json", conn=url))
    assert sorted(entry["key"] for entry in listed) == ["job", "old", "watermark"]
    stats = json.loads(ok("stats", "-o", "json", conn=url))
    assert (stats["task"]["rows"], stats["task"]["expiry"]["expired"], stats["asset"]["rows"]) == (2, 1, 1), stats
    export = tmp_path / "keys.jsonl"
    ok("export", "--file", str(export), conn=url)
    assert len(export.read_text().splitlines()) == 3

    assert json.loads(ok("clean", "--batch-size", "1", "-o", "json", conn=url))["deleted"] == 1
    ok("delete", *TASK, "job", conn=url)
    ok("clear", *TASK, "--yes", conn=url)
    ok("runs", "delete", "--dag-id", "etl", "--run-id", "manual__1", "--yes", conn=url)
    ok("assets", "delete", "--asset-name", "orders", "--yes", conn=url)
    assert json.loads(ok("list", "-o", "json", conn=url)) == []

    ok("import", str(export), conn=url)  # recreates the dag run and the asset (raw SQL) in the schema
    assert ok("get", *TASK, "job", conn=url) == '{"id": 42}\n'
    counted = sql(url, f"SELECT count(*) FROM {store.schema}.task_state_store")
    assert counted == [(2,)]
    assert tables_in(store, store.default) & STATE_TABLES == set()
    check = json.loads(ok("db", "check", "-o", "json", conn=url))
    assert check["ok"] is True, check


def test_an_empty_schema_option_means_the_default(store, monkeypatch):
    monkeypatch.setenv(SCHEMA_ENV, "  ")
    shown = json.loads(ok("config", "show", "-o", "json", conn=store.url))["options"]["database"]
    assert shown["sql_alchemy_schema"] == {"value": "", "source": f"environment variable {SCHEMA_ENV}"}
    ok("db", "init", conn=store.url)
    assert tables_in(store, store.default) >= STATE_TABLES
    assert tables_in(store, store.schema) == set()


def test_a_schema_that_does_not_exist_is_an_error_and_nothing_is_created(store, monkeypatch):
    monkeypatch.setenv(SCHEMA_ENV, "no_such_schema_here")
    run = run_cli("db", "init", conn=store.url)
    assert run.exit_code == 3, run.output
    shown = make_url(store.url).render_as_string(hide_password=True)
    assert run.stderr == (
        f"statestore: error: {shown} has no schema 'no_such_schema_here' ([database] sql_alchemy_schema): create it "
        "first (CREATE SCHEMA), or fix the option\n"
    )
    assert tables_in(store, store.default) & STATE_TABLES == set()


def test_a_schema_on_sqlite_is_a_config_error(tmp_path, monkeypatch, clean_environment):
    monkeypatch.setenv(SCHEMA_ENV, "airflow")
    run = run_cli("db", "init")
    assert run.exit_code == 2, run.output
    assert run.stderr == (
        "statestore: error: [database] sql_alchemy_schema = 'airflow' is set, but SQLite has no schemas (Airflow "
        "cannot use one there either): unset it\n"
    )
    assert not (clean_environment / "airflow.db").exists()


def test_an_airflow_database_in_a_schema_is_recognised_by_its_alembic_version_in_public(store):
    """What `airflow db migrate` leaves: alembic_version where an unqualified name lands, the rest in the schema."""
    ok("db", "init", conn=store.url)
    assert tables_in(store, store.schema) == STATE_TABLES
    sql(store.url, "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    sql(store.url, "INSERT INTO alembic_version VALUES ('d2f4e1b3c5a7')")
    check = json.loads(ok("db", "check", "-o", "json", conn=store.url))
    assert (check["mode"], check["airflow_version"], check["ok"]) == ("airflow", "3.3.0", True), check
    run = run_cli("runs", "delete", "--dag-id", "etl", "--run-id", "r", "--yes", conn=store.url)
    assert run.exit_code == 2 and "this is an Airflow metadata database" in run.stderr, run.output


# -- connect_args and engine_args ---------------------------------------------------------------------------------
@pytest.fixture
def local_settings(clean_environment: Path) -> Iterator[Path]:
    """``$AIRFLOW_HOME/config``, where Airflow's ``airflow_local_settings`` lives; forgotten after the test."""
    folder = clean_environment / "config"
    folder.mkdir()
    yield folder
    for name in [n for n in sys.modules if n.startswith("ss_local_")]:
        sys.modules.pop(name)
    if str(folder) in sys.path:
        sys.path.remove(str(folder))


@pytest.mark.slow  # on the database servers
def test_connect_args_reach_the_driver(local_settings, monkeypatch):
    """An application_name from an import path in $AIRFLOW_HOME/config, seen by the server itself."""
    url = require_server("postgresql")
    name = f"statestore-{uuid.uuid4().hex[:8]}"
    (local_settings / "ss_local_settings_a.py").write_text(f"connect_args = {{'application_name': {name!r}}}\n")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", "ss_local_settings_a.connect_args")
    store = Store.open(load_settings(conn_override=url), writes=False)
    try:
        with store.engine.connect() as conn:
            seen = conn.exec_driver_sql(
                "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ).scalar_one()
    finally:
        store.engine.dispose()
    assert seen == name


@pytest.mark.slow  # on the database servers
def test_engine_args_reach_create_engine(monkeypatch):
    url = require_server("postgresql")
    monkeypatch.setenv(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_ENGINE_ARGS", '{"pool_size": 3, "max_overflow": 1, "pool_recycle": 77}'
    )
    store = Store.open(load_settings(conn_override=url))
    try:
        pool = store.engine.pool
        assert (pool.size(), pool._max_overflow, pool._recycle) == (3, 1, 77)  # type: ignore[attr-defined]
    finally:
        store.engine.dispose()


@pytest.mark.parametrize(
    "module, path, problem",
    [
        (
            None,
            "ss_local_nowhere.connect_args",
            "cannot import module 'ss_local_nowhere' (ModuleNotFoundError: No module named 'ss_local_nowhere')",
        ),
        ("other = {}\n", "ss_local_b.connect_args", "module 'ss_local_b' has no attribute 'connect_args'"),
        (
            "connect_args = ['sslmode']\n",
            "ss_local_c.connect_args",
            "ss_local_c.connect_args is a list, not a dict of connect arguments",
        ),
    ],
)
def test_bad_connect_args_are_exit_2(local_settings, monkeypatch, module, path, problem, clean_environment):
    if module is not None:
        (local_settings / f"{path.split('.')[0]}.py").write_text(module)
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", path)
    run = run_cli("db", "init")
    assert run.exit_code == 2, run.output
    assert run.stderr == (
        "statestore: error: environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS: "
        f"[database] sql_alchemy_connect_args = {path!r}: {problem}\n"
    )
    assert not (clean_environment / "airflow.db").exists()


@pytest.mark.parametrize(
    "raw, problem",
    [
        (
            "{not json",
            "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_ENGINE_ARGS: invalid value for [database] "
            'sql_alchemy_engine_args: expected a JSON object such as {"pool_size": 5} (Expecting property name '
            "enclosed in double quotes: line 1 column 2 (char 1)) (the value is not shown: it may hold a password)",
        ),
        (
            '["pool_size", 5]',
            "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_ENGINE_ARGS: invalid value for [database] "
            'sql_alchemy_engine_args: expected a JSON object such as {"pool_size": 5}, not an array (the value is '
            "not shown: it may hold a password)",
        ),
        (
            '{"no_such_argument": 1}',
            "[database] sql_alchemy_engine_args: create_engine refused them: Invalid argument(s) 'no_such_argument' "
            "sent to create_engine(), using configuration SQLiteDialect_pysqlite/QueuePool/Engine.  Please check "
            "that the keyword arguments are appropriate for this combination of components.",
        ),
    ],
)
def test_bad_engine_args_are_exit_2(monkeypatch, clean_environment, raw, problem):
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_ENGINE_ARGS", raw)
    run = run_cli("db", "init")
    assert run.exit_code == 2, run.output
    assert run.stderr == f"statestore: error: {problem}\n"
    assert not (clean_environment / "airflow.db").exists()


@pytest.mark.slow  # on the database servers
def test_exclusive_cleans_of_two_schemas_of_one_postgresql_database_do_not_block_each_other(monkeypatch):
    """PostgreSQL's advisory locks are per database: the key of a clean's lock is the schema's, so a clean
    of one schema's store runs while another schema's holds its lock, and one of the same schema is refused."""
    from statestore_cli.ops.cleanup import CleanControl, delete_expired

    with schema_store("postgresql") as made:
        admin(made.url, "CREATE SCHEMA other_meta")
        for schema in (made.schema, "other_meta"):
            monkeypatch.setenv(SCHEMA_ENV, schema)
            ok("db", "init", conn=made.url)
        monkeypatch.setenv(SCHEMA_ENV, made.schema)
        holder = Store.open(load_settings(conn_override=made.url)).engine
        runs = {}

        def while_held() -> None:  # an exclusive clean of the first schema holds its lock meanwhile
            runs["same"] = run_cli("clean", "--exclusive", conn=made.url)
            monkeypatch.setenv(SCHEMA_ENV, "other_meta")
            runs["other"] = run_cli("clean", "--exclusive", "-o", "json", conn=made.url)

        try:
            delete_expired(holder, datetime.now(UTC), 0, CleanControl(exclusive=True, on_connected=while_held))
        finally:
            holder.dispose()
        same, other = runs["same"], runs["other"]
        assert same.exit_code == 3 and "another --exclusive clean is running" in same.stderr, same.output
        assert other.exit_code == 0, other.output
        assert json.loads(other.stdout)["deleted"] == 0
