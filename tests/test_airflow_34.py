"""The whole CLI on Airflow 3.4's state store tables, and on the in-between layout, on every engine.

The databases are the hand-written fixtures (tests/fixtures/README.md): on SQLite a copy of
``airflow-3.4.sqlite`` or ``airflow-3.4-between.sqlite`` per test; on PostgreSQL and MariaDB the 3.3.2
schema dump with the 3.4 DDL steps loaded once per module into a throwaway database of each layout, its
rows deleted before each test. Rows are checked in the database itself with raw SQL: ``region_id`` in the
column's own form, and the keys another writer put in a region (inserted here with raw SQL), which no
command addressing the same task outside any region reads, overwrites, clears or deletes.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from airflow_schema import BETWEEN, FIXTURES, HEAD_34, load_airflow_schema, throwaway_airflow_database
from cli_running import Result, run_cli
from servers import ENGINES, engine_of
from stores import as_utc, sql

LAYOUTS = {"3.4": HEAD_34, "3.4-between": BETWEEN}  # layout name -> its alembic revision
SQLITE_FILES = {HEAD_34: "airflow-3.4.sqlite", BETWEEN: "airflow-3.4-between.sqlite"}
NIL = uuid.UUID(int=0)
REGION = uuid.UUID("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab")  # a region another writer's rows are in
FUTURE = datetime(2030, 6, 1, 12, 0, 0, tzinfo=UTC)
PAST = datetime(2020, 1, 1, tzinfo=UTC)

DAG, RUN, OTHER_RUN = "etl", "manual__2026-11-30T00:00:00+00:00", "scheduled__2026-11-29T00:00:00+00:00"
TASK = ["--dag-id", DAG, "--run-id", RUN, "--task-id", "load"]
RUN_SCOPE = ["--dag-id", DAG, "--run-id", RUN]


def _cases(layouts: tuple[str, ...]) -> pytest.MarkDecorator:
    cases = [pytest.param((e, layout), id=f"{e}-{layout}") for e in ENGINES for layout in layouts]
    return pytest.mark.parametrize("af", cases, indirect=True)


every_layout = _cases(("3.4", "3.4-between"))
layout_34 = _cases(("3.4",))
layout_between = _cases(("3.4-between",))


class TaskRow(NamedTuple):
    """A task_state_store row as the database holds it; ``region`` is the raw ``region_id`` value."""

    task_id: str
    map_index: int
    region: Any
    key: str
    value: str
    expires_at: datetime | None


@dataclass
class AirflowDb:
    engine: str  # sqlite, postgresql or mariadb
    layout: str  # 3.4 or 3.4-between
    url: str

    @property
    def index(self) -> str:
        """The database's name of the map index column."""
        return "region_index" if self.layout == "3.4" else "map_index"

    @property
    def has_dag_run_store(self) -> bool:
        return self.layout == "3.4"

    def stored_region(self, region: uuid.UUID) -> Any:
        """``region`` as the column stores it: PostgreSQL's ``uuid``, else CHAR(32) of lower-case hex digits."""
        return region if self.engine == "postgresql" else region.hex

    def moment(self, when: datetime) -> Any:
        """A timestamp as each engine's column takes it: SQLite text, MariaDB naive UTC, PostgreSQL aware."""
        if self.engine == "sqlite":
            return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        if self.engine == "mariadb":
            return when.astimezone(UTC).replace(tzinfo=None)
        return when

    def quote(self, name: str) -> str:
        return f"`{name}`" if self.engine == "mariadb" else f'"{name}"'

    # -- the CLI --------------------------------------------------------------------------------------
    def run(self, *args: str, input: str | None = None) -> Result:
        return run_cli(*args, conn=self.url, input=input)

    def ok(self, *args: str) -> Result:
        result = self.run(*args)
        assert result.exit_code == 0, result.output
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args).stdout)

    # -- raw SQL --------------------------------------------------------------------------------------
    def sql(self, statement: str, **params: object) -> list[tuple]:
        return sql(self.url, statement, **params)

    def add_dag_run(self, dag_id: str = DAG, run_id: str = RUN) -> int:
        """A dag_run row as Airflow makes one (the columns without a default); its id."""
        self.sql(
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES (:dag_id, :run_id, 'manual', :after, 0, 'not_started')",
            dag_id=dag_id,
            run_id=run_id,
            after=self.moment(datetime(2026, 11, 30, tzinfo=UTC)),
        )
        rows = self.sql("SELECT id FROM dag_run WHERE dag_id = :d AND run_id = :r", d=dag_id, r=run_id)
        return int(rows[0][0])

    def insert_task_row(
        self, run_pk: int, map_index: int, key: str, value: str, *, region: uuid.UUID, expires_at: datetime | None
    ) -> None:
        """A task key of ``load`` written by another writer (in ``region``), with raw SQL."""
        stamp = self.moment(datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
        self.sql(
            f"INSERT INTO task_state_store (dag_run_id, task_id, {self.index}, region_id, {{key}}, dag_id, run_id, "
            "value, updated_at, expires_at) VALUES (:pk, 'load', :mi, :region, :k, :dag, :run, :v, :t, :exp)",
            pk=run_pk,
            mi=map_index,
            region=self.stored_region(region),
            k=key,
            dag=DAG,
            run=RUN,
            v=value,
            t=stamp,
            exp=None if expires_at is None else self.moment(expires_at),
        )

    def task_rows(self, where: str = "1 = 1", **params: object) -> list[TaskRow]:
        rows = self.sql(
            f"SELECT task_id, {self.index}, region_id, {{key}}, value, expires_at FROM task_state_store "
            f"WHERE {where} ORDER BY task_id, {self.index}, {{key}}, value",
            **params,
        )
        return [TaskRow(t, m, r, k, v, as_utc(e)) for t, m, r, k, v, e in rows]

    def region_rows(self) -> list[TaskRow]:
        """The rows in ``REGION``."""
        return self.task_rows("region_id = :region", region=self.stored_region(REGION))

    def dag_run_rows(self) -> list[tuple]:
        """(dag_run_id, dag_id, run_id, key, value, expires_at) of every dag-run key, by key."""
        rows = self.sql(
            "SELECT dag_run_id, dag_id, run_id, {key}, value, expires_at FROM dag_run_state_store ORDER BY {key}"
        )
        return [(*row[:5], as_utc(row[5])) for row in rows]

    def expire(self, table: str, key: str) -> None:
        """Make ``key``'s rows in ``table`` expired (2020-01-01), as if their retention had passed."""
        self.sql(f"UPDATE {table} SET expires_at = :t WHERE {{key}} = :k", t=self.moment(PAST), k=key)

    def clean_rows(self) -> None:
        """Remove every row the tests write (a shared server database, before each test)."""
        tables = ["task_state_store", "asset_state_store", "asset_active", "asset", "dag_run"]
        if self.has_dag_run_store:
            tables.insert(1, "dag_run_state_store")
        engine = engine_of(self.url)  # one connection for them all: a new one costs more than a DELETE
        try:
            with engine.begin() as conn:
                for table in tables:
                    conn.exec_driver_sql(f"DELETE FROM {table}")
        finally:
            engine.dispose()


@pytest.fixture(scope="session")
def server_databases() -> Iterator[Callable[[str, str], str]]:
    """One throwaway database per server engine and revision, loaded the first time a test of this worker
    needs it and dropped at the end of its session (a worker runs this module's tests among others', so a
    module-scoped one would be loaded again each time it comes back to the module)."""
    loaded: dict[tuple[str, str], str] = {}
    with ExitStack() as stack:

        def database(engine: str, revision: str) -> str:
            if (engine, revision) not in loaded:
                url = stack.enter_context(throwaway_airflow_database(engine))
                load_airflow_schema(engine, url, revision)
                loaded[(engine, revision)] = url
            return loaded[(engine, revision)]

        yield database


@pytest.fixture
def af(request: pytest.FixtureRequest, tmp_path: Path, server_databases: Callable[[str, str], str]) -> AirflowDb:
    """An Airflow database of the layout asked for, with no rows in the tables the tests write."""
    engine, layout = request.param
    revision = LAYOUTS[layout]
    if engine == "sqlite":
        copy = tmp_path / SQLITE_FILES[revision]
        shutil.copyfile(FIXTURES / SQLITE_FILES[revision], copy)
        copy.chmod(0o644)
        return AirflowDb(engine, layout, f"sqlite:///{copy}")
    db = AirflowDb(engine, layout, server_databases(engine, revision))
    db.clean_rows()
    return db


def near(when: datetime | None, expected: datetime, slack: timedelta = timedelta(minutes=2)) -> bool:
    return when is not None and abs(when - expected) < slack


def error_line(result: Result, code: int) -> str:
    """The one line a refused command writes to stderr (nothing on stdout), after checking its exit code."""
    assert result.exit_code == code, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.output
    return result.stderr


def without_times(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("updated_at", "expires_at")} for e in entries]


