"""`clean` with a custom [state_store] backend: --fail-on-skip and --backend-cleanup, every output format."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from metrics_files import read_metrics

SKIP_REASON = (
    "[state_store] backend is sample_backends.DictBackend, not the metastore backend: nothing to clean here; "
    "a custom backend runs its own BaseStoreBackend.cleanup()"
)


@pytest.fixture
def custom(monkeypatch, sample_objects):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "sample_backends.DictBackend")
    now = datetime.now(UTC)
    sample_objects["task/d/r/t/-1/old"] = ("1", now - timedelta(days=1), now)
    sample_objects["task/d/r/t/-1/new"] = ("2", now + timedelta(days=1), now)
    return sample_objects


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["clean", "dry run"])
def test_fail_on_skip_exits_5_in_every_format(cli, custom, dry_run):
    result = cli("clean", *dry_run, "--fail-on-skip", "-o", "table")
    assert (result.exit_code, result.stdout, result.stderr) == (5, f"skipped: {SKIP_REASON}\n", "")
    result = cli("clean", *dry_run, "--fail-on-skip", "-o", "plain")
    assert (result.exit_code, result.stdout, result.stderr) == (5, "", f"skipped: {SKIP_REASON}\n")
    result = cli("clean", *dry_run, "--fail-on-skip", "-o", "json")
    assert result.exit_code == 5
    assert json.loads(result.stdout) == {"dry_run": bool(dry_run), "skipped": True, "reason": SKIP_REASON}
    assert cli("clean", *dry_run).exit_code == 0, "without the flag a skip is a success"
    assert len(custom) == 2, "a skip deletes nothing"


def test_fail_on_skip_does_nothing_on_the_metastore(cli):
    assert cli("clean", "--fail-on-skip").exit_code == 0


def test_the_library_returns_the_skip_and_deletes_nothing(db_url, custom):
    """``commands.clean`` says why it skipped as a ``CleanSkipped`` (an exit 0 unless the CLI's
    --fail-on-skip asks otherwise), never as a bare string a caller could mistake for a report."""
    from statestore_cli import Store
    from statestore_cli.config import load_settings
    from statestore_cli.ops.commands import CleanSkipped, clean

    with Store.open(load_settings(conn_override=db_url)) as store:
        result = clean(store)
    assert result == CleanSkipped(SKIP_REASON)
    assert result.exit_code == 0
    assert sorted(custom) == ["task/d/r/t/-1/new", "task/d/r/t/-1/old"]


def test_backend_cleanup_reports_what_cleanup_returned(cli, custom):
    result = cli("clean", "--backend-cleanup", "-o", "plain")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("ran sample_backends.DictBackend.cleanup() in 0.")
    assert result.stderr.endswith('; it returned {"expired_removed": 1, "remaining": 1}\n')
    fields = dict(line.split("\t") for line in result.stdout.splitlines())
    assert fields.pop("elapsed_seconds")
    assert fields == {
        "dry_run": "false",
        "skipped": "false",
        "backend_cleanup": "true",
        "backend": "sample_backends.DictBackend",
        "result": '{"expired_removed": 1, "remaining": 1}',
    }
    assert list(custom) == ["task/d/r/t/-1/new"]
    result = cli("clean", "--backend-cleanup", "-o", "json")
    doc = json.loads(result.stdout)
    assert doc.pop("elapsed_seconds") >= 0
    assert doc == {
        "dry_run": False,
        "skipped": False,
        "backend_cleanup": True,
        "backend": "sample_backends.DictBackend",
        "result": {"expired_removed": 0, "remaining": 1},
    }
    table = cli("clean", "--backend-cleanup", "-o", "table")
    assert table.stdout.endswith('; it returned {"expired_removed": 0, "remaining": 1}\n')


def test_backend_cleanup_that_returns_nothing(cli, monkeypatch, backends):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_test_backends.DictBackend")
    result = cli("clean", "--backend-cleanup")
    assert result.stderr.endswith("; it returned nothing\n")
    assert "result\t-\n" in result.stdout
    assert json.loads(cli("clean", "--backend-cleanup", "-o", "json").stdout)["result"] is None


def test_backend_cleanup_that_fails_exits_3(cli, monkeypatch, sample_objects):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "sample_backends.FailingCleanupBackend")
    result = cli("clean", "--backend-cleanup", "-o", "json")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == (
        "statestore: error: sample_backends.FailingCleanupBackend.cleanup() failed: "
        "RuntimeError: retention service down\n"
    )


def test_backend_cleanup_refuses_the_metastore_and_a_dry_run(cli, custom, monkeypatch):
    flags = (["--dry-run"], ["--older-than", "1d"], ["--metrics-file", "/tmp/m.prom"], ["--include-unfinished"])
    for flag in flags:
        result = cli("clean", "--backend-cleanup", *flag)
        assert (result.exit_code, result.stderr) == (
            2,
            f"statestore: error: --backend-cleanup runs the backend's own cleanup(), which takes no {flag[0]}; "
            "drop it\n",
        )
    monkeypatch.delenv("AIRFLOW__STATE_STORE__BACKEND")
    result = cli("clean", "--backend-cleanup")
    assert (result.exit_code, result.stderr) == (
        2,
        "statestore: error: backend cleanup runs a custom [state_store] backend's cleanup(); the metastore backend "
        "has none: `clean` itself deletes its expired keys\n",
    )


def test_fail_on_skip_is_the_exit_status_the_metrics_file_records(cli, custom, tmp_path):
    metrics = tmp_path / "statestore.prom"
    assert cli("clean", "--fail-on-skip", "--metrics-file", str(metrics)).exit_code == 5
    assert read_metrics(metrics)["statestore_clean_exit_status"] == 5
    assert cli("clean", "--metrics-file", str(metrics)).exit_code == 0
    assert read_metrics(metrics)["statestore_clean_exit_status"] == 0
