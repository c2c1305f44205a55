"""`statestore backend check`: every check passes on correct backends (the dict backends of
``sample_backends`` and the shipped filesystem backend), and each broken backend fails for its reason."""

from __future__ import annotations

import json

import pytest
from cli_running import run_cli
from startup_probe import probe

STORE_CHECKS = ["loads", "round_trip", "delete", "clear", "async_non_blocking", "refuses_null"]
WORKER_CHECKS = [
    "loads",
    "deterministic_refs",
    "distinct_refs",
    "round_trip",
    "delete",
    "clear",
    "async_non_blocking",
    "refuses_null",
]
STORE = "[state_store] backend"
WORKER = "[workers] state_store_backend"


def check(monkeypatch, *, store=None, worker=None, output="json", header=False, **env):
    if store:
        monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", store)
    if worker:
        monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", worker)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return run_cli("backend", "check", "-o", output, *(["--header"] if header else []))


def statuses(result):
    doc = json.loads(result.stdout)
    return doc, {(c["role"], c["check"]): c["status"] for c in doc["checks"]}


def test_a_correct_store_and_worker_backend_pass_every_check(monkeypatch, sample_objects):
    result = check(monkeypatch, store="sample_backends.DictBackend", worker="sample_backends.DictWorkerBackend")
    assert result.exit_code == 0, result.output
    doc, found = statuses(result)
    assert doc["ok"] is True
    assert [c["check"] for c in doc["checks"]] == STORE_CHECKS + WORKER_CHECKS
    assert set(found.values()) == {"pass"}
    assert sample_objects == {}, "the checks remove what they wrote"


@pytest.mark.parametrize("gzip", ["false", "true"])
@pytest.mark.parametrize("role", ["store", "worker"])
def test_the_filesystem_backend_passes_every_check(monkeypatch, tmp_path, role, gzip):
    root = tmp_path / "objects"
    result = check(
        monkeypatch,
        **{role: "statestore_cli.backends.filesystem.FilesystemBackend"},
        AIRFLOW__STATE_STORE_FILESYSTEM__ROOT=str(root),
        AIRFLOW__STATE_STORE_FILESYSTEM__GZIP=gzip,
    )
    assert result.exit_code == 0, result.output
    _, found = statuses(result)
    assert list(found) == [
        (STORE if role == "store" else WORKER, c) for c in (STORE_CHECKS if role == "store" else WORKER_CHECKS)
    ]
    assert set(found.values()) == {"pass"}
    assert not [p for p in root.rglob("*") if p.is_file()], "the checks remove what they wrote"


def test_the_filesystem_backend_passes_on_an_fsspec_url(monkeypatch):
    pytest.importorskip("fsspec")
    result = check(
        monkeypatch,
        worker="statestore_cli.FilesystemBackend",
        AIRFLOW__STATE_STORE_FILESYSTEM__ROOT="memory://statestore-check",
    )
    assert result.exit_code == 0, result.output
    assert set(statuses(result)[1].values()) == {"pass"}


@pytest.mark.parametrize(
    ("role", "path", "failing"),
    [
        (
            "worker",
            "sample_backends.NonDeterministicWorker",
            # an object whose reference changes per write cannot be found again by delete()
            {"deterministic_refs": "a reference must depend on the scope and key only", "delete": "still readable"},
        ),
        ("worker", "sample_backends.RegionBlindWorker", {"distinct_refs": "another region got the same reference"}),
        ("store", "sample_backends.BlockingAsyncBackend", {"async_non_blocking": "aset() blocked the event loop for"}),
        (
            "store",
            "sample_backends.RaisingDeleteBackend",
            {  # adelete() runs delete() in a thread: it fails the same way
                "delete": "delete() raised ConnectionError: object store unreachable",
                "async_non_blocking": "adelete() raised ConnectionError: object store unreachable",
            },
        ),
        ("store", "sample_backends.GreedyClearBackend", {"clear": "clear() of map index 0 also removed map index 1"}),
        ("store", "sample_backends.NullAcceptingBackend", {"refuses_null": "set() accepted the JSON null"}),
    ],
    ids=lambda v: v.rpartition(".")[2] if isinstance(v, str) else None,
)
def test_each_broken_backend_fails_for_its_reason(monkeypatch, sample_objects, role, path, failing):
    result = check(monkeypatch, **{role: path})
    assert result.exit_code == 3, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    failed = {c["check"]: c["detail"] for c in doc["checks"] if c["status"] != "pass"}
    assert set(failed) == set(failing), failed
    for name, words in failing.items():
        assert words in failed[name], failed[name]