# -- db check ---------------------------------------------------------------------------------------------
@every_layout
def test_db_check(af):
    af.add_dag_run()
    af.ok("set", *TASK, "job_id", "1")
    doc = af.json("db", "check", "-o", "json")
    assert (doc["ok"], doc["mode"], doc["alembic_revision"]) == (True, "airflow", LAYOUTS[af.layout])
    assert (doc["tables_missing"], doc["error"], doc["task_keys"], doc["task_keys_expired"]) == ([], None, 1, 0)
    assert af.run("db", "check").exit_code == 0


# -- task keys ----------------------------------------------------------------------------------------------
@every_layout
def test_task_keys_set_get_delete_list(af):
    af.add_dag_run()
    assert af.ok("set", *TASK, "job_id", '{"id": "j-1"}').stderr.startswith(
        f"set 'job_id' for dag_id={DAG} run_id={RUN} task_id=load map_index=-1 (expires "
    )
    af.ok("set", *TASK, "--map-index", "3", "job_id", '"mapped"', "--retention", "2h")
    assert af.json("get", *TASK, "job_id") == {"id": "j-1"}
    assert af.json("get", *TASK, "--map-index", "3", "job_id") == "mapped"

    now = datetime.now(UTC)
    rows = af.task_rows()
    nil = af.stored_region(NIL)  # the nil UUID in the column's own form: no dashes in CHAR(32)
    assert [r[:5] for r in rows] == [
        ("load", -1, nil, "job_id", '{"id": "j-1"}'),
        ("load", 3, nil, "job_id", '"mapped"'),
    ]
    if af.engine != "postgresql":
        assert all(r.region == "0" * 32 for r in rows)
    assert near(rows[0].expires_at, now + timedelta(days=30)) and near(rows[1].expires_at, now + timedelta(hours=2))

    task = {"store": "task", "dag_id": DAG, "run_id": RUN, "task_id": "load", "key": "job_id"}
    listed = af.json("list", "-o", "json")
    assert without_times(listed) == [{**task, "map_index": -1}, {**task, "map_index": 3}]  # no region_id: outside
    assert [e["map_index"] for e in af.json("list", "--map-index", "3", "--store", "task", "-o", "json")] == [3]

    # --keep-expiry replaces the value of the row outside any region and keeps its expiry
    af.ok("set", *TASK, "--map-index", "3", "job_id", '"again"', "--keep-expiry")
    assert af.task_rows()[1][4:] == ('"again"', rows[1].expires_at)

    assert af.ok("delete", *TASK, "job_id").stderr.startswith("deleted 'job_id'")
    missing = af.run("get", *TASK, "job_id")
    assert missing.exit_code == 1, missing.output
    assert f"no key 'job_id' for dag_id={DAG} run_id={RUN} task_id=load map_index=-1" in missing.stderr
    assert af.ok("delete", *TASK, "job_id").stderr.startswith("no such key, nothing deleted")
    assert [(r.map_index, r.value) for r in af.task_rows()] == [(3, '"again"')]


