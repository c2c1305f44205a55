"""The rules that remove keys other than by expiry, on every engine: the orphan sweep of inactive
assets, clearing a whole run or dag, deleting runs and assets of a standalone store, and the two
task-instance events (success with ``clear_on_success``, being cleared unless ``keep_task_state``)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from cli_running import run_cli
from stores import sql

from statestore_cli import TaskScope, load_settings
from statestore_cli.backends.store import Store
from statestore_cli.ops.lifecycle import task_instance_cleared, task_instance_succeeded

ALL_ENGINES = True

RUN = "scheduled__2026-11-30T00:00:00+00:00"
LONG_KEY = "external_system_reference_for_partition_2026_11_30_eu_west_1"
AIRFLOW_332 = Path(__file__).resolve().parent / "fixtures" / "airflow-3.3.2.sqlite"


def _asset(cli, name: str, *keys: str) -> None:
    for key in keys:
        assert cli("set", "--asset-name", name, "--asset-uri", f"s3://bucket/{name}", key, '"v"').exit_code == 0


def _deactivate(db_url: str, name: str) -> None:
    """What Airflow does when no dag uses an asset any more: its asset_active row goes, the asset stays."""
    assert sql(db_url, "SELECT count(*) FROM asset_active WHERE name = :n", n=name) == [(1,)]
    sql(db_url, "DELETE FROM asset_active WHERE name = :n", n=name)


def _asset_keys(db_url: str) -> list[tuple[str, str]]:
    rows = sql(db_url, "SELECT a.name, s.{key} FROM asset_state_store s JOIN asset a ON a.id = s.asset_id")
    return sorted(rows)


# -- assets sweep ----------------------------------------------------------------------------------------
def test_sweep_deletes_the_keys_of_inactive_assets_only(cli, db_url):
    _asset(cli, "orders", LONG_KEY, "watermark")
    _asset(cli, "customers", "watermark")
    _asset(cli, "invoices", "cursor", "watermark")
    _deactivate(db_url, "orders")
    _deactivate(db_url, "invoices")

    plan = cli("assets", "sweep", "--dry-run", "-o", "json")
    assert plan.exit_code == 0, plan.output
    doc = json.loads(plan.stdout)
    assert doc["dry_run"] is True and doc["would_delete"] == 4
    assert [(a["name"], a["uri"], a["keys"]) for a in doc["assets"]] == [
        ("invoices", "s3://bucket/invoices", ["cursor", "watermark"]),
        ("orders", "s3://bucket/orders", [LONG_KEY, "watermark"]),
    ]
    assert len(_asset_keys(db_url)) == 5  # a dry run deletes nothing

    report = json.loads(cli("assets", "sweep", "--yes", "--batch-size", "1", "-o", "json").stdout)
    assert (report["dry_run"], report["deleted"], report["batches"]) == (False, 4, 4)
    assert [(a["name"], a["deleted"]) for a in report["assets"]] == [("invoices", 2), ("orders", 2)]
    assert _asset_keys(db_url) == [("customers", "watermark")]
    # the assets themselves stay: only their keys were orphans
    assert sql(db_url, "SELECT count(*) FROM asset") == [(3,)]
    again = cli("assets", "sweep", "--yes")
    assert (again.stdout, again.stderr) == ("", "nothing to sweep: no inactive asset has keys\n")


def test_sweep_output_for_people_is_grouped_by_asset(cli, db_url):
    _asset(cli, "orders", LONG_KEY, "watermark")
    _asset(cli, "customers", "watermark")
    _deactivate(db_url, "orders")
    plain = cli("assets", "sweep", "--dry-run", "-o", "plain", "--header")
    asset_id = sql(db_url, "SELECT id FROM asset WHERE name = 'orders'")[0][0]
    assert plain.stdout.splitlines() == [
        "asset_id\tname\turi\tkey",
        f"{asset_id}\torders\ts3://bucket/orders\t{LONG_KEY}",
        f"{asset_id}\torders\ts3://bucket/orders\twatermark",
    ]
    assert plain.stderr == "dry run: 2 keys of 1 inactive asset would be deleted\n"
    table = cli("assets", "sweep", "--dry-run", "-o", "table").stdout.splitlines()
    assert table == [
        f"asset orders (uri s3://bucket/orders, asset_id {asset_id}): 2 keys",
        f"  {LONG_KEY}",
        "  watermark",
        "dry run: 2 keys of 1 inactive asset would be deleted",
    ]
    done = cli("assets", "sweep", "--yes", "-o", "plain")
    assert done.stdout == f"{asset_id}\torders\ts3://bucket/orders\t2\n"
    assert done.stderr == "deleted 2 keys of 1 inactive asset in 1 batch\n"


def test_sweep_rechecks_activity_when_it_deletes(cli, db_url):
    """The real run selects again: an asset reactivated after a dry run listed it keeps its keys."""
    _asset(cli, "orders", "watermark")
    _deactivate(db_url, "orders")
    assert json.loads(cli("assets", "sweep", "--dry-run", "-o", "json").stdout)["would_delete"] == 1
    sql(db_url, "INSERT INTO asset_active (name, uri) VALUES ('orders', 's3://bucket/orders')")
    assert json.loads(cli("assets", "sweep", "--yes", "-o", "json").stdout)["deleted"] == 0
    assert _asset_keys(db_url) == [("orders", "watermark")]


@pytest.mark.parametrize("batch_size,backed_up", [(0, False), (1, False), (0, True), (1, True)])
def test_a_confirmed_sweep_deletes_only_the_assets_it_was_confirmed_for(cli, db_url, tmp_path, batch_size, backed_up):
    """``sweep(only=...)``: the assets the question named; one that went inactive since keeps its keys, and one
    of them reactivated meanwhile keeps its keys too. Every path: one statement, batches, each with a backup."""
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.lifecycle import plan_sweep, sweep

    _asset(cli, "orders", LONG_KEY, "watermark")
    _asset(cli, "invoices", "cursor")
    _asset(cli, "customers", "watermark")
    _asset(cli, "payments", "watermark")
    for name in ("orders", "invoices", "payments"):
        _deactivate(db_url, name)
    settings = load_settings(conn_override=db_url)
    shown = [
        found for found in plan_sweep(Store.open(settings)) if found.name != "payments"
    ]  # payments: after the question
    sql(db_url, "INSERT INTO asset_active (name, uri) VALUES ('invoices', 's3://bucket/invoices')")
    backup = BackupFile(tmp_path / "sweep.jsonl") if backed_up else None

    report = sweep(Store.open(settings), batch_size, backup=backup, only=[found.asset_id for found in shown])
    assert [(a.name, a.deleted) for a in report.assets] == [("orders", 2)]
    assert _asset_keys(db_url) == [("customers", "watermark"), ("invoices", "cursor"), ("payments", "watermark")]
    if backup is not None:
        backup.close()
        lines = [json.loads(line) for line in (tmp_path / "sweep.jsonl").read_text().splitlines()]
        assert sorted((line["name"], line["key"]) for line in lines) == [("orders", LONG_KEY), ("orders", "watermark")]
    assert sweep(Store.open(settings), batch_size, only=[]).deleted == 0
    assert _asset_keys(db_url)[-1] == ("payments", "watermark")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sweep_on_an_airflow_database(db_url, tmp_path):
    path = tmp_path / "airflow.db"
    shutil.copyfile(AIRFLOW_332, path)
    conn = f"sqlite:///{path}"
    stamp = "2026-11-01 00:00:00.000000"
    with sqlite3.connect(path) as db:
        for name in ("orders", "customers"):
            db.execute(
                'INSERT INTO asset (name, uri, "group", extra, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)',
                (name, f"s3://{name}", "asset", "{}", stamp, stamp),
            )
            db.execute("INSERT INTO asset_active (name, uri) VALUES (?, ?)", (name, f"s3://{name}"))
    for name in ("orders", "customers"):
        assert run_cli("set", "--asset-name", name, "watermark", "1", conn=conn).exit_code == 0
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM asset_active WHERE name = 'orders'")
    plan = json.loads(run_cli("assets", "sweep", "--dry-run", "-o", "json", conn=conn).stdout)
    assert [(a["name"], a["keys"]) for a in plan["assets"]] == [("orders", ["watermark"])]
    assert json.loads(run_cli("assets", "sweep", "--yes", "-o", "json", conn=conn).stdout)["deleted"] == 1
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT asset_id, key FROM asset_state_store").fetchall() == [(2, "watermark")]


# -- clear a run or a dag --------------------------------------------------------------------------------
def _task_keys(cli) -> None:
    for dag in ("etl", "ml"):
        for run in (RUN, "manual__1"):
            for task in ("submit", "load"):
                for map_index in ("-1", "3"):
                    args = ("--dag-id", dag, "--run-id", run, "--task-id", task, "--map-index", map_index)
                    assert cli("set", *args, LONG_KEY, "1").exit_code == 0


def _remaining(db_url: str) -> list[tuple]:
    return sorted(sql(db_url, "SELECT dag_id, run_id, count(*) FROM task_state_store GROUP BY dag_id, run_id"))


def test_clear_a_whole_run_in_batches(cli, db_url):
    _task_keys(cli)
    _asset(cli, "orders", "watermark")
    refused = cli("clear", "--dag-id", "etl", "--run-id", RUN)
    assert refused.exit_code == 2 and "pass --yes" in refused.stderr
    assert len(_remaining(db_url)) == 4
    result = cli("clear", "--dag-id", "etl", "--run-id", RUN, "--batch-size", "3", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"deleted 4 keys of dag_id=etl run_id={RUN} (every task of the run) in 2 batches\n"
    assert _remaining(db_url) == [("etl", "manual__1", 4), ("ml", "manual__1", 4), ("ml", RUN, 4)]
    assert _asset_keys(db_url) == [("orders", "watermark")]
    nothing = cli("clear", "--dag-id", "etl", "--run-id", RUN, "--yes")
    assert nothing.stderr == f"nothing to clear: no task keys for dag_id=etl run_id={RUN}\n"


def test_clear_a_whole_dag(cli, db_url):
    _task_keys(cli)
    result = cli("clear", "--dag-id", "ml", "--yes")
    assert result.stderr == "deleted 8 keys of dag_id=ml (every run and task of the dag) in 1 batch\n"
    assert _remaining(db_url) == [("etl", "manual__1", 4), ("etl", RUN, 4)]


def test_clear_of_a_run_refuses_map_index_options(cli, db_url):
    _task_keys(cli)
    for extra in (("--map-index", "3"), ("--all-map-indices",)):
        result = cli("clear", "--dag-id", "etl", "--run-id", RUN, *extra, "--yes")
        assert result.exit_code == 2 and "needs --task-id" in result.stderr
    result = cli("clear", "--dag-id", "etl", "--run-id", RUN, "--task-id", "load", "--batch-size", "5", "--yes")
    assert result.exit_code == 2 and "--batch-size applies to a whole run or dag" in result.stderr
    assert sum(n for *_, n in _remaining(db_url)) == 16


# -- deleting runs and assets of a standalone store ----------------------------------------------------------
def test_runs_delete_cascades_to_the_runs_keys(cli, db_url):
    _task_keys(cli)
    result = cli("runs", "delete", "--dag-id", "etl", "--run-id", RUN, "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"deleted the dag run dag_id=etl run_id={RUN} and its 4 keys\n"
    assert sql(db_url, "SELECT count(*) FROM dag_run WHERE dag_id = 'etl' AND run_id = :r", r=RUN) == [(0,)]
    assert ("etl", RUN, 4) not in _remaining(db_url) and len(_remaining(db_url)) == 3
    missing = cli("runs", "delete", "--dag-id", "etl", "--run-id", RUN, "--yes")
    assert missing.exit_code == 1 and f"no dag run dag_id=etl run_id={RUN}" in missing.stderr
    assert cli("runs", "delete", "--dag-id", "ml", "--run-id", RUN).exit_code == 2  # no terminal, no --yes


def test_assets_delete_cascades_to_its_keys_and_activity(cli, db_url):
    _asset(cli, "orders", "a", "b")
    _asset(cli, "customers", "a")
    result = cli("assets", "delete", "--asset-name", "orders", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr.endswith("name=orders uri=s3://bucket/orders and its 2 keys\n")
    assert _asset_keys(db_url) == [("customers", "a")]
    assert sql(db_url, "SELECT name FROM asset UNION ALL SELECT name FROM asset_active") == [
        ("customers",),
        ("customers",),
    ]
    _deactivate(db_url, "customers")  # an inactive asset can be deleted too
    assert cli("assets", "delete", "--asset-uri", "s3://bucket/customers", "--yes").exit_code == 0
    assert _asset_keys(db_url) == []
    assert cli("assets", "delete", "--asset-name", "orders", "--yes").exit_code == 1


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_runs_and_assets_delete_are_refused_on_an_airflow_database(db_url, tmp_path):
    path = tmp_path / "airflow.db"
    shutil.copyfile(AIRFLOW_332, path)
    before = path.read_bytes()
    conn = f"sqlite:///{path}"
    for args in (("runs", "delete", "--dag-id", "etl", "--run-id", RUN), ("assets", "delete", "--asset-name", "a")):
        result = run_cli(*args, "--yes", conn=conn)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("statestore: error: this is an Airflow metadata database: delete ")
    assert path.read_bytes() == before


# -- task instance events ----------------------------------------------------------------------------------
WORKER = '''
import json
from sqlalchemy import create_engine, text
from sample_backends import NullBackend

CALLS = []


class RecordingWorker(NullBackend):
    """A worker-side backend that records each clear() with the rows of its scope still in the database."""

    def clear(self, scope, *, all_map_indices=False, session=None):
        import os

        engine = create_engine(os.environ["SS_TEST_URL"])
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM task_state_store WHERE dag_id = :d AND run_id = :r AND task_id = :t"),
                {"d": scope.dag_id, "r": scope.run_id, "t": scope.task_id},
            ).scalar()
        engine.dispose()
        CALLS.append((scope.task_id, scope.map_index, all_map_indices, left))
        return 0
'''


@pytest.fixture
def worker(monkeypatch, tmp_path, db_url):
    folder = tmp_path / "worker_plugins"
    folder.mkdir()
    (folder / "ss_recording_worker.py").write_text(WORKER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("SS_TEST_URL", db_url)
    yield
    sys.modules.pop("ss_recording_worker", None)


def _task_instance_keys(db_url: str) -> list[tuple]:
    return sorted(sql(db_url, "SELECT task_id, map_index, {key} FROM task_state_store"))


def test_success_clears_task_keys_only_with_clear_on_success(cli, db_url, monkeypatch):
    _task_keys(cli)
    _asset(cli, "orders", "watermark")
    scope = TaskScope("etl", RUN, "load", 3)
    assert task_instance_succeeded(Store.open(load_settings(conn_override=db_url)), scope) == 0
    assert sum(n for *_, n in _remaining(db_url)) == 16  # off by default: kept for observability
    monkeypatch.setenv("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS", "True")
    assert task_instance_succeeded(Store.open(load_settings(conn_override=db_url)), scope) == 1
    gone = sql(db_url, "SELECT count(*) FROM task_state_store WHERE task_id = 'load' AND map_index = 3")
    assert gone == [(3,)]  # the other runs' and dags' map index 3 of load stay
    assert sum(n for *_, n in _remaining(db_url)) == 15
    assert _asset_keys(db_url) == [("orders", "watermark")]  # never asset keys


def test_cleared_task_instance_discards_its_keys_unless_kept(cli, db_url):
    _task_keys(cli)
    settings = load_settings(conn_override=db_url)
    scope = TaskScope("ml", "manual__1", "submit", -1)
    assert task_instance_cleared(Store.open(settings), scope, keep_task_state=True) == 0
    assert sum(n for *_, n in _remaining(db_url)) == 16
    assert task_instance_cleared(Store.open(settings), scope) == 1
    left = sql(
        db_url,
        "SELECT map_index FROM task_state_store WHERE dag_id = 'ml' AND run_id = 'manual__1' AND task_id = 'submit'",
    )
    assert left == [(3,)]


def test_worker_backend_clear_runs_after_the_rows_are_gone(cli, db_url, monkeypatch, worker):
    _task_keys(cli)  # written without the worker backend: their values are plain JSON
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "ss_recording_worker.RecordingWorker")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS", "true")
    import ss_recording_worker

    settings = load_settings(conn_override=db_url)
    task_instance_succeeded(Store.open(settings), TaskScope("etl", RUN, "load", 3))
    task_instance_cleared(Store.open(settings), TaskScope("etl", RUN, "submit", -1))
    # each clear() saw its task's other map index only: the cleared rows were gone already
    assert ss_recording_worker.CALLS == [("load", 3, False, 1), ("submit", -1, False, 1)]
    ss_recording_worker.CALLS.clear()
    assert cli("clear", "--dag-id", "etl", "--run-id", RUN, "--yes").exit_code == 0
    assert sorted(ss_recording_worker.CALLS) == [("load", -1, True, 0), ("submit", -1, True, 0)]


def test_worker_backend_clears_tasks_differing_by_a_trailing_space_apart(cli, db_url, monkeypatch, worker):
    """MySQL's DISTINCT would take `t` and `t ` for one task and leave the worker's objects of the other."""
    for task_id, key in (("t", "a"), ("t ", "b")):  # one key each: MySQL refuses `a` for both
        assert cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", task_id, key, "1").exit_code == 0
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "ss_recording_worker.RecordingWorker")
    import ss_recording_worker

    assert cli("clear", "--dag-id", "d", "--run-id", "r", "--yes").exit_code == 0
    assert sorted(ss_recording_worker.CALLS) == [("t", -1, True, 0), ("t ", -1, True, 0)]


# -- confirmation at a terminal ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_clear_of_a_run_asks_with_the_count_at_a_terminal(cli, db_url):
    from terminals import Terminal, terminal_env

    _task_keys(cli)
    term = Terminal(["--conn", db_url, "clear", "--dag-id", "etl", "--run-id", RUN], terminal_env(columns=80))
    term.wait_for(b"[y/N] ")
    # broken between words at 80 columns, the run id whole
    assert f"Delete 4 keys of dag_id=etl run_id={RUN} (every\r\ntask of the run)? [y/N] ".encode() in term.seen
    term.type(b"n\n")
    status, screen = term.finish()
    assert status == 1 and screen.endswith("statestore: nothing deleted (answered no)\n"), screen
    assert sum(n for *_, n in _remaining(db_url)) == 16

    term = Terminal(["--conn", db_url, "clear", "--dag-id", "ml"], terminal_env(columns=80))
    term.wait_for(b"[y/N] ")
    assert b"Delete 8 keys of dag_id=ml (every run and task of the dag)? [y/N] " in term.seen
    term.type(b"y\n")
    status, screen = term.finish()
    assert status == 0 and "deleted 8 keys of dag_id=ml (every run and task of the dag) in 1 batch" in screen
    assert [dag for dag, *_ in _remaining(db_url)] == ["etl", "etl"]


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_runs_and_assets_delete_ask_at_a_terminal(cli, db_url):
    from terminals import Terminal, terminal_env

    _task_keys(cli)
    _asset(cli, "orders", "a", "b")
    term = Terminal(["--conn", db_url, "runs", "delete", "--dag-id", "etl", "--run-id", RUN], terminal_env())
    term.wait_for(b"[y/N] ")
    assert f"Delete the dag run dag_id=etl run_id={RUN} and its 4 keys? [y/N] ".encode() in term.seen
    term.type(b"\x04")
    assert term.finish()[0] == 1
    term = Terminal(["--conn", db_url, "assets", "delete", "--asset-name", "orders"], terminal_env())
    term.wait_for(b"[y/N] ")
    assert b"uri=s3://bucket/orders and its 2 keys? [y/N] " in term.seen
    term.type(b"yes\n")
    assert term.finish()[0] == 0
    assert sum(n for *_, n in _remaining(db_url)) == 16 and _asset_keys(db_url) == []
