"""Code a dotted path names that exits or is interrupted while it is imported: never a success, nothing
deleted, and a clean's metrics file does not move last_success forward."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import read_metrics, sql

P = "statestore_clean_"
WHERE = "environment variable AIRFLOW__STATE_STORE__BACKEND: [state_store] backend = 'ss_exits.Backend'"


@pytest.fixture
def exiting_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """``ss_exits``, a module calling ``sys.exit(0)`` when imported, named as the [state_store] backend."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ss_exits.py").write_text("import sys\n\nsys.exit(0)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_exits.Backend")
    yield folder
    sys.modules.pop("ss_exits", None)


def _exited(stderr: str) -> bool:
    return stderr == (
        f"statestore: error: {WHERE}: importing module 'ss_exits' raised SystemExit(0); a module named by a "
        "dotted path must not exit when it is imported: remove the exit (an argparse or script entry point "
        "run at import, often) or name another module\n"
    )


def test_db_check_with_a_backend_that_exits_at_import_fails(cli, exiting_module):
    result = cli("db", "check")
    assert result.exit_code == 2, result.output
    assert _exited(result.stderr), result.stderr


def test_set_with_a_backend_that_exits_at_import_fails_and_writes_nothing(cli, db_url, exiting_module):
    result = cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k", "1")
    assert result.exit_code == 2, result.output
    assert _exited(result.stderr), result.stderr
    assert sql(db_url, "SELECT count(*) FROM task_state_store")[0][0] == 0


def test_a_clean_whose_backend_exits_at_import_is_a_failure_in_its_metrics_file(cli, db_url, tmp_path, monkeypatch):
    metrics = tmp_path / "clean.prom"
    assert cli("clean", "--metrics-file", str(metrics)).exit_code == 0  # a first success to carry over
    before = read_metrics(metrics)[f"{P}last_success_timestamp_seconds"]
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ss_exits.py").write_text("import sys\n\nsys.exit(0)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_exits.Backend")
    try:
        result = cli("clean", "--fail-on-skip", "--metrics-file", str(metrics))
    finally:
        sys.modules.pop("ss_exits", None)
    assert result.exit_code == 2, result.output
    assert _exited(result.stderr), result.stderr
    values = read_metrics(metrics)
    assert values[f"{P}exit_status"] == 2
    assert values[f"{P}last_success_timestamp_seconds"] == before


def test_a_connect_args_module_that_exits_at_import_fails(cli, db_url, tmp_path, monkeypatch):
    (tmp_path / "ss_exits_args.py").write_text("raise SystemExit(3)\nARGS = {}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", "ss_exits_args.ARGS")
    try:
        result = cli("list")
    finally:
        sys.modules.pop("ss_exits_args", None)
    assert result.exit_code == 2, result.output
    assert "importing module 'ss_exits_args' raised SystemExit(3)" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_backend_method_calling_sys_exit_is_an_error_not_a_success(cli, tmp_path, monkeypatch):
    # Not at import: when the command runs it. No command of ours ends by SystemExit, so one is a failure.
    (tmp_path / "ss_exits_later.py").write_text(
        "import sys\n"
        "from statestore_cli import BaseStoreBackend\n\n\n"
        "class Backend(BaseStoreBackend):\n"
        "    def get(self, *args, **kwargs):\n"
        "        sys.exit(0)\n\n"
        "    set = delete = clear = aget = aset = adelete = aclear = get\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_exits_later.Backend")
    try:
        result = cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k", "1")
    finally:
        sys.modules.pop("ss_exits_later", None)
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        "statestore: error: unexpected SystemExit(0) raised by code the command ran (a backend or a module a "
        "dotted path names); the command did not finish (rerun with --debug for the traceback)\n"
    )