@every_layout
def test_task_keys_of_a_run_the_database_lacks_are_refused(af):
    refused = af.run("set", *TASK, "job_id", "1")
    assert f"no dag run dag_id={DAG} run_id={RUN} in this Airflow database" in error_line(refused, 2)
    assert af.task_rows() == [] and af.sql("SELECT count(*) FROM dag_run") == [(0,)]


@every_layout
def test_clear_one_task_instance_all_map_indices_and_a_whole_run(af):
    af.add_dag_run()
    af.add_dag_run(DAG, OTHER_RUN)
    for map_index in ("-1", "0", "1"):
        af.ok("set", *TASK, "--map-index", map_index, "k", "1")
    af.ok("set", "--dag-id", DAG, "--run-id", RUN, "--task-id", "report", "k", "1")
    af.ok("set", "--dag-id", DAG, "--run-id", OTHER_RUN, "--task-id", "load", "k", "1")
    if af.has_dag_run_store:
        af.ok("set", *RUN_SCOPE, "run_key", "1")

    out = af.ok("clear", *TASK, "--map-index", "0", "--yes").stderr
    assert out == f"deleted 1 key of dag_id={DAG} run_id={RUN} task_id=load map_index=0\n"
    assert [(r.task_id, r.map_index) for r in af.task_rows("run_id = :r", r=RUN)] == [
        ("load", -1),
        ("load", 1),
        ("report", -1),
    ]
    out = af.ok("clear", *TASK, "--all-map-indices", "--yes").stderr
    assert out == f"deleted 2 keys of dag_id={DAG} run_id={RUN} task_id=load, all map indices\n"
    assert af.ok("clear", *TASK, "--yes").stderr.startswith("nothing to clear: no keys for ")

    run_keys = "2 keys" if af.has_dag_run_store else "1 key"  # the run's task keys and, on 3.4, its dag-run keys
    out = af.ok("clear", *RUN_SCOPE, "--yes").stderr
    assert out.startswith(f"deleted {run_keys} of dag_id={DAG} run_id={RUN} (every task of the run)")
    assert [(r.task_id, r.map_index) for r in af.task_rows()] == [("load", -1)]  # the other run's
    assert af.task_rows("run_id = :r", r=OTHER_RUN) == af.task_rows()
    if af.has_dag_run_store:
        assert af.dag_run_rows() == []


