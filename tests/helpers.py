"""What the tests share besides fixtures: database servers and stores, raw SQL, and the two ways to run the CLI.

Test modules import from here (``from helpers import ...``): pytest puts ``tests/`` on ``sys.path`` because
it has no ``__init__.py``. ``conftest.py`` holds only fixtures and the hook that spreads tests over engines.

Running the CLI:

- ``run_cli`` (or the ``cli`` fixture, which adds ``--conn`` of the test's store) runs it in-process; every
  test that only looks at exit code, stdout and stderr uses it.
- ``run_statestore_process`` / ``statestore_argv`` start a real process, for what needs one: signals, a
  terminal, the start-up fast path, an interpreter without the database drivers, an installed wheel.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import typer.main
import warm
from sqlalchemy import Engine, create_engine, event, make_url, text
from typer.testing import CliRunner

from statestore_cli.cli.app import app
from statestore_cli.db import mysql_tls

REPO = Path(__file__).resolve().parent.parent


# -- running the CLI ----------------------------------------------------------------------------------------
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


_root_command: list[Any] = []  # the click command typer makes of the app, made once per process


def engine_of(url: str, **kwargs: Any) -> Engine:
    """``create_engine(url, **kwargs)`` for the tests' own SQL; on MySQL/MariaDB its connections skip the 30 ms
    of CPU PyMySQL's default TLS mode spends loading the CA store, as the tool's do (``mysql_tls``):
    the suite's helpers open thousands of them."""
    engine = create_engine(url, **kwargs)
    if engine.dialect.name in ("mysql", "mariadb") and engine.dialect.driver == "pymysql":
        event.listen(engine, "do_connect", mysql_tls.connect)
    return engine


def run_cli(*args: str, conn: str | None = None, input: str | None = None) -> Result:
    """Run ``statestore [--conn CONN] ARGS`` in this process; without ``conn`` the configuration decides.

    As ``typer.testing.CliRunner.invoke`` does (stdin, stdout, stderr and the environment isolated, the exit
    code from SystemExit), but with the click command typer makes of the app made once, not on each
    call, where it took two thirds of a run's time: a process makes it once too, and keeps no state in it."""
    argv = (["--conn", conn] if conn else []) + list(args)
    if not _root_command:
        _root_command.append(typer.main.get_command(app))
    command = _root_command[0]
    runner = CliRunner()
    exception: BaseException | None = None
    with runner.isolation(input=input) as (stdout, stderr, _):
        try:
            command.main(args=argv, prog_name=runner.get_default_prog_name(command))
            exit_code = 0
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code
            if code != 0:
                exception = exc
            if not isinstance(code, int):
                sys.stdout.write(f"{code}\n")
                code = 1
            exit_code = code
        except Exception as exc:  # as CliRunner: the exception is the result's, exit code 1
            exception, exit_code = exc, 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = stdout.getvalue(), stderr.getvalue()

    def decoded(data: bytes) -> str:
        return data.decode(runner.charset, "replace").replace("\r\n", "\n")

    return Result(exit_code, decoded(out), decoded(err), exception)


def statestore_argv(*args: str, code: str | None = None, python_flags: Sequence[str] = ()) -> list[str]:
    """The command line of a real ``statestore ARGS`` process: ``python -m statestore_cli ARGS``.

    With ``code`` it is ``python -c CODE ARGS`` instead: CODE prepares the process (blocks an import,
    reports what was loaded...) and calls ``statestore_cli.__main__.main()``, or only imports the package.
    """
    how = ["-c", code] if code is not None else ["-m", "statestore_cli"]
    return [sys.executable, *python_flags, *how, *args]


