"""`get` where the database and the worker-side configuration disagree, and `get --raw`."""

from __future__ import annotations

import json

import pytest
from cli_running import run_statestore_process
from stores import sql

from statestore_cli.backends.base import REF_MARKER

TASK = ["--dag-id", "etl", "--run-id", "scheduled__2026-11-30T00:00:00+00:00", "--task-id", "submit"]
WORKER = "AIRFLOW__WORKERS__STATE_STORE_BACKEND"
REF = "objects/task/etl/scheduled__2026-11-30T00:00:00+00:00/submit/-1/job_id"
PLAIN_WARNING = (
    "statestore: warning: key 'job_id' holds a plain value, not a reference: written before [workers] "
    "state_store_backend was set, or by a writer without it; returned as stored\n"
)
REF_WARNING = (
    "statestore: warning: key 'job_id' holds a worker-side reference but [workers] state_store_backend is not "
    "set; returned the reference itself (set the option to read the value)\n"
)


def test_a_plain_value_under_a_worker_backend_is_returned_with_a_warning(cli, monkeypatch, sample_objects):
    assert cli("set", *TASK, "job_id", '{"id": "j-1"}').exit_code == 0
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    result = cli("get", *TASK, "job_id")
    assert (result.exit_code, result.stdout, result.stderr) == (0, '{"id": "j-1"}\n', PLAIN_WARNING)
    as_json = cli("get", *TASK, "job_id", "-o", "json")
    assert json.loads(as_json.stdout)["value"] == {"id": "j-1"}
    assert as_json.stderr == PLAIN_WARNING
    raw = cli("get", *TASK, "job_id", "--raw")
    assert (raw.stdout, raw.stderr) == ('{"id": "j-1"}\n', ""), "--raw shows what is stored, as it is"


def test_a_reference_without_a_worker_backend_is_shown_with_a_warning(cli, monkeypatch, db_url, sample_objects):
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    assert cli("set", *TASK, "job_id", '{"id": "j-1"}').exit_code == 0
    result = cli("get", *TASK, "job_id")
    assert (result.stdout, result.stderr) == ('{"id": "j-1"}\n', "")
    monkeypatch.delenv(WORKER)
    result = cli("get", *TASK, "job_id")
    assert (result.exit_code, result.stderr) == (0, REF_WARNING)
    assert json.loads(result.stdout) == {REF_MARKER: REF}


@pytest.mark.slow
def test_the_fast_path_hands_a_reference_to_the_full_cli(cli, monkeypatch, db_url, sample_objects):
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    assert cli("set", *TASK, "job_id", '"v"').exit_code == 0
    monkeypatch.delenv(WORKER)
    result = run_statestore_process("--conn", db_url, "get", *TASK, "job_id")
    assert (result.exit_code, result.stderr) == (0, REF_WARNING)
    assert json.loads(result.stdout) == {REF_MARKER: REF}


def test_raw_never_loads_the_worker_backend(cli, monkeypatch, sample_objects):
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    assert cli("set", *TASK, "job_id", '"v"').exit_code == 0
    monkeypatch.setenv(WORKER, "sample_backends.UnconstructibleWorker")
    result = cli("get", *TASK, "job_id")
    assert (result.exit_code, result.stderr) == (
        3,
        "statestore: error: cannot create [workers] state_store_backend UnconstructibleWorker: vault unreachable\n",
    )
    raw = cli("get", *TASK, "job_id", "--raw", "-o", "json")
    assert raw.exit_code == 0
    doc = json.loads(raw.stdout)
    assert (doc["key"], doc["value"]) == ("job_id", {REF_MARKER: REF})
    assert doc["expires_at"] is not None, "with the row's timestamps"


def test_a_worker_backend_that_cannot_read_points_to_raw(cli, monkeypatch, sample_objects):
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    assert cli("set", *TASK, "job_id", '"v"').exit_code == 0
    sample_objects.clear()  # the object store lost it
    result = cli("get", *TASK, "job_id")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == (
        "statestore: error: [workers] state_store_backend sample_backends.DictWorkerBackend could not read key "
        f"'job_id': KeyError: 'no object {REF}'; `get --raw` shows what the database holds\n"
    )


def test_raw_on_a_missing_key_exits_1(cli):
    result = cli("get", *TASK, "nope", "--raw")
    assert result.exit_code == 1
    assert result.stderr.startswith("statestore: error: no key 'nope' for dag_id=etl")


def test_raw_with_a_custom_store_backend(cli, monkeypatch, sample_objects, db_url):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "sample_backends.DictBackend")
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    assert cli("set", *TASK, "job_id", "[1, 2]").exit_code == 0
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(0,)], "the custom store holds it"
    assert cli("get", *TASK, "job_id").stdout == "[1, 2]\n"
    assert json.loads(cli("get", *TASK, "job_id", "--raw").stdout) == {REF_MARKER: REF}


def test_clear_whose_worker_clear_fails_says_the_objects_are_orphaned(cli, monkeypatch, db_url, tmp_path):
    monkeypatch.setenv(WORKER, "sample_backends.FlakyFilesystemBackend")
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", str(tmp_path / "objects"))
    assert cli("set", *TASK, "job_id", '"v"').exit_code == 0
    result = cli("clear", *TASK, "--yes")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == (
        "statestore: error: cleared the keys in the database, but [workers] state_store_backend "
        "sample_backends.FlakyFilesystemBackend failed to remove their objects (OSError: storage unavailable): they "
        "are orphaned until the next set of the same key overwrites each; `statestore orphans` lists such objects\n"
    )
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]
    assert json.loads(cli("orphans", "-o", "json").stdout)["count"] == 1