# -- keys in a region ---------------------------------------------------------------------------------------
@every_layout
def test_keys_in_a_region_are_never_merged_with_keys_outside_it(af, tmp_path):
    run_pk = af.add_dag_run()
    af.insert_task_row(run_pk, -1, "job_id", '"regional"', region=REGION, expires_at=FUTURE)
    af.insert_task_row(run_pk, 2, "job_id", '"regional-2"', region=REGION, expires_at=FUTURE)
    regional = af.region_rows()
    assert [(r.map_index, r.value) for r in regional] == [(-1, '"regional"'), (2, '"regional-2"')]

    # not read
    assert "no key 'job_id' for " in error_line(af.run("get", *TASK, "job_id"), 1)
    assert "no key 'job_id' for " in error_line(af.run("get", *TASK, "--map-index", "2", "job_id"), 1)
    # but listed, with its region
    listed = af.json("list", "-o", "json")
    assert [(e["map_index"], e.get("region_id"), e["key"]) for e in listed] == [
        (-1, str(REGION), "job_id"),
        (2, str(REGION), "job_id"),
    ]
    assert listed[0]["expires_at"] == FUTURE.isoformat()

    # not overwritten: a write outside the region is a row of its own
    af.ok("set", *TASK, "job_id", '"outside"')
    assert af.json("get", *TASK, "job_id") == "outside"
    assert af.region_rows() == regional
    assert [r.value for r in af.task_rows("region_id = :nil", nil=af.stored_region(NIL))] == ['"outside"']
    missing = af.run("set", *TASK, "--map-index", "2", "job_id", '"x"', "--keep-expiry")
    assert missing.exit_code == 1, missing.output
    assert af.region_rows() == regional

    # not deleted, not cleared
    assert af.ok("delete", *TASK, "job_id").stderr.startswith("deleted 'job_id'")
    assert af.ok("delete", *TASK, "--map-index", "2", "job_id").stderr.startswith("no such key, nothing deleted")
    assert af.ok("clear", *TASK, "--yes").stderr.startswith("nothing to clear: no keys for ")
    af.ok("set", *TASK, "job_id", '"outside"')
    af.ok("set", *TASK, "--map-index", "2", "other", "1")
    out = af.ok("clear", *TASK, "--all-map-indices", "--yes").stderr
    assert out.startswith("deleted 2 keys of ")
    assert af.task_rows() == regional

    # export names its region, and importing the same task's key outside the region leaves it alone
    af.ok("set", *TASK, "job_id", '"outside"')
    dump = tmp_path / "keys.jsonl"
    af.ok("export", "--file", str(dump))
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    shown = [(line["map_index"], line.get("region_id"), line["value"]) for line in lines]
    assert shown == [(-1, None, "outside"), (-1, str(REGION), "regional"), (2, str(REGION), "regional-2")]
    lines[0]["value"] = "imported"
    dump.write_text(json.dumps(lines[0]) + "\n")
    summary = af.json("import", str(dump), "-o", "json")
    assert summary["task"] == {"inserted": 0, "updated": 1}
    assert af.region_rows() == regional
    assert af.json("get", *TASK, "job_id") == "imported"

    # clean deletes it once it has expired, as any expired task key
    af.sql(
        f"UPDATE task_state_store SET expires_at = :t WHERE region_id = :region AND {af.index} = 2",
        t=af.moment(PAST),
        region=af.stored_region(REGION),
    )
    plan = af.json("clean", "--dry-run", "-o", "json")
    listed = [(r["task_id"], r["map_index"], r["key"], r.get("region_id")) for r in plan["rows"]]
    assert listed == [("load", 2, "job_id", str(REGION))]
    assert af.json("clean", "-o", "json")["deleted"] == 1
    assert af.region_rows() == regional[:1]
    assert af.json("get", *TASK, "job_id") == "imported"

    # a whole run's clear takes every task key of the run, those in regions too
    assert af.ok("clear", *RUN_SCOPE, "--yes").stderr.startswith("deleted 2 keys of ")
    assert af.task_rows() == []


# -- clean --------------------------------------------------------------------------------------------------
@every_layout
def test_clean_removes_expired_task_and_dag_run_keys(af):
    af.add_dag_run()
    af.ok("set", *TASK, "expired", '"x"', "--retention", "1h")
    af.ok("set", *TASK, "--map-index", "4", "expired", '"x"', "--retention", "1h")
    af.ok("set", *TASK, "alive", '"y"', "--retention", "7d")
    af.ok("set", *TASK, "pinned", '"z"', "--retention", "never")
    af.expire("task_state_store", "expired")
    expected = [("task", "load", -1, "expired"), ("task", "load", 4, "expired")]
    if af.has_dag_run_store:
        af.ok("set", *RUN_SCOPE, "run_expired", '"x"', "--retention", "1h")
        af.ok("set", *RUN_SCOPE, "run_alive", '"y"')
        af.ok("set", *RUN_SCOPE, "run_pinned", '"z"', "--retention", "never")
        af.expire("dag_run_state_store", "run_expired")
        expected.append(("dag_run", None, None, "run_expired"))

    plan = af.json("clean", "--dry-run", "-o", "json")
    assert plan["dry_run"] is True and plan["would_delete"] == len(expected)
    found = [(r.get("store", "task"), r["task_id"], r["map_index"], r["key"]) for r in plan["rows"]]
    assert found == expected
    assert all((r["dag_id"], r["run_id"], r["expires_at"]) == (DAG, RUN, PAST.isoformat()) for r in plan["rows"])
    assert len(af.task_rows()) == 4  # a dry run deletes nothing

    done = af.json("clean", "-o", "json")
    assert (done["dry_run"], done["deleted"], done["complete"]) == (False, len(expected), True)
    assert [(r.map_index, r.key) for r in af.task_rows()] == [(-1, "alive"), (-1, "pinned")]
    if af.has_dag_run_store:
        assert [row[3] for row in af.dag_run_rows()] == ["run_alive", "run_pinned"]
    assert af.json("clean", "-o", "json")["deleted"] == 0


