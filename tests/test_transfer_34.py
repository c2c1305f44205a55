"""`export` and `import` on Airflow 3.4's layout: task keys in a region (``region_id`` on their lines) and
dag-run keys (``store: "dag_run"`` lines), round trips on every engine, and their refusal on Airflow 3.3.

Each database is a real Airflow schema: the SQLite fixture copied into ``tmp_path``, or on PostgreSQL and
MariaDB the 3.3.2 dump with the 3.4 DDL steps loaded into a throwaway database (tests/fixtures/README.md).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from airflow_schema import BETWEEN, HEAD_34, HEAD_332, airflow_database
from cli_running import run_cli
from servers import ENGINES
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine
from statestore_cli.model.scopes import NIL_REGION, DagRunScope

RUN = "scheduled__2026-11-30T00:00:00+00:00"
REGION = uuid.UUID("6f1c1c64-2b0e-4d43-9a55-3b1b0c7e2a10")
OTHER_REGION = uuid.UUID("0b9e7d52-81a4-4f0c-b3c6-5d2e9a1f7c33")
UPDATED = datetime(2026, 11, 29, 10, 15, 30, tzinfo=UTC)
EXPIRES = datetime(2026, 12, 29, 10, 15, 30, 250000, tzinfo=UTC)


def add_run(url: str, dag_id: str, run_id: str = RUN) -> None:
    sql(
        url,
        "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
        "VALUES (:dag_id, :run_id, 'manual', '2026-11-01 00:00:00.000000', 0, 'not_started')",
        dag_id=dag_id,
        run_id=run_id,
    )


def stored_moment(url: str, moment: datetime) -> object:
    """``moment`` as each engine stores it: SQLite text, MySQL naive UTC, PostgreSQL aware."""
    if url.startswith("sqlite"):
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
    if url.startswith(("mysql", "mariadb")):
        return moment.replace(tzinfo=None)
    return moment


def seed(url: str) -> None:
    """Task keys outside any region and in two regions (one of them with the same task and key as a key
    outside), and dag-run keys of two runs; every ``updated_at`` fixed."""
    for dag_id in ("etl", "report"):
        add_run(url, dag_id)
    backend = MetastoreBackend(make_engine(url))
    try:
        backend.set(TaskScope("etl", RUN, "extract"), "cursor", '{"page": 1}', expires_at=EXPIRES)
        backend.set(TaskScope("etl", RUN, "extract", region_id=REGION), "cursor", '{"page": 7}', expires_at=None)
        backend.set(TaskScope("etl", RUN, "load", 3, region_id=OTHER_REGION), "rows", "[1, 2]", expires_at=None)
        backend.set(DagRunScope("etl", RUN), "watermark", '"2026-11-29"', expires_at=EXPIRES)
        backend.set(DagRunScope("etl", RUN), "lock", "true", expires_at=None)
        backend.set(DagRunScope("report", RUN), "sent", "false", expires_at=None)
    finally:
        backend.engine.dispose()
    for table in ("task_state_store", "dag_run_state_store"):
        sql(url, f"UPDATE {table} SET updated_at = :moment", moment=stored_moment(url, UPDATED))


def task_record(task_id: str, key: str, value: object, *, region: uuid.UUID | None = None, **more: object) -> dict:
    record: dict[str, object] = {"store": "task", "dag_id": "etl", "run_id": RUN, "task_id": task_id}
    if region is not None:
        record["region_id"] = str(region)
    record.update(map_index=-1, key=key, updated_at="2026-11-29T10:15:30+00:00", expires_at=None, value=value)
    record.update(more)
    return record


def run_record(dag_id: str, key: str, value: object, expires_at: str | None = None) -> dict:
    return {
        "store": "dag_run",
        "dag_id": dag_id,
        "run_id": RUN,
        "key": key,
        "updated_at": "2026-11-29T10:15:30+00:00",
        "expires_at": expires_at,
        "value": value,
    }


# What `seed` exports, in list's order: task keys (outside any region before those in one), then dag-run keys.
TASKS = [
    task_record("extract", "cursor", {"page": 1}, expires_at="2026-12-29T10:15:30.250000+00:00"),
    task_record("extract", "cursor", {"page": 7}, region=REGION),
    task_record("load", "rows", [1, 2], region=OTHER_REGION, map_index=3),
]
DAG_RUNS = [
    run_record("etl", "lock", True),
    run_record("etl", "watermark", "2026-11-29", "2026-12-29T10:15:30.250000+00:00"),
    run_record("report", "sent", False),
]


def exported(url: str, *args: str) -> list[dict]:
    result = run_cli("export", *args, conn=url)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def imported(url: str, text: str, *args: str) -> dict:
    result = run_cli("import", *args, "-", "-o", "json", conn=url, input=text)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def count(url: str, table: str) -> int:
    return sql(url, f"SELECT count(*) FROM {table}")[0][0]


# -- Airflow 3.4: round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_round_trip_of_region_and_dag_run_keys_on_airflow_34(engine, tmp_path):
    with airflow_database(engine, HEAD_34, tmp_path) as source, airflow_database(engine, HEAD_34, tmp_path) as target:
        seed(source)
        first = run_cli("export", conn=source)
        assert first.exit_code == 0, first.output
        assert [json.loads(line) for line in first.stdout.splitlines()] == TASKS + DAG_RUNS
        assert first.stderr.startswith("exported 6 keys (3 task, 3 dag-run, 0 asset) to stdout in ")

        for dag_id in ("etl", "report"):
            add_run(target, dag_id)
        dry = imported(target, first.stdout, "--dry-run")
        assert (dry["task"], dry["dag_run"], dry["keys"]) == (
            {"inserted": 3, "updated": 0},
            {"inserted": 3, "updated": 0},
            6,
        )
        assert count(target, "task_state_store") == 0 and count(target, "dag_run_state_store") == 0

        done = imported(target, first.stdout, "--batch-size", "2")
        assert (done["task"], done["dag_run"], done["asset"], done["batches"]) == (
            {"inserted": 3, "updated": 0},
            {"inserted": 3, "updated": 0},
            {"inserted": 0, "updated": 0},
            3,
        )
        assert done["created"] == {"dag_runs": 0, "assets": 0}
        again = run_cli("export", conn=target)
        assert again.stdout == first.stdout
        # The key in REGION and the one outside any region with the same task and key are two rows.
        assert count(target, "task_state_store") == 3 and count(target, "dag_run_state_store") == 3

        # Imported again: every key found by its whole identity, region included, and updated in place.
        twice = imported(target, first.stdout)
        assert (twice["task"], twice["dag_run"]) == ({"inserted": 0, "updated": 3}, {"inserted": 0, "updated": 3})
        assert count(target, "task_state_store") == 3 and count(target, "dag_run_state_store") == 3
        assert exported(target) == TASKS + DAG_RUNS
        plain = run_cli("import", "-", conn=target, input=first.stdout)
        assert plain.stderr.splitlines()[1:] == [
            "  task keys: 0 inserted, 3 updated",
            "  dag-run keys: 0 inserted, 3 updated",
            "  asset keys: 0 inserted, 0 updated",
        ]


@pytest.mark.parametrize("engine", ENGINES)
def test_import_writes_the_region_of_each_line_as_the_database_stores_it(engine, tmp_path):
    lines = [
        task_record("t", "k", "outside"),
        task_record("t", "k", "nil given", region=NIL_REGION),  # the same key: the later line wins
        task_record("t", "k", "inside", region=REGION),
    ]
    with airflow_database(engine, HEAD_34, tmp_path) as url:
        add_run(url, "etl")
        done = imported(url, "\n".join(map(json.dumps, lines)))
        assert done["task"] == {"inserted": 2, "updated": 0}
        backend = MetastoreBackend(make_engine(url))
        try:
            assert backend.get(TaskScope("etl", RUN, "t"), "k") == '"nil given"'
            assert backend.get(TaskScope("etl", RUN, "t", region_id=REGION), "k") == '"inside"'
        finally:
            backend.engine.dispose()
        assert exported(url) == [task_record("t", "k", "nil given"), lines[2]]  # the nil region is not shown


@pytest.mark.parametrize("engine", ENGINES)
def test_export_filters_select_dag_run_keys_as_list_does(engine, tmp_path):
    with airflow_database(engine, HEAD_34, tmp_path) as url:
        seed(url)
        assert exported(url, "--store", "dag_run") == DAG_RUNS
        assert exported(url, "--store", "task") == TASKS
        assert exported(url, "--dag-id", "etl", "--run-id", RUN) == TASKS + DAG_RUNS[:2]
        assert exported(url, "--dag-id", "report") == DAG_RUNS[2:]
        assert exported(url, "--key", "lock") == DAG_RUNS[:1]
        assert exported(url, "--task-id", "extract") == TASKS[:2]  # a task's filter leaves dag-run keys out
        assert exported(url, "--map-index", "3") == TASKS[2:]
        assert exported(url, "--store", "asset") == []


@pytest.mark.parametrize("engine", ENGINES)
def test_dag_run_keys_need_their_run_in_an_airflow_database(engine, tmp_path):
    with airflow_database(engine, HEAD_34, tmp_path) as url:
        add_run(url, "etl")
        lines = "\n".join(json.dumps(r) for r in (DAG_RUNS[0], DAG_RUNS[2]))
        refused = run_cli("import", "-", conn=url, input=lines)
        assert refused.exit_code == 2, refused.output
        assert refused.stderr == (
            f"statestore: error: line 2: no dag run dag_id=report run_id={RUN} in this Airflow database; "
            "dag-run keys can only be imported for runs Airflow created; nothing was imported\n"
        )
        assert count(url, "dag_run_state_store") == 0


# -- Airflow 3.3 (and the layout between): refused, and the export as before ----------------------------
REGION_LINE = json.dumps(task_record("t", "k", 1, region=REGION))
DAG_RUN_LINE = json.dumps(DAG_RUNS[0])


@pytest.mark.parametrize("engine", ENGINES)
def test_airflow_33_refuses_region_and_dag_run_lines_and_exports_as_before(engine, tmp_path):
    outside = json.dumps(task_record("t", "k", 1, expires_at="2026-12-29T10:15:30.250000+00:00"))
    nil = json.dumps(task_record("t", "nil", 2, region=NIL_REGION))
    with airflow_database(engine, HEAD_332, tmp_path) as url:
        add_run(url, "etl")
        for line, problem in (
            (
                REGION_LINE,
                f"a task key in region_id {REGION}, but this database has no regions (the Airflow 3.3 layout): "
                "its keys would be merged with the keys of other regions",
            ),
            (
                DAG_RUN_LINE,
                "a dag-run key, but this database has no dag-run state store (the Airflow 3.3 layout): "
                "dag-run keys need Airflow 3.4's dag_run_state_store",
            ),
        ):
            for dry in ([], ["--dry-run"]):
                refused = run_cli("import", *dry, "-", conn=url, input=f"{outside}\n{line}\n")
                assert refused.exit_code == 2, refused.output
                after = "nothing was written (dry run)" if dry else "nothing was imported"
                assert refused.stderr == f"statestore: error: line 2: {problem}; {after}\n"
                assert count(url, "task_state_store") == 0
        # Outside any region (the nil UUID given or not) is what a 3.3 table holds.
        done = imported(url, f"{outside}\n{nil}\n")
        assert (done["task"], done["dag_run"]) == ({"inserted": 2, "updated": 0}, {"inserted": 0, "updated": 0})
        result = run_cli("export", conn=url)
        assert result.stdout == f"{outside}\n" + json.dumps(task_record("t", "nil", 2)) + "\n"  # as before
        assert result.stderr.startswith("exported 2 keys (2 task, 0 asset) to stdout in ")
        plain = run_cli("import", "-", conn=url, input=outside)
        assert "dag-run" not in plain.stderr, plain.output
        refused = run_cli("export", "--store", "dag_run", conn=url)
        assert refused.exit_code == 2
        assert "no dag-run state store" in refused.stderr


@pytest.mark.parametrize("engine", ENGINES)
def test_the_layout_between_takes_regions_but_refuses_dag_run_keys(engine, tmp_path):
    with airflow_database(engine, BETWEEN, tmp_path) as url:
        add_run(url, "etl")
        refused = run_cli("import", "-", conn=url, input=DAG_RUN_LINE)
        assert refused.exit_code == 2
        assert refused.stderr.startswith(
            "statestore: error: line 1: a dag-run key, but this database has no dag-run state store "
            "(the Airflow 3.4-between layout)"
        )
        done = imported(url, f"{REGION_LINE}\n" + json.dumps(task_record("t", "k", 2)))
        assert done["task"] == {"inserted": 2, "updated": 0}
        assert exported(url) == [task_record("t", "k", 2), task_record("t", "k", 1, region=REGION)]


# -- bad lines and MySQL's twins ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "record, problem",
    [
        (task_record("t", "k", 1) | {"region_id": "nope"}, 'region_id "nope" is not a UUID'),
        (task_record("t", "k", 1) | {"region_id": 7}, "region_id must be a UUID string, got 7"),
        (task_record("t", "k", 1) | {"region_id": None}, "region_id must be a UUID string, got null"),
        ({k: v for k, v in DAG_RUNS[0].items() if k != "key"}, "a dag-run key needs key: missing"),
        (
            DAG_RUNS[0] | {"task_id": "t"},
            "unknown field 'task_id' in a dag-run key (its fields: store, dag_id, run_id, key, updated_at, "
            "expires_at, value)",
        ),
        (DAG_RUNS[0] | {"run_id": ""}, 'run_id must be a non-empty string, got ""'),
        (DAG_RUNS[0] | {"value": None}, "value is JSON null, which cannot be stored; leave the key out instead"),
    ],
    ids=range(7),
)
def test_bad_region_and_dag_run_lines_are_named_by_their_line(record, problem, tmp_path):
    with airflow_database("sqlite", HEAD_34, tmp_path) as url:
        add_run(url, "etl")
        good = json.dumps(task_record("t", "good", 1))
        refused = run_cli("import", "-", conn=url, input=f"{good}\n{json.dumps(record)}\n")
        assert refused.exit_code == 2, refused.output
        assert refused.stderr == f"statestore: error: line 2: {problem}; nothing was imported\n"
        assert count(url, "task_state_store") == 0


@pytest.mark.slow  # on the database servers
def test_mysql_refuses_dag_run_keys_differing_only_in_trailing_spaces(tmp_path):
    with airflow_database("mariadb", HEAD_34, tmp_path) as url:
        add_run(url, "etl")
        padded = run_record("etl", "lock ", 1)
        refused = run_cli("import", "-", conn=url, input=f"{DAG_RUN_LINE}\n{json.dumps(padded)}\n")
        assert refused.exit_code == 2, refused.output
        assert refused.stderr.startswith(
            f"statestore: error: line 2: cannot write key 'lock ' for dag run dag_id=etl run_id={RUN}: key 'lock ' "
            "and line 1's key 'lock' differ only in trailing spaces"
        )
        assert imported(url, DAG_RUN_LINE)["dag_run"] == {"inserted": 1, "updated": 0}
        refused = run_cli("import", "-", conn=url, input=json.dumps(padded))
        assert refused.exit_code == 2, refused.output
        assert "key 'lock ' and the stored key 'lock' differ only in trailing spaces" in refused.stderr
        assert sql(url, "SELECT {key}, value FROM dag_run_state_store") == [("lock", "true")]
