"""Fixtures: a clean Airflow environment per test, real stores (SQLite, or a server where a module asks), the CLI.

Helpers that are not fixtures (running the CLI, raw SQL, the servers) are in ``helpers.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import BACKENDS_MODULE, ENGINES, Result, isolated_database, run_cli
from monitoring import Server, node_exporter

from statestore_cli.config import load_settings
from statestore_cli.ops.commands import db_init


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


# -- engines --------------------------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules that set ALL_ENGINES = True run every test that uses a store on each engine (unless the
    test picks its engines itself)."""
    chosen = any("db_url" in str(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize"))
    if getattr(metafunc.module, "ALL_ENGINES", False) and "db_url" in metafunc.fixturenames and not chosen:
        metafunc.parametrize("db_url", ENGINES, indirect=True)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store with the schema created, as the CLI's --conn takes it (SQLite unless parametrised)."""
    name = getattr(request, "param", "sqlite")
    with isolated_database(name, tmp_path) as url:
        db_init(load_settings(conn_override=url))
        yield url


@pytest.fixture
def cli(db_url: str) -> Iterator[Callable[..., Result]]:
    """Run ``statestore --conn <db_url> ARGS`` in-process (``run_cli``); ``conn=None`` leaves the connection
    to the config."""

    def invoke(*args: str, input: str | None = None, conn: str | None = db_url) -> Result:
        return run_cli(*args, conn=conn, input=input)

    yield invoke


# -- custom backends --------------------------------------------------------------------------------------
@pytest.fixture
def backends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A module ``ss_test_backends`` importable from tmp_path, forgotten again after the test."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ss_test_backends.py").write_text(BACKENDS_MODULE, encoding="utf-8")
    (folder / "ss_test_broken.py").write_text("raise RuntimeError('boom at import\\nsecond line')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    yield "ss_test_backends"
    for name in ("ss_test_backends", "ss_test_broken"):
        sys.modules.pop(name, None)


@pytest.fixture
def sample_objects() -> Iterator[dict]:
    """The shared object store of ``sample_backends`` (tests/sample_backends.py), empty for this test."""
    import sample_backends

    sample_backends.OBJECTS.clear()
    yield sample_backends.OBJECTS
    sample_backends.OBJECTS.clear()


# -- Airflow 3.3.2 in its own venv (the modules marked `airflow`) ------------------------------------------
@pytest.fixture(scope="session")
def airflow_python() -> Path:
    """The Python of the cached venv with Airflow 3.3.2 and the common-io provider (``airflow_venv``)."""
    from airflow_venv import airflow_venv_python

    return airflow_venv_python()


@pytest.fixture(scope="session")
def migrated_sqlite(airflow_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file ``airflow db migrate`` made, once per session; tests copy it."""
    from airflow_venv import airflow, airflow_env

    folder = tmp_path_factory.mktemp("airflow-sqlite")
    path = folder / "airflow.db"
    airflow(airflow_python, airflow_env(folder / "home", f"sqlite:///{path}"), "db", "migrate")
    return path


# -- monitoring: node-exporter's textfile collector (tests/monitoring.py) -----------------------------------
@pytest.fixture
def textfile_exporter(tmp_path: Path) -> Iterator[Server]:
    """node-exporter on a free port of 127.0.0.1 with only its textfile collector, reading
    ``tmp_path / "textfile"``; stopped after the test, and checked to be gone."""
    directory = tmp_path / "textfile"
    directory.mkdir()
    with node_exporter(directory, tmp_path / "node-exporter.log") as server:
        yield server
    assert server.proc.poll() is not None, "node-exporter is still running"