@every_layout
def test_clean_messages_count_dag_run_keys_apart_from_task_keys(af):
    """Where dag-run keys expire too, the sentences people read count them apart; elsewhere they say task keys."""
    af.add_dag_run()
    af.ok("set", *TASK, "expired", '"x"', "--retention", "1h")
    af.expire("task_state_store", "expired")
    counted = "1 expired task key"
    if af.has_dag_run_store:
        for key in ("run_expired", "run_expired_too"):
            af.ok("set", *RUN_SCOPE, key, '"x"', "--retention", "1h")
            af.expire("dag_run_state_store", key)
        counted = "3 expired keys (1 task key, 2 dag-run keys)"
    plain = af.ok("clean", "--dry-run", "-o", "plain")
    assert plain.stderr.startswith(f"dry run: {counted} would be deleted (expired before "), plain.stderr
    table = af.ok("clean", "--dry-run", "-o", "table")
    assert f"Dry run: {counted} would be deleted (expired before " in " ".join(table.stdout.split()), table.stdout
    # the summary per dag: one run, one task instance (a run's own keys are none's), every key
    summary = [line.split() for line in table.stdout.splitlines() if line.startswith(f"│ {DAG} ")]
    assert summary == [["│", DAG, "│", "1", "│", "1", "│", "3" if af.has_dag_run_store else "1", "│"]], table.stdout
    done = af.ok("clean", "-o", "plain")
    assert done.stderr.startswith(f"deleted {counted} in one statement (expired before "), done.stderr


@every_layout
def test_clean_in_batches(af):
    af.add_dag_run()
    for n in range(5):
        af.ok("set", *TASK, "--map-index", str(n), "expired", "1", "--retention", "1h")
        if af.has_dag_run_store:
            af.ok("set", *RUN_SCOPE, f"expired_{n}", "1", "--retention", "1h")
    af.ok("set", *TASK, "kept", "1")
    af.expire("task_state_store", "expired")
    if af.has_dag_run_store:
        for n in range(5):
            af.expire("dag_run_state_store", f"expired_{n}")
    done = af.json("clean", "--batch-size", "2", "-o", "json")
    assert done["deleted"] == (10 if af.has_dag_run_store else 5)
    assert [r.key for r in af.task_rows()] == ["kept"]
    if af.has_dag_run_store:
        assert af.dag_run_rows() == []


# -- stats, export and import -------------------------------------------------------------------------------
@every_layout
def test_stats_task_part(af):
    af.add_dag_run()
    af.add_dag_run("ml", RUN)
    for retention, key in (("12h", "a"), ("3d", "b"), ("20d", "c"), ("60d", "d"), ("never", "e")):
        af.ok("set", *TASK, key, '"12345"', "--retention", retention)
    af.ok("set", "--dag-id", "ml", "--run-id", RUN, "--task-id", "train", "--map-index", "7", "f", "1")
    af.expire("task_state_store", "f")
    if af.has_dag_run_store:
        af.ok("set", *RUN_SCOPE, "run_key", '"not a task key"')
    task = af.json("stats", "-o", "json")["task"]
    assert (task["rows"], task["value_bytes"], task["dags"], task["over_max_value_storage_bytes"]) == (6, 36, 2, 0)
    assert task["expiry"] == {
        "expired": 1,
        "within_1_day": 1,
        "within_1_to_7_days": 1,
        "within_7_to_30_days": 1,
        "after_30_days": 1,
        "never": 1,
    }
    assert task["top_dags_by_rows"] == [
        {"dag_id": DAG, "rows": 5, "value_bytes": 35},
        {"dag_id": "ml", "rows": 1, "value_bytes": 1},
    ]
    assert af.json("stats", "--dag-id", "ml", "-o", "json")["task"]["rows"] == 1


