"""Agreement with Apache Airflow 3.3.2 itself, installed in a virtual environment of its own.

The module installs ``apache-airflow==3.3.2`` (with ``psycopg2-binary`` and ``asyncpg``, the PostgreSQL
drivers Airflow uses) into a cache directory kept between runs (``~/.cache/statestore-tests/airflow-3.3.2``, or
``$STATESTORE_AIRFLOW_VENV``), lets ``airflow db migrate`` create real metadata databases (a SQLite file,
a PostgreSQL database on the test server) and checks both directions on each:

- rows Airflow's own ``MetastoreBackend`` writes are read, listed, swept and cleaned by statestore;
- rows statestore writes are read by Airflow's backend and cleaned by ``airflow state-store clean``;
- both dry runs list the same rows.

Airflow is only driven (its CLI, and a short script run by its interpreter that calls its public
``airflow.state`` API; one such interpreter per test runs both, as a long-lived Airflow process would,
since starting Airflow costs seconds of CPU); none of its code is in this repository. Where it cannot be
installed the module is skipped with the reason, except under ``CI=true``, where that fails it. Select it
alone with ``pytest -m airflow``; leave it out with ``-m 'not airflow'``.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow_venv import AirflowOps, airflow, airflow_env
from cli_running import run_cli
from run_scope import run_folder, run_lock
from servers import database_name, require_server, run_database
from sqlalchemy import create_engine, make_url, text

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

RUN = "scheduled__2026-11-30T00:00:00+00:00"
LONG_KEY = "external_system_reference_for_partition_2026_11_30_eu_west_1"


# -- Airflow's databases ---------------------------------------------------------------------------------
class AirflowDb:
    """One Airflow 3.3.2 metadata database: Airflow's connection URL and ours."""

    def __init__(self, python: Path, home: Path, airflow_url: str, our_url: str) -> None:
        self.python, self.url = python, our_url
        self.env = airflow_env(home, airflow_url)
        self.ops = AirflowOps(python, self.env, DRIVER, home.parent)

    def close(self) -> None:
        self.ops.close()

    def sql(self, statement: str, **params: object) -> list[tuple]:
        engine = create_engine(self.url)
        try:
            with engine.begin() as conn:
                result = conn.execute(text(statement), params)
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            engine.dispose()

    def cli(self, *args: str) -> object:
        result = run_cli(*args, conn=self.url)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout) if "json" in args else result.stdout

    def backend(self, *ops: list[object]) -> list[object]:
        """Run ``ops`` through Airflow's own configured state store backend; returns each op's result."""
        return self.ops(ops)

    def airflow_dry_run(self) -> set[tuple]:
        """The rows ``airflow state-store clean --dry-run`` lists, as (dag_id, run_id, task_id, map_index, key)."""
        [out] = self.backend(["airflow", "state-store", "clean", "--dry-run"])
        assert isinstance(out, str)
        rows = set()
        for line in out.splitlines():
            found = DRY_RUN_LINE.fullmatch(line.strip())
            if found:
                rows.add(tuple(ast.literal_eval(v) for v in found.groups()))
        assert rows or "Nothing to delete." in out, out
        return rows

    def our_dry_run(self) -> set[tuple]:
        plan = self.cli("clean", "--dry-run", "-o", "json")
        assert isinstance(plan, dict)
        return {(r["dag_id"], r["run_id"], r["task_id"], r["map_index"], r["key"]) for r in plan["rows"]}

    def add_run(self, dag_id: str, run_id: str) -> None:
        self.sql(
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES (:d, :r, 'scheduled', :t, 0, 'not_started')",
            d=dag_id,
            r=run_id,
            t=datetime(2026, 11, 30, tzinfo=UTC),
        )

    def add_asset(self, name: str, uri: str) -> int:
        moment = datetime(2026, 11, 1, tzinfo=UTC)
        self.sql(
            'INSERT INTO asset (name, uri, "group", extra, created_at, updated_at) VALUES (:n, :u, :g, :e, :t, :t)',
            n=name,
            u=uri,
            g="asset",
            e="{}",
            t=moment,
        )
        self.sql("INSERT INTO asset_active (name, uri) VALUES (:n, :u)", n=name, u=uri)
        return int(self.sql("SELECT id FROM asset WHERE name = :n AND uri = :u", n=name, u=uri)[0][0])


