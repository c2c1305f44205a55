"""`statestore orphans`: objects of a worker-side backend that no row points to.

The reproduction runs on every engine: the references are read from the database with SQL."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_running import run_cli
from stores import sql

from statestore_cli import TaskScope
from statestore_cli.backends.base import REF_MARKER
from statestore_cli.backends.fs_paths import value_path
from statestore_cli.backends.store import Store

ALL_ENGINES = True
RUN = "scheduled__2026-11-30T00:00:00+00:00"
KEY60 = "external_system_reference_for_partition_2026_11_30_eu_west_1"
TASK = ["--dag-id", "etl_orders_daily", "--run-id", RUN, "--task-id", "submit_spark_job"]
SCOPE = TaskScope("etl_orders_daily", RUN, "submit_spark_job")
REF = value_path(SCOPE, KEY60)


@pytest.fixture
def flaky_fs(monkeypatch, tmp_path):
    """The filesystem backend as the worker-side backend, with a delete that fails."""
    root = tmp_path / "objects"
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "sample_backends.FlakyFilesystemBackend")
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", str(root))
    return root


def backdate(path, days):
    moment = time.time() - days * 86400
    os.utime(path, (moment, moment))


def orphans(cli, *args):
    result = cli("orphans", *args, "-o", "json")
    return result, (json.loads(result.stdout) if result.stdout else None)


def test_a_failed_backend_delete_leaves_an_orphan_that_the_next_set_repairs(cli, db_url, flaky_fs):
    assert cli("set", *TASK, KEY60, '{"job": "first"}').exit_code == 0
    deleted = cli("delete", *TASK, KEY60)
    assert deleted.exit_code == 3
    assert deleted.stderr == (
        f"statestore: error: deleted key '{KEY60}' in the database, but [workers] state_store_backend "
        "sample_backends.FlakyFilesystemBackend failed to remove its object (OSError: storage unavailable): it is "
        "orphaned until the next set of the same key overwrites it; `statestore orphans` lists such objects\n"
    )
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(0,)], "the row went first"
    assert json.loads((flaky_fs / REF).read_text()) == {"job": "first"}

    result, doc = orphans(cli)
    assert result.exit_code == 0, result.output
    assert doc["backend"] == "sample_backends.FlakyFilesystemBackend"
    assert (doc["listed"], doc["count"], doc["deleted"]) == (1, 1, 0)
    [orphan] = doc["orphans"]
    assert orphan["ref"] == REF
    assert orphan["in_grace"] is True and 0 <= orphan["age_seconds"] < 60

    assert cli("set", *TASK, KEY60, '{"job": "second"}').exit_code == 0
    assert json.loads((flaky_fs / REF).read_text()) == {"job": "second"}, "the same reference, overwritten"
    [(stored,)] = sql(db_url, "SELECT value FROM task_state_store")
    assert json.loads(stored) == {REF_MARKER: REF}
    assert orphans(cli)[1]["orphans"] == []
    assert cli("get", *TASK, KEY60).stdout == '{"job": "second"}\n'


def test_delete_removes_only_orphans_older_than_asked(cli, db_url, flaky_fs):
    for key in ("old_orphan", "young_orphan", "old_but_referenced"):
        assert cli("set", *TASK, key, f'"{key}"').exit_code == 0
    for key in ("old_orphan", "young_orphan"):
        assert cli("delete", *TASK, key).exit_code == 3
    backdate(flaky_fs / value_path(SCOPE, "old_orphan"), 3)
    backdate(flaky_fs / value_path(SCOPE, "young_orphan"), 1)
    backdate(flaky_fs / value_path(SCOPE, "old_but_referenced"), 3)

    result, doc = orphans(cli, "--older-than", "2d")
    assert [o["ref"] for o in doc["orphans"]] == [value_path(SCOPE, "old_orphan")], "a filter, deleting nothing"
    result, doc = orphans(cli, "--delete", "--older-than", "2d", "--yes")
    assert result.exit_code == 0, result.output
    assert [(o["ref"], o["deleted"]) for o in doc["orphans"]] == [(value_path(SCOPE, "old_orphan"), True)]
    assert not (flaky_fs / value_path(SCOPE, "old_orphan")).exists()
    assert (flaky_fs / value_path(SCOPE, "young_orphan")).exists()
    assert cli("get", *TASK, "old_but_referenced").stdout == '"old_but_referenced"\n'


def test_the_grace_window_protects_writes_in_flight(cli, flaky_fs):
    for key in ("k", "live"):
        assert cli("set", *TASK, key, "1").exit_code == 0
    assert cli("delete", *TASK, "k").exit_code == 3
    result = cli("orphans", "--delete", "--older-than", "30m")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: --older-than 30m is shorter than the grace window (1h): a younger object may be a "
        "write in flight; give a longer age\n"
    )
    result, doc = orphans(cli, "--delete", "--older-than", "0s", "--grace", "0s", "--yes")
    assert (result.exit_code, doc["deleted"]) == (0, 1), "a grace window of 0 is the operator's explicit choice"


def test_delete_needs_older_than(cli, flaky_fs):
    result = cli("orphans", "--delete")
    assert (result.exit_code, result.stderr) == (
        2,
        "statestore: error: deleting orphans needs --older-than, the age an orphan must have (e.g. 7d)\n",
    )


def test_plain_and_table_output(cli, flaky_fs, monkeypatch):
    assert cli("set", *TASK, KEY60, "1").exit_code == 0
    assert cli("delete", *TASK, KEY60).exit_code == 3
    written = datetime(2026, 11, 1, 3, 0, 0, tzinfo=UTC)
    os.utime(flaky_fs / REF, (written.timestamp(), written.timestamp()))
    result = cli("orphans", "-o", "plain", "--header")
    header, record = result.stdout.splitlines()
    assert header == "ref\twritten_at\tage_seconds\tstatus"
    ref, shown, age, status = record.split("\t")
    assert (ref, shown, status) == (REF, "2026-11-01 03:00:00 UTC", "orphan")
    assert abs(int(age) - (datetime.now(UTC) - written).total_seconds()) < 60
    assert result.stderr == "1 orphaned object of 1 listed\n", "the sentence for people goes to stderr"
    monkeypatch.setenv("COLUMNS", "80")
    table = cli("orphans", "-o", "table").stdout.splitlines()
    assert max(len(line) for line in table) <= 80
    assert table[-1] == "1 orphaned object of 1 listed"
    assert "".join(line.split("│")[1].strip() for line in table[3:-2]) == REF, "the reference folds, whole"


def test_a_failed_delete_is_reported_and_exits_3(cli, monkeypatch, sample_objects):
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "sample_backends.UndeletableWorker")
    assert cli("set", *TASK, "live", "1").exit_code == 0
    sample_objects["task/d/r/t/-1/gone"] = ('"x"', None, datetime.now(UTC) - timedelta(days=9))
    result, doc = orphans(cli, "--delete", "--older-than", "7d", "--yes")
    assert result.exit_code == 3
    [orphan] = doc["orphans"]
    assert (orphan["deleted"], orphan["error"]) == (False, "PermissionError: access denied to task/d/r/t/-1/gone")
    assert doc["failed"] == 1


def test_without_a_worker_backend_or_listing(cli, monkeypatch, sample_objects):
    result = cli("orphans")
    assert (result.exit_code, result.stderr) == (
        2,
        "statestore: error: `orphans` looks for a worker-side backend's objects, and [workers] "
        "state_store_backend is not set\n",
    )
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "sample_backends.WorkerWithoutListing")
    result = cli("orphans")
    assert (result.exit_code, result.stderr) == (
        3,
        "statestore: error: sample_backends.WorkerWithoutListing cannot list what it stores: it does not "
        "implement list_refs()\n",
    )


def _lost_and_live(cli, flaky_fs, lost: tuple[str, ...] = ("lost_reference_a", "lost_reference_b")) -> None:
    """Orphans three days old (their rows deleted, the backend's delete failed) beside a live key."""
    for key in (*lost, "live_reference"):
        assert cli("set", *TASK, key, f'"{key}"').exit_code == 0
        backdate(flaky_fs / value_path(SCOPE, key), 3)
    for key in lost:
        assert cli("delete", *TASK, key).exit_code == 3


def _objects(root) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def test_delete_without_a_terminal_needs_yes_and_deletes_nothing(cli, flaky_fs):
    _lost_and_live(cli, flaky_fs)
    before = _objects(flaky_fs)
    result = cli("orphans", "--delete", "--older-than", "2d")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "statestore: error: orphans --delete deletes objects and stdin is not a terminal to confirm on; pass --yes\n"
    )
    assert _objects(flaky_fs) == before
    result, doc = orphans(cli, "--delete", "--older-than", "2d", "--yes")
    assert (result.exit_code, doc["deleted"]) == (0, 2), result.output
    assert _objects(flaky_fs) == [value_path(SCOPE, "live_reference")]


