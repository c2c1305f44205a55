"""Shared fixtures: a clean Airflow environment per test, real SQLite stores in tmp_path, a CLI runner."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statestore_cli.cli.app import app
from statestore_cli.commands import db_init
from statestore_cli.config import load_settings

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No test sees the developer's Airflow: AIRFLOW_* cleared, AIRFLOW_HOME a fresh folder."""
    for name in list(os.environ):
        if name.startswith("AIRFLOW__") or name in ("AIRFLOW_HOME", "AIRFLOW_CONFIG", "NO_COLOR", "FORCE_COLOR"):
            monkeypatch.delenv(name)
    home = tmp_path / "airflow-home"
    home.mkdir()
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "100")  # rich reads it: fixed-width tables
    monkeypatch.setenv("TERM", "dumb")
    return home


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A SQLite store with the schema created, as the CLI's --conn takes it."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    db_init(load_settings(conn_override=url))
    return url


Invoke = Callable[..., "Result"]


class Result:
    """What one CLI run produced: exit code, stdout and stderr kept apart."""

    def __init__(self, exit_code: int, stdout: str, stderr: str, exception: BaseException | None) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.exception = exception

    @property
    def output(self) -> str:  # for assertion messages
        return f"exit {self.exit_code}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


@pytest.fixture
def cli(runner: CliRunner, db_url: str) -> Iterator[Callable[..., Result]]:
    """Run ``statestore --conn <db_url> ARGS``; ``conn=None`` leaves the connection to the config."""

    def invoke(*args: str, input: str | None = None, conn: str | None = db_url) -> Result:
        argv = (["--conn", conn] if conn else []) + list(args)
        result = runner.invoke(app, argv, input=input)
        return Result(result.exit_code, result.stdout, result.stderr, result.exception)

    yield invoke