@every_layout
def test_stats_largest_values_of_every_store_a_region_included(af):
    run_pk = af.add_dag_run()
    af.insert_task_row(run_pk, 2, "regional", '"' + "r" * 48 + '"', region=REGION, expires_at=FUTURE)  # 50 bytes
    af.ok("set", *TASK, "outside", '"' + "o" * 38 + '"')  # 40 bytes
    af.sql(
        f"INSERT INTO asset (name, uri, {af.quote('group')}, extra, created_at, updated_at) "
        "VALUES ('orders', 's3://orders', 'asset', '{}', :t, :t)",
        t=af.moment(datetime(2026, 11, 1, tzinfo=UTC)),
    )
    af.sql("INSERT INTO asset_active (name, uri) VALUES ('orders', 's3://orders')")
    af.ok("set", "--asset-name", "orders", "watermark", '"' + "w" * 58 + '"')  # 60 bytes
    if af.has_dag_run_store:
        af.ok("set", *RUN_SCOPE, "run_key", '"' + "k" * 43 + '"')  # 45 bytes
    doc = af.json("stats", "--largest", "10", "-o", "json")
    [asset_id] = [a["asset_id"] for a in doc["asset"]["top_assets"]]
    task = {"store": "task", "dag_id": DAG, "run_id": RUN, "task_id": "load"}
    expected = [
        {"store": "asset", "asset_id": asset_id, "name": "orders", "uri": "s3://orders", "key": "watermark",
         "value_bytes": 60},
        {**task, "map_index": 2, "region_id": str(REGION), "key": "regional", "value_bytes": 50},
        *([{"store": "dag_run", "dag_id": DAG, "run_id": RUN, "key": "run_key", "value_bytes": 45}]
          if af.has_dag_run_store else []),
        {**task, "map_index": -1, "key": "outside", "value_bytes": 40},
    ]  # fmt: skip
    assert doc["largest"] == expected
    assert af.json("stats", "--largest", "1", "--store", "task", "-o", "json")["largest"] == [expected[1]]
    if af.has_dag_run_store:
        runs = af.json("stats", "--largest", "5", "--store", "dag_run", "-o", "json")["largest"]
        assert runs == [expected[2]]
        plain = af.ok("stats", "--largest", "5", "--store", "dag_run", "-o", "plain").stdout.splitlines()
        assert [line for line in plain if line.startswith("largest\t")] == [
            f"largest\tdag_run\t45\t{DAG}\t{RUN}\trun_key"
        ]
        table = af.ok("stats", "--largest", "5", "--store", "dag_run", "-o", "table").stdout
        assert f"│ dag run  dag_id {DAG}  run_id {RUN}" in table and "│   run_key " in table
    else:
        assert "no dag-run state store" in af.run("stats", "--largest", "5", "--store", "dag_run").stderr


@every_layout
def test_export_import_round_trip(af, tmp_path):
    af.add_dag_run()
    af.ok("set", *TASK, "job_id", '{"id": "j-1", "attempt": 2}')
    af.ok("set", *TASK, "--map-index", "7", "checkpoint", '"Zürich ☃"', "--retention", "2h")
    af.ok("set", *TASK, "pinned", "[1, 2, 3]", "--retention", "never")
    dump = tmp_path / "keys.jsonl"
    af.ok("export", "--file", str(dump))
    lines = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    listed = af.json("list", "-o", "json")
    assert [{k: v for k, v in line.items() if k != "value"} for line in lines] == listed
    assert [line["value"] for line in lines] == [{"id": "j-1", "attempt": 2}, [1, 2, 3], "Zürich ☃"]
    before = af.task_rows()
    stamps = af.sql("SELECT {key}, updated_at FROM task_state_store ORDER BY {key}")

    af.ok("clear", *RUN_SCOPE, "--yes")
    assert af.task_rows() == []
    summary = af.json("import", str(dump), "-o", "json")
    assert (summary["keys"], summary["task"], summary["created"]) == (
        3,
        {"inserted": 3, "updated": 0},
        {"dag_runs": 0, "assets": 0},
    )
    assert af.task_rows() == before  # region_id the nil UUID again, expiry kept
    assert [(k, as_utc(t)) for k, t in af.sql("SELECT {key}, updated_at FROM task_state_store ORDER BY {key}")] == [
        (k, as_utc(t)) for k, t in stamps
    ]
    assert af.json("import", str(dump), "-o", "json")["task"] == {"inserted": 0, "updated": 3}
    assert af.task_rows() == before

    # an Airflow database must have the runs: a key of another run is refused, nothing written
    lines[0]["run_id"] = "manual__missing"
    dump.write_text(json.dumps(lines[0]) + "\n")
    refused = af.run("import", str(dump))
    assert refused.exit_code == 2, refused.output
    assert "no dag run dag_id=etl run_id=manual__missing in this Airflow database" in refused.stderr
    assert af.task_rows() == before