def test_delete_with_nothing_to_delete_needs_no_yes(cli, flaky_fs):
    """As `clear` of no keys: nothing to confirm, exit 0."""
    _lost_and_live(cli, flaky_fs, lost=())
    result, doc = orphans(cli, "--delete", "--older-than", "2d")
    assert (result.exit_code, doc["count"], doc["deleted"]) == (0, 0, 0), result.output


def test_delete_refuses_a_store_that_references_none_of_the_objects(cli, flaky_fs, tmp_path):
    """Pointed at the wrong database (here a new empty store), every live object looks orphaned: a delete is
    refused, even with --yes, and the objects stay; a listing still shows them."""
    _lost_and_live(cli, flaky_fs, lost=())
    wrong = f"sqlite:///{tmp_path / 'another_deployment.db'}"
    assert cli("db", "init", conn=wrong).exit_code == 0
    result = cli("orphans", "--delete", "--older-than", "2d", "--yes", conn=wrong)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "statestore: error: refusing to delete: the store references none of the 1 object that [workers] "
        "state_store_backend sample_backends.FlakyFilesystemBackend holds, so it is probably the wrong --conn or "
        "backend root; if every one of them really is an orphan, pass --all-unreferenced\n"
    )
    assert _objects(flaky_fs) == [value_path(SCOPE, "live_reference")]
    listed = cli("orphans", "-o", "json", conn=wrong)
    assert (listed.exit_code, json.loads(listed.stdout)["count"]) == (0, 1), "a listing deletes nothing: no refusal"
    assert cli("get", *TASK, "live_reference").stdout == '"live_reference"\n'


