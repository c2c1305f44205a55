"""Shared fixtures: a clean Airflow environment per test, real SQLite stores in tmp_path, a CLI runner."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from typer.testing import CliRunner

from statestore_cli.cli.app import app
from statestore_cli.commands import db_init
from statestore_cli.config import load_settings

REPO = Path(__file__).resolve().parent.parent


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


# -- engines --------------------------------------------------------------------------------------------
# The servers the development and CI machines run; override with STATESTORE_TEST_PG / STATESTORE_TEST_MYSQL.
SERVERS = {
    "postgresql": os.environ.get("STATESTORE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    "mariadb": os.environ.get("STATESTORE_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
HOW_TO_START = {
    "postgresql": "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    "mariadb": "start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
}
ENGINES = ("sqlite", "postgresql", "mariadb")
_reachable: dict[str, str | None] = {}


def require_server(name: str) -> str:
    """The server's admin URL; skips the test (fails it under CI=true) when the server is unreachable."""
    if name not in _reachable:
        try:
            engine = create_engine(SERVERS[name], connect_args={"connect_timeout": 3})
            with engine.connect():
                pass
            engine.dispose()
            _reachable[name] = None
        except Exception as exc:  # any failure to connect means: no server here
            _reachable[name] = str(exc).splitlines()[0]
    problem = _reachable[name]
    if problem is not None:
        message = f"{name} is not reachable at {SERVERS[name]} ({problem}); {HOW_TO_START[name]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SERVERS[name]


@contextmanager
def isolated_database(name: str, tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database of its own: a SQLite file, a PostgreSQL schema, a MariaDB database."""
    if name == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    admin_url = require_server(name)
    label = f"ss_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE {'SCHEMA' if name == 'postgresql' else 'DATABASE'} {label}")
    url = make_url(admin_url)
    if name == "postgresql":
        url = url.update_query_dict({"options": f"-csearch_path={label}"})
    else:
        url = url.set(database=label)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(
                f"DROP {'SCHEMA' if name == 'postgresql' else 'DATABASE'} {label}"
                + (" CASCADE" if name == "postgresql" else "")
            )
        admin.dispose()


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


def sql(url: str, statement: str, **params: object) -> list[tuple]:
    """Run one SQL statement on the store at ``url`` (any engine) and return its rows.

    Write the reserved column name ``key`` as ``{key}``: it is quoted as each engine wants.
    """
    engine = create_engine(url)
    statement = statement.replace("{key}", "`key`" if engine.dialect.name in ("mysql", "mariadb") else '"key"')
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def as_utc(value: object) -> datetime | None:
    """A timestamp column as any engine returns it (SQLite text, naive or aware datetime) in UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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


# -- custom backends --------------------------------------------------------------------------------------
BACKENDS_MODULE = '''
from statestore_cli import BaseStoreBackend


class DictBackend(BaseStoreBackend):
    """A tiny valid backend: nothing is ever stored."""

    def get(self, scope, key, *, session=None):
        return None

    def set(self, scope, key, value, *, expires_at=None, session=None):
        pass

    def delete(self, scope, key, *, session=None):
        return 0

    def clear(self, scope, *, all_map_indices=False, session=None):
        return 0

    async def aget(self, scope, key, *, session=None):
        return None

    async def aset(self, scope, key, value, *, expires_at=None, session=None):
        pass

    async def adelete(self, scope, key, *, session=None):
        return 0

    async def aclear(self, scope, *, all_map_indices=False, session=None):
        return 0


class NotABackend:
    pass


not_a_class = 42
'''


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
