"""Airflow metadata databases from tests/fixtures (their README says how each was made): the schema at a
revision on any engine, a copy of the SQLite fixture or a database loaded from the dumps."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

from paths import REPO
from run_scope import run_lock
from servers import (
    database_name,
    engine_of,
    kept_engine,
    require_server,
    run_database,
    server_statements,
    throwaway_database,
)
from sqlalchemy import Connection, make_url, text
from stores import mariadb_shape, sessions_left

FIXTURES = REPO / "tests" / "fixtures"
HEAD_332, BETWEEN, HEAD_34 = "d2f4e1b3c5a7", "54a27b6f9d01", "a5d7b9c13e40"
# The DDL steps applied on the 3.3.2 schema for each revision, and the files they are in per engine.
AIRFLOW_STEPS = {BETWEEN: ("between",), HEAD_34: ("between", "head")}
STEP_FILE = {"between": "airflow-3.4-between-{engine}.sql", "head": "airflow-3.4-{engine}.sql"}
FILE_ENGINE = {"sqlite": "sqlite", "postgresql": "postgres", "mariadb": "mysql"}  # the DDL files' names
SERVER_DUMPS = {"postgresql": "airflow-3.3.2-postgres-schema.sql", "mariadb": "airflow-3.3.2-mysql-schema.sql"}


MARIADB_CHARSET = "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"  # the MariaDB dump's


def sql_statements(text: str) -> list[str]:
    """The statements of a mariadb-dump file or DDL step (none has a ``;`` inside a string or a routine)."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith("/*M!"))  # MariaDB's sandbox mark
    chunks = (chunk.strip() for chunk in text.split(";\n"))
    return [c for c in chunks if c and not all(line.startswith("--") for line in c.splitlines())]


def throwaway_airflow_database(engine_name: str) -> AbstractContextManager[str]:
    """A new, empty database (``throwaway_database``) for an Airflow schema: ``utf8mb4_unicode_ci`` on
    MariaDB, as the MariaDB dump was made in."""
    options = "" if engine_name == "postgresql" else MARIADB_CHARSET
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
    PostgreSQL database copied from the run's template (``airflow_template``), or a MariaDB database with
    the dump and the 3.4 steps loaded (``mariadb_airflow_database``)."""
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
    with mariadb_airflow_database(revision) as url:
        yield url


class _MariaDBAirflow(NamedTuple):
    name: str
    url: str
    shape: list[tuple]  # what is in it besides rows (stores.mariadb_shape)
    state: dict[str, tuple]  # each table's (checksum, AUTO_INCREMENT) once loaded
    rows: dict[str, tuple[list[str], list[tuple]]]  # the tables that held rows once loaded: columns, rows


# MariaDB has no CREATE DATABASE ... TEMPLATE, and loading the dump is the costliest thing a test of an Airflow
# database did there: each worker keeps the databases it loaded, one per revision, and puts back after each
# test the tables the test changed.
_idle_mariadb_airflow: dict[str, list[_MariaDBAirflow]] = {}


@contextmanager
def mariadb_airflow_database(revision: str) -> Iterator[str]:
    """The URL of a MariaDB database with the Airflow schema at ``revision`` loaded (``load_airflow_schema``),
    as ``throwaway_airflow_database`` makes it. Afterwards every table the test changed (its checksum or its
    AUTO_INCREMENT moved) is truncated and given back the rows it had when loaded, and the database is kept for
    the worker's next test of that revision; unless the test changed what is in it besides rows, a session is
    still in it, or it cannot be put back as it was at once: then it is dropped."""
    idle = _idle_mariadb_airflow.setdefault(revision, [])
    if idle:
        made = idle.pop()
    else:
        name = database_name("afx")
        server_statements(require_server("mariadb"), f"CREATE DATABASE {name} {MARIADB_CHARSET}")
        url = make_url(require_server("mariadb")).set(database=name).render_as_string(hide_password=False)
        load_airflow_schema("mariadb", url, revision)
        with kept_engine(require_server("mariadb")).connect() as conn:
            state = _table_state(conn, name)
            rows = {}
            for table, (checksum, _) in state.items():
                if checksum:  # an empty table's checksum is 0
                    result = conn.exec_driver_sql(f"SELECT * FROM {name}.{table}")
                    rows[table] = (list(result.keys()), [tuple(row) for row in result])
            made = _MariaDBAirflow(name, url, mariadb_shape(name, conn), state, rows)
    try:
        yield made.url
    finally:
        if _put_back(made):
            idle.append(made)
        else:
            server_statements(require_server("mariadb"), f"DROP DATABASE IF EXISTS {made.name}")


def _table_state(conn: Connection, database: str) -> dict[str, tuple]:
    """Each base table's (checksum, AUTO_INCREMENT)."""
    listed = "SELECT table_name, auto_increment FROM information_schema.tables WHERE table_schema = :s"
    listed += " AND table_type = 'BASE TABLE'"
    counters = {row[0]: row[1] for row in conn.execute(text(listed), {"s": database})}
    names = ", ".join(f"{database}.{table}" for table in sorted(counters))
    checksums = {row[0].split(".", 1)[1]: row[1] for row in conn.exec_driver_sql(f"CHECKSUM TABLE {names}")}
    return {table: (checksums[table], counters[table]) for table in counters}


def _put_back(made: _MariaDBAirflow) -> bool:
    """Put ``made`` back as it was loaded, if only rows changed; whether it is."""
    try:
        with kept_engine(require_server("mariadb")).connect() as conn:
            if mariadb_shape(made.name, conn) != made.shape or sessions_left(conn, made.name):
                return False
            changed = [t for t, state in _table_state(conn, made.name).items() if state != made.state[t]]
            if not changed:
                return True
            conn.exec_driver_sql("SET SESSION lock_wait_timeout = 5, innodb_lock_wait_timeout = 5")
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")  # any order: each table is put back
            try:
                for table in changed:
                    conn.exec_driver_sql(f"TRUNCATE TABLE {made.name}.{table}")
                    if table in made.rows:
                        columns, rows = made.rows[table]
                        names = ", ".join(f"`{c}`" for c in columns)
                        places = ", ".join(f":c{i}" for i in range(len(columns)))
                        insert = text(f"INSERT INTO {made.name}.{table} ({names}) VALUES ({places})")
                        conn.execute(insert, [{f"c{i}": v for i, v in enumerate(row)} for row in rows])
                conn.commit()
            finally:
                conn.exec_driver_sql(
                    "SET SESSION foreign_key_checks = 1, lock_wait_timeout = DEFAULT, "
                    "innodb_lock_wait_timeout = DEFAULT"
                )
            return _table_state(conn, made.name) == made.state
    except Exception:  # whatever stops the reuse, the database is dropped as throwaway_database drops it
        return False


def airflow_template(revision: str) -> str:
    """The URL of a PostgreSQL database holding the Airflow schema at ``revision``, made once per run
    (``run_database``): CREATE DATABASE copies it for each test, which only read it as a template."""
    return run_database(
        "postgresql", f"airflow_{revision}", lambda url: load_airflow_schema("postgresql", url, revision)
    )
