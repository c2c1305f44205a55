"""The PostgreSQL and MariaDB servers the tests use: each worker's database on them (``require_server``),
throwaway databases, databases made once per run, and the engines the tests' own SQL goes through."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from run_scope import once_per_run, run_folder, run_token, worker_id
from sqlalchemy import Engine, create_engine, event, make_url

from statestore_cli.db import mysql_tls

# The servers the development and CI machines run; override with STATESTORE_TEST_PG / STATESTORE_TEST_MYSQL.
# Tests never use these URLs themselves: ``require_server`` gives each test process a database of its own.
SERVER_URLS = {
    "postgresql": os.environ.get("STATESTORE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    "mariadb": os.environ.get("STATESTORE_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
HOW_TO_START = {
    "postgresql": "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    "mariadb": "start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
}
ENGINES = ("sqlite", "postgresql", "mariadb")
_reachable: dict[str, str | None] = {}
_worker_databases: dict[str, str] = {}  # engine -> the URL of this process's database on it


def engine_of(url: str, **kwargs: Any) -> Engine:
    """``create_engine(url, **kwargs)`` for the tests' own SQL; on MySQL/MariaDB its connections skip the 30 ms
    of CPU PyMySQL's default TLS mode spends loading the CA store, as the tool's do (``mysql_tls``):
    the suite's helpers open thousands of them."""
    engine = create_engine(url, **kwargs)
    if engine.dialect.name in ("mysql", "mariadb") and engine.dialect.driver == "pymysql":
        event.listen(engine, "do_connect", mysql_tls.connect)
    return engine


def finish_run() -> None:
    """Drop the databases made once for the whole run (``run_database``) and remove the run's folder."""
    folder = run_folder()
    for marker in sorted((folder / "databases").glob("*")) if (folder / "databases").is_dir() else []:
        engine, _, name = marker.name.partition("--")
        try:
            _drop_database(engine, name)
        except Exception as exc:  # the server went away: say so, do not fail a finished run
            print(f"could not drop the test database {name} on {engine}: {exc}", file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)


def mark_database(engine_name: str, name: str) -> Path:
    """Note the run-wide or worker database ``name``, so that ``finish_run`` drops it if nothing else
    did (a worker that crashed): the note is made before the database."""
    markers = run_folder() / "databases"
    markers.mkdir(exist_ok=True)
    marker = markers / f"{engine_name}--{name}"
    marker.touch()
    return marker


def _drop_database(engine_name: str, name: str) -> None:
    force = " WITH (FORCE)" if engine_name == "postgresql" else ""
    server_statements(SERVER_URLS[engine_name], f"DROP DATABASE IF EXISTS {name}{force}")


def run_database(engine_name: str, what: str, build: Callable[[str], None]) -> str:
    """The URL of a database made once for the whole run (``sstest_<run>_<what>``) and filled by
    ``build(url)``, for every worker to copy or read, never to write; dropped when the run ends."""
    name = f"sstest_{run_token()}_{what}"
    url = make_url(require_server(engine_name)).set(database=name).render_as_string(hide_password=False)

    def create(folder: Path) -> None:
        mark_database(engine_name, name)
        _drop_database(engine_name, name)  # left by a build that failed
        server_statements(require_server(engine_name), f"CREATE DATABASE {name}")
        build(url)

    once_per_run(f"database-{engine_name}-{what}", create)
    return url


def database_name(prefix: str) -> str:
    """A new database (or schema) name on a server: ``PREFIX_WORKER_RANDOM``, unique across workers and runs."""
    return f"{prefix}_{worker_id()}_{uuid.uuid4().hex[:10]}"