def run_statestore_process(
    *args: str,
    code: str | None = None,
    python_flags: Sequence[str] = (),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float = 300,
) -> Result:
    """Run ``statestore ARGS`` as a real process (see ``statestore_argv``) and wait for it to exit; without
    ``code`` or flags, one the worker's warm server forks where that changes nothing (``warm.py``)."""
    if code is None and not python_flags:
        done = warm.run(args, env=env, cwd=cwd, input=input, timeout=timeout)
    else:
        argv = statestore_argv(*args, code=code, python_flags=python_flags)
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=cwd, input=input, timeout=timeout, check=False
        )
    return Result(done.returncode, done.stdout, done.stderr, None)


def start_statestore(*args: str, **options: Any) -> subprocess.Popen:
    """``subprocess.Popen(statestore_argv(*args), **options)``: a real ``statestore`` process, forked by the
    worker's warm server where that changes nothing the test can see (``warm.py``)."""
    return warm.popen(args, **options)


def read_terminal(primary: int, proc: subprocess.Popen, on_output: Callable[[bytes], None] | None = None) -> bytes:
    """Everything ``proc`` writes to the pseudo-terminal whose other side is ``primary``, until it closes
    it; ``on_output`` sees what was read so far after each read (to answer a prompt). Closes ``primary``."""
    seen = b""
    while True:
        ready, _, _ = select.select([primary], [], [], 20)
        if not ready:
            proc.kill()
            pytest.fail(f"no output on the terminal; so far {seen!r}")
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if on_output is not None:
            on_output(seen)
    os.close(primary)
    return seen


# -- database servers and stores -----------------------------------------------------------------------------
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


def worker_id() -> str:
    """This test process: pytest-xdist's worker id (``gw0``, ``gw1``...), or ``main`` without workers."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


# One test run (all of its workers) shares a token and a folder, which the controller (the one process
# without workers) makes at the start and removes at the end (conftest's pytest_configure and
# pytest_unconfigure); workers inherit them through the environment. Two runs at once on one machine (two
# checkouts, a developer's and CI's) get different ones, so their databases and files never meet.
RUN_TOKEN_VARIABLE = "STATESTORE_TEST_RUN"


def run_token() -> str:
    """This test run's token (8 hex digits), shared by its workers."""
    return os.environ[RUN_TOKEN_VARIABLE]


def run_folder() -> Path:
    """This test run's folder, shared by its workers: for what is built once per run (``once_per_run``)."""
    return Path(tempfile.gettempdir()) / f"statestore-tests-{run_token()}"


def start_run() -> None:
    """Make this run's token and folder (in the controller, before the workers start)."""
    if RUN_TOKEN_VARIABLE not in os.environ:
        os.environ[RUN_TOKEN_VARIABLE] = uuid.uuid4().hex[:8]
    run_folder().mkdir(exist_ok=True)


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


def _mark_database(engine_name: str, name: str) -> Path:
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


