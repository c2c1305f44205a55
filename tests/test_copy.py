"""`copy` and `copy --move`: a scope's keys carried to another scope, on every engine and on Airflow databases."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from airflow34 import add_runs, airflow34_database
from airflow_schema import HEAD_332, airflow_database
from cli_running import run_cli
from stores import as_utc, sql

from statestore_cli import TaskScope
from statestore_cli.backends.base import REF_MARKER
from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.scopes import AssetScope
from statestore_cli.ops.copying import copy_keys

ALL_ENGINES = True

RUN, OTHER_RUN = "manual__1", "manual__2"
OLD = ["--dag-id", "etl", "--run-id", RUN, "--task-id", "submit"]
OLD_SCOPE = f"dag_id=etl run_id={RUN} task_id=submit map_index=-1"
NEW_SCOPE = f"dag_id=etl run_id={RUN} task_id=submit_v2 map_index=-1"
WORKER = "AIRFLOW__WORKERS__STATE_STORE_BACKEND"
LATER = datetime(2031, 1, 1, tzinfo=UTC)


def _keys(cli, *scope: str) -> dict[str, object]:
    """The keys of a scope as `list -o json` shows them: key -> (value, expires_at)."""
    listed = json.loads(cli("list", *scope, "-o", "json").stdout)
    return {row["key"]: row["expires_at"] for row in listed}


def _value(cli, *args: str) -> object:
    result = cli("get", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["value"]


def _seed_task(cli) -> None:
    assert cli("set", *OLD, "job_id", '{"id": "j-1"}', "--expires-at", "2031-01-01T00:00:00Z").exit_code == 0
    assert cli("set", *OLD, "cursor", "42", "--retention", "never").exit_code == 0


# -- task to task ---------------------------------------------------------------------------------------------
def test_a_task_s_keys_go_to_the_renamed_task_with_their_values_and_expiries(cli):
    _seed_task(cli)
    before = datetime.now(UTC).replace(microsecond=0)
    result = cli("copy", *OLD, "--to-task-id", "submit_v2")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"copied 2 keys from {OLD_SCOPE} to {NEW_SCOPE}\n"
    new = ["--dag-id", "etl", "--run-id", RUN, "--task-id", "submit_v2"]
    assert _value(cli, *new, "job_id") == {"id": "j-1"}
    assert _value(cli, *new, "cursor") == 42
    listed = {row["key"]: row for row in json.loads(cli("list", *new, "-o", "json").stdout)}
    assert as_utc(listed["job_id"]["expires_at"]) == LATER
    assert listed["cursor"]["expires_at"] is None
    assert as_utc(listed["job_id"]["updated_at"]) >= before - timedelta(seconds=1), "updated_at is the copy's"
    assert set(_keys(cli, *OLD)) == {"cursor", "job_id"}, "a copy keeps the source"


def test_only_the_keys_named_to_another_run(cli):
    _seed_task(cli)
    result = cli("copy", *OLD, "job_id", "--to-run-id", OTHER_RUN, "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "copied": 1,
        "overwritten": 0,
        "moved": False,
        "source": OLD_SCOPE,
        "target": f"dag_id=etl run_id={OTHER_RUN} task_id=submit map_index=-1",
    }
    other = ["--dag-id", "etl", "--run-id", OTHER_RUN, "--task-id", "submit"]
    assert list(_keys(cli, *other)) == ["job_id"]


def test_a_key_the_source_lacks_is_not_found_and_nothing_is_copied(cli):
    _seed_task(cli)
    result = cli("copy", *OLD, "job_id", "nope", "--to-task-id", "submit_v2")
    assert result.exit_code == 1
    assert result.stderr == f"statestore: error: no key 'nope' for {OLD_SCOPE}; nothing copied\n"
    assert _keys(cli, "--task-id", "submit_v2") == {}


def test_a_scope_without_keys_copies_nothing(cli):
    result = cli("copy", *OLD, "--to-task-id", "submit_v2", "--move")
    assert (result.exit_code, result.stderr) == (0, f"nothing to copy: no keys for {OLD_SCOPE}\n"), result.output


# -- assets ---------------------------------------------------------------------------------------------------
def test_an_asset_s_keys_go_to_another_asset_by_name_and_by_id(cli):
    assert cli("set", "--asset-name", "orders", "watermark", '"2026-11-30"').exit_code == 0
    assert cli("set", "--asset-name", "orders_v2", "other", "1").exit_code == 0
    result = cli("copy", "--asset-name", "orders", "--to-asset-name", "orders_v2")
    assert result.exit_code == 0, result.output
    assert result.stderr == "copied 1 key from name=orders to name=orders_v2\n"
    assert _value(cli, "--asset-name", "orders_v2", "watermark") == "2026-11-30"
    ids = {row["name"]: row["asset_id"] for row in json.loads(cli("list", "--store", "asset", "-o", "json").stdout)}
    result = cli("copy", "--asset-id", str(ids["orders"]), "--to-asset-id", str(ids["orders_v2"]), "--move", "--yes")
    assert result.exit_code == 2, "the target has watermark already"
    result = cli("copy", "--asset-id", str(ids["orders"]), "--to-asset-id", str(ids["orders_v2"]))
    assert result.exit_code == 2
    assert "already has 1 of the keys ('watermark')" in result.stderr
    assert cli("set", "--asset-name", "orders", "watermark", '"2026-12-01"').exit_code == 0
    args = ("--asset-id", str(ids["orders"]), "--to-asset-id", str(ids["orders_v2"]), "--move", "--overwrite", "--yes")
    result = cli("copy", *args)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"moved 1 key from asset_id={ids['orders']} to asset_id={ids['orders_v2']} (1 key replaced)\n"
    )
    assert _value(cli, "--asset-name", "orders_v2", "watermark") == "2026-12-01"
    assert _keys(cli, "--asset-name", "orders") == {}


def test_an_asset_copied_onto_itself_is_refused(cli):
    assert cli("set", "--asset-name", "orders", "watermark", "1").exit_code == 0
    asset_id = json.loads(cli("list", "-o", "json").stdout)[0]["asset_id"]
    result = cli("copy", "--asset-name", "orders", "--to-asset-id", str(asset_id))
    assert result.exit_code == 2
    assert result.stderr == (
        f"statestore: error: the target is the source (asset_id={asset_id}); give another --to-asset-name, "
        "--to-asset-uri or --to-asset-id\n"
    )


# -- overwrite and confirmation -------------------------------------------------------------------------------
def test_existing_target_keys_are_refused_without_overwrite_and_nothing_is_written(cli):
    _seed_task(cli)
    new = ["--dag-id", "etl", "--run-id", RUN, "--task-id", "submit_v2"]
    assert cli("set", *new, "job_id", '"mine"').exit_code == 0
    result = cli("copy", *OLD, "--to-task-id", "submit_v2")
    assert result.exit_code == 2
    assert result.stderr == (
        f"statestore: error: {NEW_SCOPE} already has 1 of the keys ('job_id'); nothing copied: pass --overwrite "
        "to replace them\n"
    )
    assert list(_keys(cli, *new)) == ["job_id"], "not even the new key was written"
    result = cli("copy", *OLD, "--to-task-id", "submit_v2", "--overwrite")
    assert result.exit_code == 2, "replacing keys needs --yes off a terminal"
    assert result.stderr == (
        "statestore: error: --overwrite replaces keys and stdin is not a terminal to confirm on; pass --yes\n"
    )
    assert _value(cli, *new, "job_id") == "mine"
    result = cli("copy", *OLD, "--to-task-id", "submit_v2", "--overwrite", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"copied 2 keys from {OLD_SCOPE} to {NEW_SCOPE} (1 key replaced)\n"
    assert _value(cli, *new, "job_id") == {"id": "j-1"}


def test_overwrite_writing_only_new_keys_asks_nothing(cli):
    _seed_task(cli)
    result = cli("copy", *OLD, "--to-task-id", "submit_v2", "--overwrite")
    assert result.exit_code == 0, result.output


# -- move -----------------------------------------------------------------------------------------------------
def test_move_needs_yes_off_a_terminal_then_deletes_the_source(cli):
    _seed_task(cli)
    result = cli("copy", *OLD, "--to-task-id", "submit_v2", "--move")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: --move deletes the source keys and stdin is not a terminal to confirm on; pass --yes\n"
    )
    assert _keys(cli, "--task-id", "submit_v2") == {}
    result = cli("copy", *OLD, "--to-task-id", "submit_v2", "--move", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"moved 2 keys from {OLD_SCOPE} to {NEW_SCOPE}\n"
    assert _keys(cli, *OLD) == {}
    assert set(_keys(cli, "--task-id", "submit_v2")) == {"cursor", "job_id"}


def test_a_move_that_fails_midway_leaves_source_and_target_as_they_were(cli, db_url, monkeypatch, sample_objects):
    monkeypatch.setenv(WORKER, "sample_backends.PickyWorker")
    for key in ("a", "b", "poison"):  # copied in key order: a and b are written and deleted before poison fails
        assert cli("set", *OLD, key, json.dumps(key)).exit_code == 0
    before = sql(db_url, "SELECT task_id, {key}, value FROM task_state_store ORDER BY task_id, {key}")
    result = cli("copy", *OLD, "--to-task-id", "submit_v2", "--move", "--yes")
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        "statestore: error: [workers] state_store_backend sample_backends.PickyWorker could not copy key 'poison': "
        "ValueError: will not copy poison; nothing copied\n"
    )
    assert sql(db_url, "SELECT task_id, {key}, value FROM task_state_store ORDER BY task_id, {key}") == before
    assert _value(cli, *OLD, "a") == "a"


# -- a worker-side backend ------------------------------------------------------------------------------------
def test_worker_objects_are_written_for_the_target_and_the_moved_ones_deleted(cli, db_url, monkeypatch, sample_objects):
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    _seed_task(cli)
    old_ref = f"objects/task/etl/{RUN}/submit/-1/job_id"
    new_ref = f"objects/task/etl/{RUN}/submit_v2/-1/job_id"
    assert old_ref in sample_objects
    result = cli("copy", *OLD, "--to-task-id", "submit_v2")
    assert result.exit_code == 0, result.output
    stored = sql(db_url, "SELECT value FROM task_state_store WHERE task_id = 'submit_v2' AND {key} = 'job_id'")
    assert json.loads(stored[0][0]) == {REF_MARKER: new_ref}, "the target's own reference, never the source's"
    assert json.loads(sample_objects[new_ref][0]) == {"id": "j-1"}
    assert old_ref in sample_objects, "a copy keeps the source's object"
    assert cli("delete", "--dag-id", "etl", "--run-id", RUN, "--task-id", "submit_v2", "job_id").exit_code == 0
    result = cli("copy", *OLD, "--to-task-id", "submit_v3", "--move", "--yes")
    assert result.exit_code == 0, result.output
    assert old_ref not in sample_objects, "a move deletes the source's object after the commit"
    assert _value(cli, "--dag-id", "etl", "--run-id", RUN, "--task-id", "submit_v3", "job_id") == {"id": "j-1"}


def test_the_filesystem_backend_s_objects_are_copied(cli, tmp_path, monkeypatch):
    monkeypatch.setenv(WORKER, "statestore_cli.backends.filesystem.FilesystemBackend")
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", str(tmp_path / "objects"))
    assert cli("set", "--asset-name", "orders", "watermark", '{"at": "2026-11-30"}').exit_code == 0
    result = cli("copy", "--asset-name", "orders", "--to-asset-name", "orders_v2", "--move", "--yes")
    assert result.exit_code == 0, result.output
    assert _value(cli, "--asset-name", "orders_v2", "watermark") == {"at": "2026-11-30"}
    assert _keys(cli, "--asset-name", "orders") == {}
    raw = json.loads(cli("get", "--asset-name", "orders_v2", "watermark", "--raw").stdout)
    assert "orders_v2" in raw[REF_MARKER]


# -- the library ----------------------------------------------------------------------------------------------
def test_the_library_copies_and_refuses_clashes(cli, db_url):
    _seed_task(cli)
    settings = load_settings(conn_override=db_url)
    source, target = TaskScope("etl", RUN, "submit"), TaskScope("etl", RUN, "submit_v2")
    report = copy_keys(Store.open(settings), source, target, ["cursor"])
    assert (report.copied, report.overwritten, report.moved) == (1, 0, False)
    with pytest.raises(InvalidInputError, match="already has 1 of the keys"):
        copy_keys(Store.open(settings), source, target)
    with pytest.raises(InvalidInputError, match="a copy goes between scopes of one kind"):
        copy_keys(Store.open(settings), source, AssetScope(name="x"))


# -- Airflow databases: the target must exist -----------------------------------------------------------------
def _add_task_instance(url: str, dag_id: str, run_id: str, task_id: str, index: str = "map_index") -> None:
    ti_id = uuid.uuid4().hex if url.startswith("sqlite") else str(uuid.uuid4())
    sql(
        url,
        f"INSERT INTO task_instance (id, task_id, dag_id, run_id, {index}, try_number, pool, pool_slots) "
        "VALUES (:id, :task_id, :dag_id, :run_id, -1, 0, 'default_pool', 1)",
        id=ti_id,
        task_id=task_id,
        dag_id=dag_id,
        run_id=run_id,
    )


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "mariadb"])
def test_on_an_airflow_database_the_target_task_instance_must_exist(engine, tmp_path):
    with airflow_database(engine, HEAD_332, tmp_path) as url:
        add_runs(url, [("etl", RUN)], datetime(2026, 11, 30, tzinfo=UTC))
        _add_task_instance(url, "etl", RUN, "submit")
        assert run_cli("set", *OLD, "job_id", '"j-1"', conn=url).exit_code == 0
        result = run_cli("copy", *OLD, "--to-task-id", "submit_v2", conn=url)
        assert result.exit_code == 2
        assert result.stderr == (
            f"statestore: error: nothing to copy to: no task instance {NEW_SCOPE} in this database: copy to one "
            "that exists\n"
        )
        result = run_cli("copy", *OLD, "--to-run-id", OTHER_RUN, conn=url)
        assert result.exit_code == 2
        assert f"no dag run dag_id=etl run_id={OTHER_RUN} in this database" in result.stderr
        result = run_cli("copy", "--asset-name", "orders", "--to-asset-name", "orders_v2", conn=url)
        assert result.exit_code == 1, "the source asset itself is not there"
        _add_task_instance(url, "etl", RUN, "submit_v2")
        result = run_cli("copy", *OLD, "--to-task-id", "submit_v2", "--move", "--yes", conn=url)
        assert result.exit_code == 0, result.output
        assert sql(url, "SELECT task_id FROM task_state_store") == [("submit_v2",)]


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "mariadb"])
def test_a_dag_run_s_keys_and_a_task_s_on_airflow_3_4(engine, tmp_path):
    with airflow34_database(engine, tmp_path) as url:
        add_runs(url, [("etl", RUN), ("etl", OTHER_RUN)], datetime(2026, 11, 30, tzinfo=UTC))
        run = ["--dag-id", "etl", "--run-id", RUN]
        assert run_cli("set", *run, "batch", '"b-7"', conn=url).exit_code == 0
        result = run_cli("copy", *run, "--to-run-id", OTHER_RUN, conn=url)
        assert result.exit_code == 0, result.output
        assert (
            result.stderr
            == f"copied 1 key from dag run dag_id=etl run_id={RUN} to dag run dag_id=etl run_id={OTHER_RUN}\n"
        )
        other = ["--dag-id", "etl", "--run-id", OTHER_RUN]
        assert json.loads(run_cli("get", *other, "batch", conn=url).stdout) == "b-7"
        _add_task_instance(url, "etl", RUN, "submit", index="region_index")
        _add_task_instance(url, "etl", RUN, "submit_v2", index="region_index")
        assert run_cli("set", *OLD, "job_id", '"j-1"', conn=url).exit_code == 0
        result = run_cli("copy", *OLD, "--to-task-id", "submit_v2", conn=url)
        assert result.exit_code == 0, result.output
        new = ["--dag-id", "etl", "--run-id", RUN, "--task-id", "submit_v2"]
        assert json.loads(run_cli("get", *new, "job_id", conn=url).stdout) == "j-1"


# -- at a terminal --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_move_asks_at_a_terminal_with_the_counts(cli, db_url):
    from terminals import Terminal, terminal_env

    _seed_task(cli)
    new = ["--dag-id", "etl", "--run-id", RUN, "--task-id", "submit_v2"]
    assert cli("set", *new, "job_id", '"mine"').exit_code == 0
    args = ["--conn", db_url, "copy", *OLD, "--to-task-id", "submit_v2", "--move", "--overwrite"]
    term = Terminal(args, terminal_env(columns=300))
    term.wait_for(b"[y/N] ")
    question = f"Move 2 keys from {OLD_SCOPE} to {NEW_SCOPE}, replacing 1 key there? [y/N] "
    assert question.encode() in term.seen, term.seen
    term.type(b"n\n")
    status, screen = term.finish()
    assert status == 1 and screen.endswith("? [y/N] n\nstatestore: nothing copied (answered no)\n"), screen
    assert set(_keys(cli, *OLD)) == {"cursor", "job_id"} and _value(cli, *new, "job_id") == "mine"

    term = Terminal([*args, "-o", "plain"], terminal_env(columns=300))
    term.wait_for(b"[y/N] ")
    term.type(b"y\n")
    status, screen = term.finish()
    assert status == 0 and f"moved 2 keys from {OLD_SCOPE} to {NEW_SCOPE} (1 key replaced)" in screen, screen
    assert _keys(cli, *OLD) == {} and _value(cli, *new, "job_id") == {"id": "j-1"}


# -- the target's scope ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_dag_run_s_keys_go_to_a_dag_run_only(cli):
    result = cli("copy", "--dag-id", "etl", "--run-id", RUN, "--to-task-id", "submit")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: a dag run's keys are copied to another dag run; give --to-dag-id or --to-run-id\n"
    )
    result = cli("copy", "--asset-name", "orders", "--to-run-id", RUN)
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: an asset's keys are copied to another asset; give --to-asset-name, --to-asset-uri or "
        "--to-asset-id\n"
    )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_library_plans_before_it_copies(cli, db_url):
    from statestore_cli.model.entries import KeyFilter
    from statestore_cli.ops.copying import plan_copy, target_scope

    _seed_task(cli)
    settings = load_settings(conn_override=db_url)
    source = TaskScope("etl", RUN, "submit")
    target = target_scope(source, KeyFilter(run_id=OTHER_RUN))
    assert target == TaskScope("etl", OTHER_RUN, "submit")
    assert target_scope(source, KeyFilter(map_index=3)) == TaskScope("etl", RUN, "submit", 3)
    assert cli("set", "--dag-id", "etl", "--run-id", OTHER_RUN, "--task-id", "submit", "cursor", "1").exit_code == 0
    plan = plan_copy(Store.open(settings), source, target)
    assert (plan.keys, plan.clashes) == (("cursor", "job_id"), ("cursor",))
    report = copy_keys(Store.open(settings), source, target, ["job_id"], move=True)
    assert (report.copied, report.overwritten, report.moved) == (1, 0, True)
    assert list(_keys(cli, *OLD)) == ["cursor"]


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("keys", "code", "after_question"),
    [
        (b"\x03", 130, "^C\nstatestore: error: interrupted at the question\nhint: nothing copied\n"),
        (b"\x04", 1, "\nstatestore: nothing copied (no answer: end of input)\n"),
    ],
    ids=["ctrl-c", "ctrl-d"],
)
def test_a_move_not_confirmed_says_nothing_was_copied(cli, db_url, keys, code, after_question):
    from terminals import Terminal, terminal_env

    _seed_task(cli)
    term = Terminal(["--conn", db_url, "copy", *OLD, "--to-task-id", "submit_v2", "--move"], terminal_env(columns=300))
    term.wait_for(b"[y/N] ")
    term.type(keys)
    status, screen = term.finish()
    assert status == code, screen
    assert screen.endswith("? [y/N] " + after_question), screen
    assert set(_keys(cli, *OLD)) == {"cursor", "job_id"} and _keys(cli, "--task-id", "submit_v2") == {}


@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
def test_a_key_written_to_the_target_after_the_check_is_never_replaced(cli, db_url, monkeypatch, sample_objects):
    """Without --overwrite a copy inserts: a key another writer put at the target since the copy looked is the
    database's unique-key error, worded as what happened (exit 3), and both scopes stay as they were. (SQLite
    locks the whole file: no other writer gets in.)"""
    monkeypatch.setenv(WORKER, "sample_backends.RacingWorker")
    monkeypatch.setenv("SS_TEST_RACE_URL", db_url)
    assert cli("set", *OLD, "raced", '"ours"').exit_code == 0
    result = cli("copy", *OLD, "--to-task-id", "submit_v2")
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"statestore: error: another writer changed {NEW_SCOPE} while this copy ran; nothing copied: "
        "run the copy again (it names the keys the target now holds)\n"
    ), result.output
    new = ["--dag-id", "etl", "--run-id", RUN, "--task-id", "submit_v2"]
    assert _value(cli, *new, "raced") == "theirs"
    assert _value(cli, *OLD, "raced") == "ours"