def test_all_unreferenced_deletes_when_every_object_really_is_an_orphan(cli, flaky_fs):
    _lost_and_live(cli, flaky_fs, lost=("lost_reference_a",))
    assert cli("delete", *TASK, "live_reference").exit_code == 3  # now no row references any object
    result = cli("orphans", "--delete", "--older-than", "2d", "--yes")
    assert result.exit_code == 2 and "references none of the 2 objects" in result.stderr, result.stderr
    result = cli("orphans", "--all-unreferenced")
    assert (result.exit_code, result.stderr) == (
        2,
        "statestore: error: --all-unreferenced applies to --delete; without it nothing is deleted\n",
    )
    result, doc = orphans(cli, "--delete", "--older-than", "2d", "--all-unreferenced", "--yes")
    assert (result.exit_code, doc["deleted"]) == (0, 2), result.output
    assert _objects(flaky_fs) == []


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_delete_asks_at_a_terminal_with_the_count(cli, db_url, flaky_fs):
    from terminals import Terminal, terminal_env

    _lost_and_live(cli, flaky_fs)
    args = ["--conn", db_url, "orphans", "--delete", "--older-than", "2d", "-o", "plain"]
    env = terminal_env(columns=200, PYTHONPATH=str(Path(__file__).parent))  # the process imports sample_backends
    term = Terminal(args, env)
    term.wait_for(b"[y/N] ")
    question = (
        "Delete 2 orphaned objects (at least 2d old) of [workers] state_store_backend "
        "sample_backends.FlakyFilesystemBackend? [y/N] "
    )
    assert question.encode() in term.seen, term.seen
    term.type(b"n\n")
    status, screen = term.finish()
    assert status == 1 and screen.endswith("? [y/N] n\nstatestore: nothing deleted (answered no)\n"), screen
    assert len(_objects(flaky_fs)) == 3

    term = Terminal(args, env)
    term.wait_for(b"[y/N] ")
    term.type(b"y\n")
    status, screen = term.finish()
    assert status == 0 and screen.endswith("2 orphaned objects of 3 listed (at least 2d old); 2 deleted\n"), screen
    assert _objects(flaky_fs) == [value_path(SCOPE, "live_reference")]


def test_the_library_refuses_a_store_that_references_none_too(db_url, flaky_fs, tmp_path):
    """`find_orphans(delete=True)` deletes without asking, so it refuses the same store; the refusal names
    the library's parameter."""
    from statestore_cli.config import load_settings
    from statestore_cli.errors import InvalidInputError
    from statestore_cli.ops.orphans import find_orphans

    assert run_cli("set", *TASK, "live_reference", '"x"', conn=db_url).exit_code == 0
    backdate(flaky_fs / value_path(SCOPE, "live_reference"), 3)
    wrong = f"sqlite:///{tmp_path / 'another_deployment.db'}"
    assert run_cli("db", "init", conn=wrong).exit_code == 0
    settings = load_settings(conn_override=wrong)
    now = datetime.now(UTC)
    with pytest.raises(InvalidInputError, match=r"references none of the 1 object .* pass all_unreferenced$"):
        find_orphans(Store.open(settings), now, older_than=timedelta(days=2), delete=True)
    assert _objects(flaky_fs) == [value_path(SCOPE, "live_reference")]
    report = find_orphans(Store.open(settings), now, older_than=timedelta(days=2), delete=True, all_unreferenced=True)
    assert (report.listed, report.referenced, report.deleted) == (1, 0, 1)
    assert _objects(flaky_fs) == []