@contextmanager
def run_lock(name: str) -> Iterator[None]:
    """Hold the run-wide lock ``name``: one worker at a time."""
    import fcntl

    with open(run_folder() / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def once_per_run(name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` of the run's folder, made by ``build(folder)`` the first time any worker asks
    (the others wait for it); a build that failed is tried again by the next to ask."""
    folder = run_folder() / name
    done = folder / ".done"
    with run_lock(name):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def run_database(engine_name: str, what: str, build: Callable[[str], None]) -> str:
    """The URL of a database made once for the whole run (``sstest_<run>_<what>``) and filled by
    ``build(url)``, for every worker to copy or read, never to write; dropped when the run ends."""
    name = f"sstest_{run_token()}_{what}"
    url = make_url(require_server(engine_name)).set(database=name).render_as_string(hide_password=False)

    def create(folder: Path) -> None:
        _mark_database(engine_name, name)
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
        _mark_database(name, label)
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
def isolated_database(name: str, tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database of its own: a SQLite file, a PostgreSQL schema (in this process's database,
    ``require_server``), a MariaDB database."""
    if name == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    worker_url = require_server(name)
    label = database_name("ss")
    kind = "SCHEMA" if name == "postgresql" else "DATABASE"
    server_statements(worker_url, f"CREATE {kind} {label}")
    url = make_url(worker_url)
    if name == "postgresql":
        url = url.update_query_dict({"options": f"-csearch_path={label}"})
    else:
        url = url.set(database=label)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        server_statements(worker_url, f"DROP {kind} {label}" + (" CASCADE" if name == "postgresql" else ""))


# PostgreSQL stores db_url hands out, kept for the worker's next test: making a schema with its tables and
# dropping it again costs the server four times what emptying it does.
_idle_pg_stores: list[tuple[str, str, list[tuple]]] = []  # (schema, url, what db init made)
_PG_SHAPE = """
SELECT 'column', table_name::text, column_name::text,
       data_type::text || is_nullable::text || coalesce(column_default, '')
  FROM information_schema.columns WHERE table_schema = :s
UNION ALL SELECT 'relation', c.relname::text, c.relkind::text,
       coalesce(c.reloptions::text, '') || coalesce(c.relacl::text, '')
  FROM pg_class c WHERE c.relnamespace = CAST(:s AS regnamespace)
UNION ALL SELECT 'index', tablename::text, indexname::text, indexdef FROM pg_indexes WHERE schemaname = :s
UNION ALL SELECT 'constraint', conrelid::regclass::text, conname::text, pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = CAST(:s AS regnamespace)
UNION ALL SELECT 'trigger', tgrelid::regclass::text, tgname::text, ''
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  WHERE NOT t.tgisinternal AND c.relnamespace = CAST(:s AS regnamespace)
UNION ALL SELECT 'routine', proname::text, '', '' FROM pg_proc WHERE pronamespace = CAST(:s AS regnamespace)
ORDER BY 1, 2, 3, 4
"""


def _pg_shape(schema: str) -> list[tuple]:
    with kept_engine(require_server("postgresql")).connect() as conn:
        return [tuple(row) for row in conn.execute(text(_PG_SHAPE), {"s": schema})]


@contextmanager
def postgresql_store() -> Iterator[str]:
    """The URL of a PostgreSQL store with the schema made, a schema of its own in this worker's database, as
    ``isolated_database`` and ``db init`` make it, with nothing configured. Afterwards it is emptied
    (``TRUNCATE ... RESTART IDENTITY``: new, empty tables, counters from 1) and kept for the worker's next
    test, unless the test changed what is in it (a table, column, index, constraint, trigger or routine
    added, changed or dropped), or it cannot be emptied at once: then it is dropped."""
    if _idle_pg_stores:
        label, url, shape = _idle_pg_stores.pop()
    else:
        from statestore_cli.config import load_settings
        from statestore_cli.ops.commands import db_init

        worker_url = require_server("postgresql")
        label = database_name("ss")
        server_statements(worker_url, f"CREATE SCHEMA {label}")
        url = make_url(worker_url).update_query_dict({"options": f"-csearch_path={label}"})
        url = url.render_as_string(hide_password=False)
        db_init(load_settings(conn_override=url, environ={"AIRFLOW_HOME": tempfile.gettempdir()}))
        shape = _pg_shape(label)
    try:
        yield url
    finally:
        if not _empty_pg_store(label, shape):
            server_statements(require_server("postgresql"), f"DROP SCHEMA {label} CASCADE")
        else:
            _idle_pg_stores.append((label, url, shape))


def _empty_pg_store(schema: str, shape: list[tuple]) -> bool:
    """Empty the store in ``schema`` if it is as db init made it; whether it was."""
    tables = sorted({row[1] for row in shape if row[0] == "relation" and row[2] in ("r", "p")})
    try:
        with kept_engine(require_server("postgresql")).connect() as kept:
            conn = kept.execution_options(isolation_level="READ COMMITTED")  # one transaction: SET LOCAL holds
            conn.begin()
            if [tuple(row) for row in conn.execute(text(_PG_SHAPE), {"s": schema})] != shape:
                return False
            conn.exec_driver_sql("SET LOCAL lock_timeout = '5s'")  # a lock the test left: drop it instead
            conn.exec_driver_sql(f"TRUNCATE {', '.join(f'{schema}.{t}' for t in tables)} RESTART IDENTITY CASCADE")
            conn.commit()
        return True
    except Exception:  # whatever stops the reuse, the store is dropped as isolated_database drops it
        return False


def quote_key(statement: str, dialect: str) -> str:
    """``statement`` with ``{key}``, the reserved column name, quoted as the engine wants."""
    return statement.replace("{key}", "`key`" if dialect in ("mysql", "mariadb") else '"key"')


def sql(url: str, statement: str, **params: object) -> list[tuple]:
    """Run one SQL statement on the store at ``url`` (any engine) and return its rows.

    Write the reserved column name ``key`` as ``{key}``: it is quoted as each engine wants.
    """
    engine = engine_of(url)
    statement = quote_key(statement, engine.dialect.name)
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


# -- Airflow metadata databases from tests/fixtures (their README says how each was made) --------------------
FIXTURES = REPO / "tests" / "fixtures"
HEAD_332, BETWEEN, HEAD_34 = "d2f4e1b3c5a7", "54a27b6f9d01", "a5d7b9c13e40"
# The DDL steps applied on the 3.3.2 schema for each revision, and the files they are in per engine.
AIRFLOW_STEPS = {BETWEEN: ("between",), HEAD_34: ("between", "head")}
STEP_FILE = {"between": "airflow-3.4-between-{engine}.sql", "head": "airflow-3.4-{engine}.sql"}
FILE_ENGINE = {"sqlite": "sqlite", "postgresql": "postgres", "mariadb": "mysql"}  # the DDL files' names
SERVER_DUMPS = {"postgresql": "airflow-3.3.2-postgres-schema.sql", "mariadb": "airflow-3.3.2-mysql-schema.sql"}


def sql_statements(text: str) -> list[str]:
    """The statements of a mariadb-dump file or DDL step (none has a ``;`` inside a string or a routine)."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith("/*M!"))  # MariaDB's sandbox mark
    chunks = (chunk.strip() for chunk in text.split(";\n"))
    return [c for c in chunks if c and not all(line.startswith("--") for line in c.splitlines())]


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


def throwaway_airflow_database(engine_name: str) -> AbstractContextManager[str]:
    """A new, empty database (``throwaway_database``) for an Airflow schema: ``utf8mb4_unicode_ci`` on
    MariaDB, as the MariaDB dump was made in."""
    options = "" if engine_name == "postgresql" else "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    return throwaway_database(engine_name, "afx", options)


def load_airflow_schema(engine_name: str, url: str, revision: str) -> None:
    """Load Airflow 3.3.2's schema dump into the empty server database at ``url``, then the hand-written
    3.4 DDL steps up to ``revision``. The 3.3.2 dumps hold no rows: at ``HEAD_332`` alembic_version is empty."""
    dump = (FIXTURES / SERVER_DUMPS[engine_name]).read_text()
    steps = [
        (FIXTURES / STEP_FILE[s].format(engine=FILE_ENGINE[engine_name])).read_text()
        for s in AIRFLOW_STEPS.get(revision, ())
    ]
    engine = engine_of(url)
    try:
        with engine.begin() as conn:
            if engine_name == "postgresql":
                conn.exec_driver_sql("\n".join(line for line in dump.splitlines() if not line.startswith("\\")))
                conn.exec_driver_sql("SELECT pg_catalog.set_config('search_path', 'public', false)")
                for step in steps:
                    conn.exec_driver_sql(step)
            else:
                for statement in sql_statements(dump) + [s for step in steps for s in sql_statements(step)]:
                    conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


SQLITE_FIXTURES = {
    HEAD_332: "airflow-3.3.2.sqlite",
    BETWEEN: "airflow-3.4-between.sqlite",
    HEAD_34: "airflow-3.4.sqlite",
}


@contextmanager
def airflow_database(engine_name: str, revision: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an Airflow metadata database of its own at ``revision`` (``HEAD_332``, ``BETWEEN`` or
    ``HEAD_34``), empty but for its schema: a copy of the SQLite fixture in ``tmp_path``, a throwaway
    PostgreSQL database copied from the run's template (``airflow_template``), or a throwaway MariaDB
    database with the dump and the 3.4 steps loaded (``load_airflow_schema``)."""
    if engine_name == "sqlite":
        path = tmp_path / f"airflow-{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(FIXTURES / SQLITE_FIXTURES[revision], path)
        path.chmod(0o644)
        yield f"sqlite:///{path}"
        return
    if engine_name == "postgresql":  # a copy of the run's template: the dump is loaded once, not per test
        template = make_url(airflow_template(revision)).database
        with ExitStack() as stack:
            with run_lock(f"template-{template}"):  # CREATE DATABASE refuses a template another session is in
                url = stack.enter_context(throwaway_database("postgresql", "afx", f"TEMPLATE {template}"))
            yield url
        return
    with throwaway_airflow_database(engine_name) as url:
        load_airflow_schema(engine_name, url, revision)
        yield url


def airflow_template(revision: str) -> str:
    """The URL of a PostgreSQL database holding the Airflow schema at ``revision``, made once per run
    (``run_database``): CREATE DATABASE copies it for each test, which only read it as a template."""
    return run_database(
        "postgresql", f"airflow_{revision}", lambda url: load_airflow_schema("postgresql", url, revision)
    )


# -- custom backends --------------------------------------------------------------------------------------
# The module the ``backends`` fixture makes importable as ``ss_test_backends``.
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


# -- what people see --------------------------------------------------------------------------------------
EXPECTED = REPO / "tests" / "expected"
UPDATE_EXPECTED = "STATESTORE_UPDATE_EXPECTED"


def assert_expected(name: str, actual: str) -> None:
    """``actual`` must equal the checked-in ``tests/expected/NAME``, so any change to what people see is
    deliberate. With ``STATESTORE_UPDATE_EXPECTED=1`` the file is written instead and the test fails:
    the new output is then reviewed in the diff and the test run again."""
    path = EXPECTED / name
    if os.environ.get(UPDATE_EXPECTED) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        pytest.fail(f"wrote {path.relative_to(REPO)}: review it, then run the test without {UPDATE_EXPECTED}")
    assert path.exists(), f"no expected output {path.relative_to(REPO)}; create it with {UPDATE_EXPECTED}=1"
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{path.relative_to(REPO)} differs:\n--- expected\n{expected}--- actual\n{actual}"


# A store as operators have them: scheduled and manual runs, long task ids, mapped tasks with 4-digit
# map indexes, 60-character keys; fixed timestamps, so what is shown does not depend on the day.
REALISTIC_RUNS = ("scheduled__2026-11-30T00:00:00+00:00", "manual__2026-11-29T17:45:12.345678+00:00")
REALISTIC_KEY = "external_system_reference_for_partition_2026_11_30_eu_west_1"  # 60 characters
REALISTIC_UPDATED = datetime(2026, 11, 29, 10, 15, 30, tzinfo=UTC)
REALISTIC_EXPIRED = datetime(2026, 11, 1, 3, 0, 0, tzinfo=UTC)
REALISTIC_LATER = datetime(2037, 6, 1, 12, 0, 0, tzinfo=UTC)  # far off: goldens do not change as time passes


def realistic_keys() -> list[tuple[str, str, str, int, str, datetime | None]]:
    """(dag_id, run_id, task_id, map_index, key, expires_at) of the realistic store's task keys."""
    keys = []
    for dag_id in ("etl_orders_daily", "ml_feature_store_refresh_with_a_rather_long_dag_id"):
        for run_id in REALISTIC_RUNS:
            keys.append((dag_id, run_id, "submit_spark_job", -1, "job_id", REALISTIC_EXPIRED))
            keys.append((dag_id, run_id, "submit_spark_job", -1, REALISTIC_KEY, REALISTIC_LATER))
            keys.append((dag_id, run_id, "wait_for_emr_cluster_to_finish_processing", 7, "checkpoint", None))
            keys.append((dag_id, run_id, "load_partition", 1023, REALISTIC_KEY, REALISTIC_EXPIRED))
    return keys


def seed_realistic(url: str) -> None:
    """Write the realistic store's task keys and two asset keys, with fixed ``updated_at``."""
    from statestore_cli import AssetScope, MetastoreBackend, TaskScope
    from statestore_cli.db.database import make_engine

    backend = MetastoreBackend(make_engine(url))
    try:
        for dag_id, run_id, task_id, map_index, key, expires_at in realistic_keys():
            value = '{"job_id": "spark-application-1764460800123_0042", "attempt": 2}'
            backend.set(TaskScope(dag_id, run_id, task_id, map_index), key, value, expires_at=expires_at)
        for name in ("s3://warehouse/orders/daily_partitions", "watermark"):
            backend.set(AssetScope(name=name, uri=name), "last_processed_partition", '"2026-11-29"')
    finally:
        backend.engine.dispose()
    moment: object = REALISTIC_UPDATED  # as each engine stores it: SQLite text, MySQL naive UTC
    if url.startswith("sqlite"):
        moment = REALISTIC_UPDATED.strftime("%Y-%m-%d %H:%M:%S.%f")
    elif url.startswith(("mysql", "mariadb")):
        moment = REALISTIC_UPDATED.replace(tzinfo=None)
    for table in ("task_state_store", "asset_state_store"):
        sql(url, f"UPDATE {table} SET updated_at = :moment", moment=moment)


# The store of an operator's report, as seen in tmux at 80x30: one dag run, a task mapped over 21 indexes,
# keys of 40-60 characters, three of them differing only in their middle (what a shortened key hid).
OPERATOR_DAG = "etl_orders_daily"
OPERATOR_RUN = "scheduled__2026-11-30T00:00:00+00:00"
OPERATOR_TASK = "submit_spark_job"
OPERATOR_REGION_KEYS = tuple(
    f"last_committed_offset_for_region_{region}_kafka_topic_orders"  # 60 characters and more
    for region in ("eu_west_1", "us_east_1", "ap_south_1")
)
OPERATOR_KEY = "spark_application_id_of_the_submitted_job"  # 41 characters, one per map index
OPERATOR_ASSET_URI = "s3://warehouse-prod-eu-west-1/orders/daily_partitions/version_2"
OPERATOR_ASSET_KEY = "last_processed_partition_of_the_orders_daily_export"


def seed_operator_store(url: str) -> None:
    """The operator's store: ``submit_spark_job`` over map indexes 0-20, each with ``OPERATOR_KEY`` (expired
    below index 3), index 0 also with the three region keys (expired) and ``job_id``; an active asset and
    an inactive one (no dag uses it) with a long key each; fixed ``updated_at``."""
    from statestore_cli import AssetScope, MetastoreBackend, TaskScope
    from statestore_cli.db.database import make_engine

    backend = MetastoreBackend(make_engine(url))
    try:
        for index in range(21):
            scope = TaskScope(OPERATOR_DAG, OPERATOR_RUN, OPERATOR_TASK, index)
            expires = REALISTIC_EXPIRED if index < 3 else REALISTIC_LATER
            backend.set(scope, OPERATOR_KEY, '"application_1764460800123_0042"', expires_at=expires)
        first = TaskScope(OPERATOR_DAG, OPERATOR_RUN, OPERATOR_TASK, 0)
        for key in OPERATOR_REGION_KEYS:
            backend.set(first, key, "1764460800", expires_at=REALISTIC_EXPIRED)
        backend.set(first, "job_id", '"j-42"', expires_at=None)
        for name in ("orders_daily_partitions", "orders_daily_partitions_legacy"):
            backend.set(AssetScope(name=name, uri=OPERATOR_ASSET_URI + name[23:]), OPERATOR_ASSET_KEY, '"2026-11-29"')
    finally:
        backend.engine.dispose()
    sql(url, "DELETE FROM asset_active WHERE name = 'orders_daily_partitions_legacy'")
    moment = REALISTIC_UPDATED.strftime("%Y-%m-%d %H:%M:%S.%f")  # SQLite's text
    for table in ("task_state_store", "asset_state_store"):
        sql(url, f"UPDATE {table} SET updated_at = :moment", moment=moment)


# -- Prometheus metrics files -------------------------------------------------------------------------------
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SAMPLE_VALUE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|NaN|Inf)")


_LABELS = re.compile(
    r'\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*",)*[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*")\}'
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"')


def _unescape(match: re.Match[str]) -> str:
    return "\n" if match.group(1) == "n" else match.group(1)


Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


def read_samples(path: Path) -> dict[str, dict[Labels, float]]:
    """The metrics file ``path`` as {family name: {its samples' labels: value}}, in the file's order, after
    checking it strictly against the text exposition format: every family a ``# HELP`` line, then its
    ``# TYPE`` line, then its samples (each with distinct labels, every one with a ``database`` label),
    no blank or stray lines, a newline at the end; and that prometheus_client's parser reads the same
    families, labels and values from it."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), "the last line must end with a newline"
    families: dict[str, dict[str, object]] = {}
    samples: dict[str, dict[Labels, float]] = {}
    current = None
    for number, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {number}: {line!r}"
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            assert _METRIC_NAME.fullmatch(name) and name not in families and help_text.strip(), where
            assert "\\" not in help_text, where  # no escapes needed: none used
            families[name] = {}
            samples[name] = {}
            current = name
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE ") :].partition(" ")
            assert name == current and "type" not in families[name], where
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), where
            families[name]["type"] = kind
        else:
            head, _, value = line.rpartition(" ")
            name, brace, rest = head.partition("{")
            assert name == current and "type" in families[name], where
            labels: Labels = ()
            if brace:
                match = _LABELS.fullmatch(brace + rest)
                assert match, where
                pairs = _LABEL.findall(match.group(1))
                names = [label for label, _ in pairs]
                assert len(set(names)) == len(names), where
                unescaped = [(k, re.sub(r"\\(.)", _unescape, v)) for k, v in pairs]
                labels = tuple(sorted(unescaped))
            assert "database" in dict(labels) and dict(labels)["database"], f"{where}: no database label"
            assert labels not in samples[name], f"{where}: a second sample with these labels"
            assert _SAMPLE_VALUE.fullmatch(value), where
            samples[name][labels] = float(value)
    assert all("type" in family for family in families.values())

    from prometheus_client.parser import text_string_to_metric_families

    parsed = {family.name: family for family in text_string_to_metric_families(text)}
    assert set(parsed) == set(samples)
    for name, family in parsed.items():
        assert family.type == families[name]["type"]
        read = {tuple(sorted(sample.labels.items())): sample.value for sample in family.samples}
        assert read == samples[name]
    return samples


def read_metrics(path: Path, labels: dict[str, str] | None = None) -> dict[str, float | None]:
    """The metrics file ``path`` (checked as ``read_samples`` does) as {family name: its one sample, or
    None when it has none}; every sample has exactly ``labels``, by default a ``database`` label only."""
    values: dict[str, float | None] = {}
    for name, found in read_samples(path).items():
        assert len(found) <= 1, f"{name} has {len(found)} samples"
        for sample_labels in found:
            if labels is None:
                assert [label for label, _ in sample_labels] == ["database"], (name, sample_labels)
            else:
                assert dict(sample_labels) == labels, (name, sample_labels)
        values[name] = next(iter(found.values()), None)
    return values


# -- PgBouncer in front of the PostgreSQL server ------------------------------------------------------------
PGBOUNCER = os.environ.get("STATESTORE_TEST_PGBOUNCER", "/usr/sbin/pgbouncer")  # where Debian's package puts it


def require_pgbouncer() -> str:
    """The PgBouncer binary; skips the test (fails it under CI=true, where .ci/run installs it) without one."""
    found = PGBOUNCER if os.access(PGBOUNCER, os.X_OK) else shutil.which("pgbouncer")
    if found is None:
        message = f"pgbouncer is not installed at {PGBOUNCER} or on PATH; install it with: apt-get install -y pgbouncer"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def throwaway_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (``throwaway_database``): its name; dropped afterwards.

    Through PgBouncer a schema cannot be chosen with the URL's ``options`` (PgBouncer refuses that startup
    parameter, and ignoring it would put the tables in ``public`` of the shared database), so a store
    behind it gets a database of its own and uses its ``public`` schema."""
    with throwaway_database("postgresql", "ss") as url:
        name = make_url(url).database
        assert name is not None
        yield name


class PgBouncer(NamedTuple):
    port: int
    folder: Path  # its configuration and log, removed when it stops

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def log(self) -> str:
        return (self.folder / "pgbouncer.log").read_text(errors="replace")

    def connect(self, database: str) -> Any:
        """A psycopg connection through PgBouncer that prepares nothing, as another client of the pool."""
        import psycopg

        where = {"host": "127.0.0.1", "port": self.port, "dbname": database, "user": "postgres"}
        return psycopg.connect(**where, prepare_threshold=None)

    def pinned(self, database: str, count: int) -> list[Any]:
        """``count`` connections through PgBouncer, each inside a transaction, so each holds a server
        connection of its own; with ``count`` the pool size they hold every server connection of the pool
        (and the pool has them all open afterwards). Roll them back to give the server connections back."""
        held = [self.connect(database) for _ in range(count)]
        pids = {conn.execute("SELECT pg_backend_pid()").fetchone()[0] for conn in held}
        assert len(pids) == count, f"{count} transactions shared server connections: {pids}"
        return held


@contextmanager
def pgbouncer(server_url: str, pool_mode: str = "transaction", pool_size: int = 2) -> Iterator[PgBouncer]:
    """PgBouncer from the system's package on a free loopback port, in front of the server of ``server_url``
    (every database of it), configured as Airflow's Helm chart runs it: ``pool_mode`` (transaction there),
    ``ignore_startup_parameters = extra_float_digits``; ``pool_size`` server connections per database and
    user, so that every client shares them. Consecutive transactions of one client go to different server
    connections (``server_round_robin``), as they do on a busy pool, so state left on one is found missing
    on the next. Its configuration and log are in a temporary folder of its own, removed with it; it is
    stopped (SIGTERM, then SIGKILL) afterwards."""
    binary = require_pgbouncer()
    server = make_url(server_url)
    # A folder of its own under the system's temporary directory: PgBouncer runs as another user when we
    # are root, and pytest's folders are private to us.
    folder = Path(tempfile.mkdtemp(prefix="statestore-pgbouncer-"))
    port = _free_port()
    (folder / "users.txt").write_text('"postgres" ""\n', encoding="utf-8")
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"logfile = {folder / 'pgbouncer.log'}\npidfile = {folder / 'pgbouncer.pid'}\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
        "max_client_conn = 200\nserver_round_robin = 1\n"
        "ignore_startup_parameters = extra_float_digits\n",
        encoding="utf-8",
    )
    argv = [binary, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: it runs as the server's own user
        import pwd

        user = pwd.getpwnam("postgres")
        argv[1:1] = ["-u", "postgres"]
        for path in (folder, *folder.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                log = folder / "pgbouncer.log"
                said = proc.stderr.read().decode(errors="replace") if proc.stderr and proc.poll() is not None else ""
                said += log.read_text(errors="replace")[-2000:] if log.exists() else ""
                pytest.fail(f"pgbouncer did not start on 127.0.0.1:{port}: {said}")
            time.sleep(0.05)
        yield PgBouncer(port, folder)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