def require_server(name: str) -> str:
    """The URL of this test process's own database on the server ``name`` (``postgresql`` or ``mariadb``),
    created on first use and dropped at the end of the session (``drop_worker_databases``); skips the test
    (fails it under CI=true) when the server is unreachable.

    A test may create databases, schemas or connections from it, never tables in it: what a test writes
    goes into a database or schema of its own (``isolated_database``, ``throwaway_airflow_database``...),
    so that no test sees another's rows, and PostgreSQL's per-database advisory locks (clean --exclusive)
    are not shared with another worker's tests."""
    problem = _server_problem(name)
    if problem is not None:
        message = f"{name} is not reachable at {SERVER_URLS[name]} ({problem}); {HOW_TO_START[name]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    if name not in _worker_databases:
        label = f"sstest_{run_token()}_{worker_id()}"
        charset = "" if name == "postgresql" else " CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        mark_database(name, label)
        server_statements(SERVER_URLS[name], f"CREATE DATABASE {label}{charset}")
        url = make_url(SERVER_URLS[name]).set(database=label).render_as_string(hide_password=False)
        _worker_databases[name] = url
    return _worker_databases[name]


def _server_problem(name: str) -> str | None:
    """Why the server ``name`` cannot be reached (None: it can), asked once per process."""
    if name not in _reachable:
        try:
            engine = engine_of(SERVER_URLS[name], connect_args={"connect_timeout": 3})
            with engine.connect():
                pass
            engine.dispose()
            _reachable[name] = None
        except Exception as exc:  # any failure to connect means: no server here
            _reachable[name] = str(exc).splitlines()[0]
    return _reachable[name]


def server_environment() -> dict[str, str]:
    """This process's environment for a child that makes its own stores on the servers (bench/): with
    STATESTORE_TEST_PG / STATESTORE_TEST_MYSQL naming this worker's databases where the server is reachable
    (the child skips the others, as it would anyway)."""
    env = dict(os.environ)
    for name, variable in (("postgresql", "STATESTORE_TEST_PG"), ("mariadb", "STATESTORE_TEST_MYSQL")):
        if _server_problem(name) is None:
            env[variable] = require_server(name)
    return env


def drop_worker_databases() -> None:
    """Drop the databases ``require_server`` created for this process (at the end of its session)."""
    dispose_kept_engines()  # PostgreSQL's DROP DATABASE ... WITH (FORCE) would end their sessions anyway
    while _worker_databases:
        name, url = _worker_databases.popitem()
        label = make_url(url).database
        assert label is not None
        _drop_database(name, label)
        (run_folder() / "databases" / f"{name}--{label}").unlink(missing_ok=True)


# Engines on the servers' own databases and this process's (SERVER_URLS, require_server), each keeping one idle
# connection for the process: the fixtures' CREATE/DROP of every store and their emptying would otherwise pay
# for a new server session each time (on PostgreSQL a backend started and its catalog caches filled again:
# about 20 ms of the server's CPU per test). Never one on a store's URL: a connection left in a store could be
# the session a test looks for or kills.
_kept_engines: dict[str, Engine] = {}


def kept_engine(url: str) -> Engine:
    """The process's engine on the server or worker database ``url`` (AUTOCOMMIT, one connection kept)."""
    if url not in _kept_engines:
        _kept_engines[url] = engine_of(url, isolation_level="AUTOCOMMIT", pool_size=1, pool_pre_ping=True)
    return _kept_engines[url]


def dispose_kept_engines() -> None:
    while _kept_engines:
        _kept_engines.popitem()[1].dispose()


def server_statements(url: str, *statements: str) -> None:
    """Run ``statements`` one by one on the server ``url`` names, each committed at once (DDL, DROP DATABASE)."""
    kept = url in SERVER_URLS.values() or url in _worker_databases.values()
    engine = kept_engine(url) if kept else engine_of(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        if not kept:
            engine.dispose()


@contextmanager
def throwaway_database(engine_name: str, prefix: str = "db", options: str = "") -> Iterator[str]:
    """A new, empty database of its own on the PostgreSQL or MariaDB server, named ``database_name(prefix)``
    and created with ``options`` (``CHARACTER SET ...``): its URL; dropped afterwards (on PostgreSQL WITH
    (FORCE): PgBouncer may still hold server connections to it). Skips when the server is unreachable."""
    worker_url = require_server(engine_name)
    name = database_name(prefix)
    server_statements(worker_url, f"CREATE DATABASE {name}{' ' + options if options else ''}")
    try:
        yield make_url(worker_url).set(database=name).render_as_string(hide_password=False)
    finally:
        force = " WITH (FORCE)" if engine_name == "postgresql" else ""
        server_statements(worker_url, f"DROP DATABASE IF EXISTS {name}{force}")