DRY_RUN_LINE = re.compile(r"Dag ('.*'), run ('.*'), task ('.*'), map_index (-?\d+), key ('.*')")

# Run by Airflow's interpreter: each op goes through `airflow.state.get_state_backend()`, Airflow's public
# entry to the configured backend (its MetastoreBackend here). Values travel JSON-encoded, as Airflow's do.
# An "airflow" op is Airflow's CLI, `airflow ARGS`, as its main() runs it (its parser, the command's own
# function) in this interpreter, which has imported Airflow already: its output is the op's result.
DRIVER = """
import contextlib, io, json, sys
from datetime import datetime
from airflow.state import AssetScope, TaskScope, get_state_backend

backend = get_state_backend()
results = []
for kind, *args in json.loads(sys.argv[1]):
    if kind == "airflow":
        from airflow.cli import cli_parser

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            command = cli_parser.get_parser().parse_args(args)
            command.func(command)
        results.append(out.getvalue())
        continue
    if kind in ("set_task", "get_task"):
        dag_id, run_id, task_id, map_index, key, *rest = args
        scope = TaskScope(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    else:
        asset_id, key, *rest = args
        scope = AssetScope(asset_id=asset_id)
    if kind == "set_task":
        value, expires = rest
        backend.set(scope, key, json.dumps(value), expires_at=expires and datetime.fromisoformat(expires))
        results.append(None)
    elif kind == "set_asset":
        backend.set(scope, key, json.dumps(rest[0]))
        results.append(None)
    else:
        stored = backend.get(scope, key)
        results.append(None if stored is None else json.loads(stored))
print(json.dumps(results))
"""


@pytest.fixture(scope="session")
def migrated_postgres(airflow_python: Path) -> str:
    """A PostgreSQL database ``airflow db migrate`` made, once per test run (``run_database``): the
    template of each test's. Its name."""

    def migrate(url: str) -> None:
        home = run_folder() / "airflow-postgres-home"
        airflow(airflow_python, airflow_env(home, _driver(url, "psycopg2")), "db", "migrate")

    name = make_url(run_database("postgresql", "airflow_tpl", migrate)).database
    assert name is not None
    return name


def _admin(admin_url: str, statement: str) -> None:
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _driver(url: object, driver: str) -> str:
    return (
        make_url(str(url) if not hasattr(url, "set") else url)
        .set(  # type: ignore[arg-type]
            drivername=f"postgresql+{driver}"
        )
        .render_as_string(hide_password=False)
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def airflow_db(request: pytest.FixtureRequest, airflow_python: Path, tmp_path: Path) -> Iterator[AirflowDb]:
    home = tmp_path / "airflow-home-live"
    if request.param == "sqlite":
        path = tmp_path / "airflow.db"
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), path)
        db = AirflowDb(airflow_python, home, f"sqlite:///{path}", f"sqlite:///{path}")
        yield db
        db.close()
        return
    template = request.getfixturevalue("migrated_postgres")
    admin_url = require_server("postgresql")
    name = database_name("af")
    with run_lock("airflow-postgres-template"):  # a template is copied by one CREATE DATABASE at a time
        _admin(admin_url, f"CREATE DATABASE {name} TEMPLATE {template}")
    url = make_url(admin_url).set(database=name)
    db = AirflowDb(airflow_python, home, _driver(url, "psycopg2"), _driver(url, "psycopg"))
    try:
        yield db
    finally:
        db.close()
        _admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- the checks ------------------------------------------------------------------------------------------
def _iso(moment: datetime) -> str:
    return moment.isoformat()


