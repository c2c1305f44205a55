"""The fast `get` path answers exactly as the full CLI does, and without loading typer, rich or SQLAlchemy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_running import run_statestore_process

pytestmark = pytest.mark.slow  # real processes: the start-up fast path

TASK = ["--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract"]
HEAVY = ("sqlalchemy", "typer", "rich")
PROBE = f"""
import sys
sys.argv[0] = "statestore"
from statestore_cli.__main__ import main

try:
    main()
finally:
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
    print("LOADED=" + ",".join(loaded), file=sys.stderr)
"""


def run(argv: list[str], tmp_path: Path, fast: bool, tty: bool = False) -> tuple[int, str, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STATESTORE_NO_FAST_PATH"}
    if not fast:
        env["STATESTORE_NO_FAST_PATH"] = "1"
    proc = run_statestore_process(*argv, code=PROBE, env=env, cwd=tmp_path)
    stderr, _, loaded = proc.stderr.rpartition("LOADED=")
    return proc.exit_code, proc.stdout, stderr, loaded.strip()


@pytest.fixture
def store(cli, db_url):
    cli("set", *TASK, "job", '{"id": "j-1", "w": "\\u00e9\\u001b"}', "--retention", "6h")
    cli("set", *TASK, "--map-index", "3", "job", "[1, 2]", "--retention", "never")
    cli("set", *TASK, "[b]x[/b]\x1b", '"hostile"')
    return db_url


@pytest.mark.parametrize(
    "args",
    [
        [*TASK, "job"],
        [*TASK, "job", "-o", "json"],
        [*TASK, "job", "--output=table"],
        [*TASK, "--map-index", "3", "job", "-o", "plain"],
        [*TASK, "--map-index=3", "job", "-o", "json"],
        [*TASK, "[b]x[/b]\x1b"],
        [*TASK, "missing"],
        [*TASK, "--map-index", "7", "job"],
    ],
)
def test_fast_path_output_is_the_full_clis(store, tmp_path, args):
    argv = ["--conn", store, "get", *args]
    fast = run(argv, tmp_path, fast=True)
    full = run(argv, tmp_path, fast=False)
    assert fast[:3] == full[:3]
    assert fast[3] == "", f"the fast path loaded {fast[3]}"
    assert "sqlalchemy" in full[3]


def test_fast_path_reads_the_config_file_like_the_cli(store, tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(f"[database]\nsql_alchemy_conn = {store}\n")
    code, out, err, loaded = run(["--config", str(cfg), "get", *TASK, "job"], tmp_path, fast=True)
    assert (code, out, err, loaded) == (0, '{"id": "j-1", "w": "\u00e9\\u001b"}\n', "", "")


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "--asset-name", "a", "k"],  # asset scopes: the full CLI
        ["--debug", "get", *TASK, "job"],
        ["get", *TASK, "job", "--help"],
        ["get", *TASK, "job", "extra"],
        ["get", "--dag-id", "etl", "job"],  # incomplete scope: the full CLI says what is missing
        ["get", *TASK, "job", "-o", "yaml"],
    ],
)
def test_anything_unusual_goes_to_the_full_cli(store, tmp_path, argv):
    _code, _out, _err, loaded = run(["--conn", store, *argv], tmp_path, fast=True)
    assert "typer" in loaded


def test_custom_backend_or_other_engine_goes_to_the_full_cli(store, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "statestore_cli.MetastoreBackend")
    assert "typer" in run(["--conn", store, "get", *TASK, "job"], tmp_path, fast=True)[3]
    monkeypatch.delenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND")
    assert run(["--conn", store, "get", *TASK, "job"], tmp_path, fast=True)[3] == ""
    missing = tmp_path / "absent.db"
    code, _out, err, loaded = run(["--conn", f"sqlite:///{missing}", "get", *TASK, "job"], tmp_path, fast=True)
    assert code == 3 and "the file does not exist" in err and "typer" in loaded