# -- runs and assets ----------------------------------------------------------------------------------------
@every_layout
def test_runs_and_assets_commands(af):
    af.add_dag_run()
    af.ok("set", *TASK, "job_id", "1")
    group = af.quote("group")
    af.sql(
        f"INSERT INTO asset (name, uri, {group}, extra, created_at, updated_at) "
        "VALUES ('orders', 's3://orders', 'asset', '{}', :t, :t)",
        t=af.moment(datetime(2026, 11, 1, tzinfo=UTC)),
    )
    af.sql("INSERT INTO asset_active (name, uri) VALUES ('orders', 's3://orders')")
    af.ok("set", "--asset-name", "orders", "watermark", '"2026-11-29"')

    for args, what in (
        (("runs", "delete", "--dag-id", DAG, "--run-id", RUN), "delete dag runs"),
        (("assets", "delete", "--asset-name", "orders"), "delete assets"),
    ):
        line = error_line(af.run(*args, "--yes"), 2)
        assert line.startswith(f"statestore: error: this is an Airflow metadata database: {what} with Airflow")
    assert af.sql("SELECT dag_id, run_id FROM dag_run") == [(DAG, RUN)]
    assert af.sql("SELECT name FROM asset") == [("orders",)]
    assert len(af.task_rows()) == 1
    assert af.json("get", "--asset-name", "orders", "watermark") == "2026-11-29"

    refused = af.run("set", "--asset-name", "customers", "watermark", "1")
    assert "assets are created by Airflow" in error_line(refused, 2)

    # the sweep applies: an asset Airflow deactivated loses its keys
    assert af.json("assets", "sweep", "--dry-run", "-o", "json")["would_delete"] == 0
    af.sql("DELETE FROM asset_active")
    plan = af.json("assets", "sweep", "--dry-run", "-o", "json")
    assert [(a["name"], a["keys"]) for a in plan["assets"]] == [("orders", ["watermark"])]
    assert af.json("assets", "sweep", "--yes", "-o", "json")["deleted"] == 1
    assert af.sql("SELECT count(*) FROM asset_state_store") == [(0,)]


# -- dag-run keys -------------------------------------------------------------------------------------------
@layout_34
def test_dag_run_keys(af):
    run_pk = af.add_dag_run()
    out = af.ok("set", *RUN_SCOPE, "watermark", '{"ts": "2026-11-30"}').stderr
    assert out.startswith(f"set 'watermark' for dag run dag_id={DAG} run_id={RUN} (expires ")
    af.ok("set", *RUN_SCOPE, "short", "1", "--retention", "6h")
    af.ok("set", *RUN_SCOPE, "pinned", '"p"', "--retention", "never")
    assert af.json("get", *RUN_SCOPE, "watermark") == {"ts": "2026-11-30"}
    assert af.json("get", *RUN_SCOPE, "pinned") == "p"

    now = datetime.now(UTC)
    rows = af.dag_run_rows()
    assert [row[:5] for row in rows] == [
        (run_pk, DAG, RUN, "pinned", '"p"'),
        (run_pk, DAG, RUN, "short", "1"),
        (run_pk, DAG, RUN, "watermark", '{"ts": "2026-11-30"}'),
    ]
    assert rows[0][5] is None
    assert near(rows[1][5], now + timedelta(hours=6)) and near(rows[2][5], now + timedelta(days=30))
    assert af.task_rows() == []  # a dag run's keys are not task keys

    run_entry = {"store": "dag_run", "dag_id": DAG, "run_id": RUN}
    listed = af.json("list", "--store", "dag_run", "-o", "json")
    assert without_times(listed) == [{**run_entry, "key": k} for k in ("pinned", "short", "watermark")]
    assert listed[0]["expires_at"] is None
    af.ok("set", *TASK, "job_id", "1")
    assert [e["store"] for e in af.json("list", "-o", "json")] == ["task", "dag_run", "dag_run", "dag_run"]
    assert [e["store"] for e in af.json("list", "--store", "task", "-o", "json")] == ["task"]
    assert [e["key"] for e in af.json("list", "--store", "dag_run", "--key", "short", "-o", "json")] == ["short"]

    # replacing keeps the expiry; a second write of a key replaces it (one row per run and key)
    af.ok("set", *RUN_SCOPE, "short", "2", "--keep-expiry")
    af.ok("set", *RUN_SCOPE, "watermark", '"newer"', "--retention", "never")
    rows = af.dag_run_rows()
    assert [(row[3], row[4], row[5]) for row in rows] == [
        ("pinned", '"p"', None),
        ("short", "2", rows[1][5]),
        ("watermark", '"newer"', None),
    ]

    assert af.ok("delete", *RUN_SCOPE, "short").stderr == f"deleted 'short' for dag run dag_id={DAG} run_id={RUN}\n"
    missing = af.run("get", *RUN_SCOPE, "short")
    assert f"no key 'short' for dag run dag_id={DAG} run_id={RUN}" in error_line(missing, 1)
    assert af.ok("delete", *RUN_SCOPE, "short").stderr.startswith("no such key, nothing deleted")
    assert [row[3] for row in af.dag_run_rows()] == ["pinned", "watermark"]

    refused = af.run("set", "--dag-id", DAG, "--run-id", "manual__missing", "k", "1")
    assert f"no dag run dag_id={DAG} run_id=manual__missing in this Airflow database" in error_line(refused, 2)
    assert len(af.dag_run_rows()) == 2