def test_airflow_writes_statestore_reads_lists_sweeps_and_cleans(airflow_db: AirflowDb, tmp_path: Path):
    db = airflow_db
    check = db.cli("db", "check", "-o", "json")
    assert isinstance(check, dict)
    assert (check["ok"], check["mode"], check["airflow_version"]) == (True, "airflow", "3.3.0")
    db.add_run("etl_orders_daily", RUN)
    orders = db.add_asset("orders", "s3://warehouse/orders")
    customers = db.add_asset("customers", "s3://warehouse/customers")
    past, future = datetime.now(UTC) - timedelta(hours=1), datetime(2030, 1, 1, tzinfo=UTC)
    task = ["etl_orders_daily", RUN, "submit_spark_job"]
    db.backend(
        ["set_task", *task, -1, "expired", {"job": 1}, _iso(past)],
        ["set_task", *task, 7, LONG_KEY, "spark-application-0042", _iso(past)],
        ["set_task", *task, -1, "alive", [1, 2.5, "x"], _iso(future)],
        ["set_task", *task, -1, "key with spaces/and slashes", True, None],
        ["set_asset", orders, "watermark", "2026-11-29"],
        ["set_asset", customers, "watermark", {"offset": 42}],
    )

    scope = ["--dag-id", task[0], "--run-id", RUN, "--task-id", task[2]]
    assert db.cli("get", *scope, "alive", "-o", "json")["value"] == [1, 2.5, "x"]  # type: ignore[index]
    assert json.loads(run_cli("get", *scope, "key with spaces/and slashes", conn=db.url).stdout) is True
    assert json.loads(run_cli("get", "--asset-name", "customers", "watermark", conn=db.url).stdout) == {"offset": 42}
    listed = db.cli("list", "-o", "json")
    assert isinstance(listed, list)
    expiries = {d["key"]: d["expires_at"] for d in listed if "dag_id" in d}
    assert expiries["alive"] == "2030-01-01T00:00:00+00:00"
    assert expiries["key with spaces/and slashes"] is None
    assert datetime.fromisoformat(expiries["expired"]) == past
    assert sorted((d["name"], d["key"]) for d in listed if "name" in d) == [
        ("customers", "watermark"),
        ("orders", "watermark"),
    ]

    # both dry runs list the same rows; our clean deletes exactly them
    expected = {(task[0], RUN, task[2], -1, "expired"), (task[0], RUN, task[2], 7, LONG_KEY)}
    assert db.airflow_dry_run() == db.our_dry_run() == expected
    backup = tmp_path / "clean.jsonl"
    cleaned = db.cli("clean", "--batch-size", "1", "--backup", str(backup), "-o", "json")
    assert cleaned["deleted"] == 2 and cleaned["backup"]["lines"] == 2  # type: ignore[index]
    assert db.airflow_dry_run() == db.our_dry_run() == set()
    assert db.backend(["get_task", *task, -1, "expired"], ["get_task", *task, -1, "alive"]) == [None, [1, 2.5, "x"]]
    # the backup of what Airflow wrote puts it back as it was: Airflow's own dry run lists those rows again
    restored = run_cli("import", str(backup), conn=db.url)
    assert restored.exit_code == 0, restored.output
    assert db.airflow_dry_run() == db.our_dry_run() == expected
    assert db.cli("clean", "-o", "json")["deleted"] == 2  # type: ignore[index]

    # an asset Airflow deactivates: its keys are swept, the active asset's stay
    db.sql("DELETE FROM asset_active WHERE name = 'orders'")
    plan = db.cli("assets", "sweep", "--dry-run", "-o", "json")
    assert [(a["asset_id"], a["keys"]) for a in plan["assets"]] == [(orders, ["watermark"])]  # type: ignore[index]
    assert db.cli("assets", "sweep", "--yes", "-o", "json")["deleted"] == 1  # type: ignore[index]
    assert db.backend(["get_asset", orders, "watermark"], ["get_asset", customers, "watermark"]) == [
        None,
        {"offset": 42},
    ]