def test_a_blocking_async_method_is_named_with_how_long_it_blocked(monkeypatch, sample_objects):
    result = check(monkeypatch, store="sample_backends.BlockingAsyncBackend", output="plain")
    assert result.exit_code == 3
    line = next(x for x in result.stdout.splitlines() if "\tasync_non_blocking\t" in x)
    role, backend, _, status, detail = line.split("\t")
    assert (role, backend, status) == (STORE, "sample_backends.BlockingAsyncBackend", "fail")
    seconds = float(detail.split("blocked the event loop for ")[1].split(" s")[0])
    assert seconds >= 0.45
    assert detail.endswith("run a synchronous client in a worker thread (asyncio.to_thread)")
    assert result.stderr == "1 of 6 checks did not pass\n", "plain stdout holds records only"
    with_header = check(monkeypatch, store="sample_backends.DictBackend", output="plain", header=True)
    assert with_header.stdout.splitlines()[0] == "role\tbackend\tcheck\tstatus\tdetail"
    assert len(with_header.stdout.splitlines()) == 1 + len(STORE_CHECKS)


def test_an_incomplete_subclass_fails_to_load_and_nothing_else_runs(monkeypatch):
    result = check(monkeypatch, store="sample_backends.IncompleteBackend")
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc["checks"][0] == {
        "role": STORE,
        "backend": "sample_backends.IncompleteBackend",
        "check": "loads",
        "status": "fail",
        "detail": "IncompleteBackend does not implement the abstract methods aclear, adelete, aget, aset",
    }
    assert [(c["check"], c["status"]) for c in doc["checks"][1:]] == [(n, "skip") for n in STORE_CHECKS[1:]]


def test_a_path_that_is_not_a_backend_fails_to_load(monkeypatch, backends):
    result = check(monkeypatch, worker="ss_test_backends.NotABackend")
    assert result.exit_code == 3
    first = json.loads(result.stdout)["checks"][0]
    assert first["status"] == "fail"
    assert first["detail"].endswith(
        "ss_test_backends.NotABackend is not a subclass of statestore_cli.BaseStoreBackend "
        "or of Airflow's airflow.sdk.state.BaseStoreBackend"
    )


def test_the_filesystem_backend_without_its_root_fails_to_load(monkeypatch):
    result = check(monkeypatch, store="statestore_cli.backends.filesystem.FilesystemBackend")
    assert result.exit_code == 3
    first = json.loads(result.stdout)["checks"][0]
    assert first["detail"] == (
        "FilesystemBackend.from_settings() raised ConfigError: the filesystem backend needs "
        "[state_store_filesystem] root (or AIRFLOW__STATE_STORE_FILESYSTEM__ROOT): a folder or an fsspec URL"
    )


def test_nothing_configured_is_a_usage_error(monkeypatch):
    result = check(monkeypatch)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "statestore: error: nothing to check: [state_store] backend is the built-in metastore and "
        "[workers] state_store_backend is not set\n"
    )


def test_the_table_shows_one_table_per_backend(monkeypatch, sample_objects):
    monkeypatch.setenv("COLUMNS", "80")
    result = check(
        monkeypatch,
        store="sample_backends.RaisingDeleteBackend",
        worker="sample_backends.DictWorkerBackend",
        output="table",
    )
    assert result.exit_code == 3
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "[state_store] backend = sample_backends.RaisingDeleteBackend"
    assert any(line.startswith("│ delete ") and "FAIL" in line for line in lines)
    assert "[workers] state_store_backend = sample_backends.DictWorkerBackend" in lines
    assert max(len(line) for line in lines) <= 80
    assert lines[-1] == "2 of 14 checks did not pass"  # delete, and adelete in async_non_blocking


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv", [["backend", "check", "-o", "plain"], ["orphans"], ["backend", "check", "-o", "json"]], ids=" ".join
)
def test_plain_and_json_output_load_no_rich(argv, tmp_path, db_url):
    env = {
        "AIRFLOW__WORKERS__STATE_STORE_BACKEND": "statestore_cli.backends.filesystem.FilesystemBackend",
        "AIRFLOW__STATE_STORE_FILESYSTEM__ROOT": str(tmp_path / "objects"),
    }
    code, stdout, loaded = probe(["--conn", db_url, *argv], tmp_path, **env)
    assert code == 0, stdout
    assert "rich" not in loaded
    assert "pydantic" not in loaded