@pytest.mark.parametrize("af", [(e, "3.4") for e in ENGINES], ids=[f"{e}-3.4" for e in ENGINES], indirect=True)
def test_dag_run_keys_differing_in_case_are_distinct_or_refused(af):
    """Airflow 3.4 creates dag_run_state_store.key without a collation: on MariaDB it takes the database's
    case-insensitive default, where 'Key' and 'key' are one row of the unique index. There a write of the
    second is refused (it would replace the first's value), and a read is byte for byte; elsewhere both live."""
    af.add_dag_run()
    af.ok("set", *RUN_SCOPE, "Key", "1")
    second = af.run("set", *RUN_SCOPE, "key", "2")
    if af.engine != "mariadb":
        assert second.exit_code == 0, second.output
        assert (af.json("get", *RUN_SCOPE, "Key"), af.json("get", *RUN_SCOPE, "key")) == (1, 2)
        return
    assert second.exit_code == 2, second.output
    assert second.stderr == (
        f"statestore: error: cannot write key 'key' for dag run dag_id={DAG} run_id={RUN}: key 'key' and the "
        "stored 'Key' are one in the database's unique index (its collation ignores letter case or accents), "
        "so they cannot be stored apart\n"
    )
    assert af.json("get", *RUN_SCOPE, "Key") == 1
    assert af.run("get", *RUN_SCOPE, "key").exit_code == 1
    line = {"store": "dag_run", "dag_id": DAG, "run_id": RUN, "key": "KEY", "updated_at": "2026-11-30T00:00:00+00:00"}
    imported = af.run("import", "-", input=json.dumps({**line, "expires_at": None, "value": 3}) + "\n")
    assert imported.exit_code == 2, imported.output
    assert "line 1: cannot write" in imported.stderr and "'Key'" in imported.stderr, imported.stderr
    assert [row[3] for row in af.dag_run_rows()] == ["Key"]
    assert af.json("get", *RUN_SCOPE, "Key") == 1


@layout_34
def test_dag_run_default_retention_days(af, monkeypatch):
    af.add_dag_run()
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DAG_RUN_DEFAULT_RETENTION_DAYS", "3")
    af.ok("set", *RUN_SCOPE, "three_days", "1")
    af.ok("set", *TASK, "task_key", "1")  # task keys keep their own default, 30 days
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DAG_RUN_DEFAULT_RETENTION_DAYS", "0")
    af.ok("set", *RUN_SCOPE, "forever", "1")
    af.ok("set", *RUN_SCOPE, "explicit", "1", "--retention", "90s")
    now = datetime.now(UTC)
    expiry = {row[3]: row[5] for row in af.dag_run_rows()}
    assert expiry["forever"] is None
    assert near(expiry["three_days"], now + timedelta(days=3))
    assert near(expiry["explicit"], now + timedelta(seconds=90))
    assert near(af.task_rows()[0].expires_at, now + timedelta(days=30))


NO_STORE = (
    "statestore: error: this database has no dag-run state store (Airflow {layout} layout): dag-run keys need "
    "Airflow 3.4's dag_run_state_store; give --task-id for a task key\n"
)
DAG_RUN_COMMANDS = (
    ("set", *RUN_SCOPE, "k", "1"),
    ("set", *RUN_SCOPE, "k", "1", "--keep-expiry"),
    ("set", "--dag-id", DAG, "--run-id", "manual__missing", "k", "1"),
    ("get", *RUN_SCOPE, "k"),
    ("delete", *RUN_SCOPE, "k"),
    ("list", "--store", "dag_run"),
)


def check_dag_run_scope_refused(run: Callable[..., Result], layout: str) -> None:
    for args in DAG_RUN_COMMANDS:
        assert error_line(run(*args), 2) == NO_STORE.format(layout=layout), args


@layout_between
def test_dag_run_scope_without_the_dag_run_store(af):
    af.add_dag_run()
    check_dag_run_scope_refused(af.run, af.layout)
    assert af.task_rows() == []
    assert af.sql("SELECT count(*) FROM dag_run") == [(1,)]
    assert af.json("list", "-o", "json") == []  # the other stores are listed as before


def test_dag_run_scope_on_airflow_33(tmp_path):
    path = tmp_path / "airflow-3.3.2.sqlite"
    shutil.copyfile(FIXTURES / "airflow-3.3.2.sqlite", path)
    path.chmod(0o644)
    url = f"sqlite:///{path}"
    sql(
        url,
        "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
        "VALUES (:d, :r, 'manual', '2026-11-30 00:00:00.000000', 0, 'not_started')",
        d=DAG,
        r=RUN,
    )
    before = path.read_bytes()
    check_dag_run_scope_refused(lambda *args: run_cli(*args, conn=url), "3.3")
    assert path.read_bytes() == before
    # a whole run's clear is of its task keys there
    assert run_cli("set", *TASK, "k", "1", conn=url).exit_code == 0
    result = run_cli("clear", *RUN_SCOPE, "--yes", conn=url)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"deleted 1 key of dag_id={DAG} run_id={RUN} (every task of the run)")