def test_statestore_writes_airflow_reads_and_cleans(airflow_db: AirflowDb):
    db = airflow_db
    db.add_run("etl_orders_daily", RUN)
    orders = db.add_asset("orders", "s3://warehouse/orders")
    task = ["etl_orders_daily", RUN, "submit_spark_job"]
    scope = ["--dag-id", task[0], "--run-id", RUN, "--task-id", task[2]]
    past = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    db.cli("set", *scope, "expired", '{"job": 1}', "--expires-at", past, "--force")
    db.cli("set", *scope, "--map-index", "3", LONG_KEY, '"x"', "--expires-at", past, "--force")
    db.cli("set", *scope, "alive", "[1, 2.5]", "--retention", "7d")
    db.cli("set", *scope, "pinned", '{"a": "ü"}', "--retention", "never")
    db.cli("set", *scope, "alive", "[3]", "--keep-expiry")
    db.cli("set", "--asset-name", "orders", "watermark", '"2026-11-29"')

    assert db.backend(
        ["get_task", *task, -1, "alive"],
        ["get_task", *task, -1, "pinned"],
        ["get_task", *task, 3, LONG_KEY],
        ["get_asset", orders, "watermark"],
    ) == [[3], {"a": "ü"}, "x", "2026-11-29"]

    expected = {(task[0], RUN, task[2], -1, "expired"), (task[0], RUN, task[2], 3, LONG_KEY)}
    assert db.airflow_dry_run() == db.our_dry_run() == expected
    db.backend(["airflow", "state-store", "clean"])
    assert db.airflow_dry_run() == db.our_dry_run() == set()
    listed = db.cli("list", "-o", "json")
    assert isinstance(listed, list)
    assert sorted(d["key"] for d in listed) == ["alive", "pinned", "watermark"]


def test_a_database_airflow_migrated_into_a_schema(airflow_python: Path, tmp_path: Path, monkeypatch):
    """`airflow db migrate` with [database] sql_alchemy_schema: Airflow's tables in the schema, its
    alembic_version in public; statestore finds both, and every command works on that database."""
    admin_url = require_server("postgresql")
    name = database_name("af_schema")
    _admin(admin_url, f"CREATE DATABASE {name}")
    url = make_url(admin_url).set(database=name)
    ours = _driver(url, "psycopg")
    db: AirflowDb | None = None
    try:
        _admin(ours, "CREATE SCHEMA airflow_meta")
        env = airflow_env(tmp_path / "home", _driver(url, "psycopg2"))
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA"] = "airflow_meta"
        airflow(airflow_python, env, "db", "migrate")
        db = AirflowDb(airflow_python, tmp_path / "home", _driver(url, "psycopg2"), ours)
        db.env["AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA"] = "airflow_meta"
        where = dict(
            db.sql(
                "SELECT table_name, table_schema FROM information_schema.tables WHERE table_name IN "
                "('alembic_version', 'task_state_store', 'asset_state_store', 'dag_run', 'asset', 'asset_active')"
            )
        )
        assert where == {
            "alembic_version": "public",
            **dict.fromkeys(
                ("task_state_store", "asset_state_store", "dag_run", "asset", "asset_active"), "airflow_meta"
            ),
        }

        monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", "airflow_meta")
        check = db.cli("db", "check", "-o", "json")
        assert isinstance(check, dict)
        assert (check["ok"], check["mode"], check["airflow_version"], check["tables_missing"]) == (
            True,
            "airflow",
            "3.3.0",
            [],
        ), check
        moment = datetime(2026, 11, 30, tzinfo=UTC)
        db.sql(
            "INSERT INTO airflow_meta.dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES ('etl', :r, 'scheduled', :t, 0, 'not_started')",
            r=RUN,
            t=moment,
        )
        task = ("--dag-id", "etl", "--run-id", RUN, "--task-id", "extract")
        db.cli("set", *task, "job", '"42"')
        db.cli("set", *task, "old", '"gone"', "--expires-at", "2000-01-01T00:00:00Z", "--force")
        assert db.cli("get", *task, "job") == '"42"\n'
        listed = db.cli("list", "-o", "json")
        assert isinstance(listed, list) and sorted(e["key"] for e in listed) == ["job", "old"]
        cleaned = db.cli("clean", "-o", "json")
        assert isinstance(cleaned, dict) and cleaned["deleted"] == 1
        # Airflow's own backend, configured with the schema, reads what statestore wrote there.
        assert db.backend(["get_task", "etl", RUN, "extract", -1, "job"]) == ["42"]
        # ...and statestore reads what Airflow's backend wrote.
        db.backend(["set_task", "etl", RUN, "load", -1, "by_airflow", {"rows": 3}, None])
        assert db.cli("get", "--dag-id", "etl", "--run-id", RUN, "--task-id", "load", "by_airflow") == '{"rows": 3}\n'
    finally:
        if db is not None:
            db.close()
        _admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
