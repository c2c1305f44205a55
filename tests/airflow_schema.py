"""Airflow metadata databases from tests/fixtures (their README says how each was made): the schema at a
revision on any engine, a copy of the SQLite fixture or a database loaded from the dumps."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import NamedTuple

from paths import REPO
from run_scope import run_lock
from servers import (
    database_name,
    engine_of,
    kept_engine,
    mark_database,
    require_server,
    run_database,
    server_statements,
    throwaway_database,
)
from sqlalchemy import Connection, make_url, text
from stores import mariadb_shape, pg_shape, sessions_left

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
    ``HEAD_34``), empty but for its schema: a copy of the SQLite fixture in ``tmp_path``; on PostgreSQL and
    MariaDB the worker's database of that revision, put back as it was made after its earlier test
    (``kept_airflow_database``)."""
    if engine_name == "sqlite":
        path = tmp_path / f"airflow-{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(FIXTURES / SQLITE_FIXTURES[revision], path)
        path.chmod(0o644)
        yield f"sqlite:///{path}"
        return
    with kept_airflow_database(engine_name, revision) as url:
        yield url


class _KeptAirflow(NamedTuple):
    engine: str
    name: str
    url: str
    shape: list[tuple]  # what is in it besides rows (stores.pg_shape / mariadb_shape)
    state: dict[str, object]  # each table's contents (a checksum) and each counter, once made
    rows: dict[str, tuple[list[str], list[tuple]]]  # the tables that held rows once made: columns, rows


# Each worker keeps the Airflow databases it made, one per engine and revision, and puts back after each test
# the tables the test changed: on MariaDB each test loaded the whole dump (MariaDB has no CREATE DATABASE ...
# TEMPLATE), on PostgreSQL it copied the run's template, a tenth of that but still the costliest part of a test.
_idle_airflow: dict[tuple[str, str], list[_KeptAirflow]] = {}


@contextmanager
def kept_airflow_database(engine_name: str, revision: str) -> Iterator[str]:
    """The URL of a PostgreSQL or MariaDB database with the Airflow schema at ``revision``, as a copy of the
    run's template (``airflow_template``) or ``load_airflow_schema`` makes it. Afterwards every table the test
    changed is emptied and given back the rows it had (every counter back where it was), and the database is
    kept for the worker's next test of that revision; unless the test changed what is in it besides rows, a
    session is still in it, or it cannot be put back as it was at once: then it is dropped."""
    idle = _idle_airflow.setdefault((engine_name, revision), [])
    made = idle.pop() if idle else _make_airflow(engine_name, revision)
    try:
        yield made.url
    finally:
        if _put_back(made):
            idle.append(made)
        else:
            force = " WITH (FORCE)" if engine_name == "postgresql" else ""
            server_statements(require_server(engine_name), f"DROP DATABASE IF EXISTS {made.name}{force}")


def _make_airflow(engine_name: str, revision: str) -> _KeptAirflow:
    worker_url = require_server(engine_name)
    name = database_name("afx")
    mark_database(engine_name, name)  # a database of the server's, not the worker's: dropped when the run ends
    url = make_url(worker_url).set(database=name).render_as_string(hide_password=False)
    if engine_name == "postgresql":  # a copy of the run's template: the dump is loaded once, not per worker
        template = make_url(airflow_template(revision)).database
        with run_lock(f"template-{template}"):  # CREATE DATABASE refuses a template another session is in
            server_statements(worker_url, f"CREATE DATABASE {name} TEMPLATE {template}")
    else:
        server_statements(worker_url, f"CREATE DATABASE {name} {MARIADB_CHARSET}")
        load_airflow_schema(engine_name, url, revision)
    engine = engine_of(url)
    try:
        with engine.connect() as conn:
            state = _table_state(conn)
            rows = {}
            for table in _tables(conn):
                result = conn.exec_driver_sql(f"SELECT * FROM {_quoted(conn, table)}")
                found = [tuple(row) for row in result]
                if found:
                    rows[table] = (list(result.keys()), found)
            shape = _shape(conn, name)
    finally:
        engine.dispose()
    return _KeptAirflow(engine_name, name, url, shape, state, rows)


def _shape(conn: Connection, name: str) -> list[tuple]:
    """What is in the database besides rows; on PostgreSQL, its schemas too (a test may add one)."""
    if conn.dialect.name != "postgresql":
        return mariadb_shape(name, conn)
    schemas = [("schema", row[0]) for row in conn.exec_driver_sql("SELECT nspname FROM pg_namespace ORDER BY 1")]
    return schemas + pg_shape("public", conn)


def _quoted(conn: Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote_identifier(name)


def _tables(conn: Connection) -> list[str]:
    if conn.dialect.name == "postgresql":
        listed = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
    else:
        listed = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
        listed += " AND table_type = 'BASE TABLE' ORDER BY 1"
    return [row[0] for row in conn.exec_driver_sql(listed)]


def _table_state(conn: Connection) -> dict[str, object]:
    """Each table's contents as a checksum, and each counter (a sequence's last value, an AUTO_INCREMENT)."""
    tables = _tables(conn)
    if conn.dialect.name == "postgresql":
        sums = " UNION ALL ".join(
            f"SELECT '{table}', md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) "
            f"FROM {_quoted(conn, table)} x"
            for table in tables
        )
        state: dict[str, object] = dict(conn.exec_driver_sql(sums).fetchall())
        counters = "SELECT 'sequence ' || sequencename, last_value FROM pg_sequences WHERE schemaname = 'public'"
    else:
        names = ", ".join(_quoted(conn, table) for table in tables)
        state = {row[0].split(".", 1)[1]: row[1] for row in conn.exec_driver_sql(f"CHECKSUM TABLE {names}")}
        counters = "SELECT concat('counter ', table_name), auto_increment FROM information_schema.tables"
        counters += " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
    state.update(dict(conn.exec_driver_sql(counters).fetchall()))
    return state


def _put_back(made: _KeptAirflow) -> bool:
    """Put ``made`` back as it was made, if only rows and counters changed; whether it is."""
    try:
        with kept_engine(require_server(made.engine)).connect() as admin:
            if sessions_left(admin, made.name):
                return False
        engine = engine_of(made.url)
        try:
            with engine.connect() as conn:
                if _shape(conn, made.name) != made.shape:
                    return False
                state = _table_state(conn)
                if state == made.state:
                    return True
                _empty_changed(conn, made, state)
                conn.commit()
                for table, (columns, rows) in made.rows.items():
                    if _table_state(conn)[table] != made.state[table]:
                        names = ", ".join(_quoted(conn, column) for column in columns)
                        places = ", ".join(f":c{i}" for i in range(len(columns)))
                        insert = text(f"INSERT INTO {_quoted(conn, table)} ({names}) VALUES ({places})")
                        conn.execute(insert, [{f"c{i}": v for i, v in enumerate(row)} for row in rows])
                conn.commit()
                return _table_state(conn) == made.state
        finally:
            engine.dispose()
    except Exception:  # whatever stops the reuse, the database is dropped as throwaway_database drops it
        return False


def _empty_changed(conn: Connection, made: _KeptAirflow, state: dict[str, object]) -> None:
    """Empty the tables whose contents or counter changed, their counters back at the start."""
    changed = [key for key, value in state.items() if value != made.state.get(key)]
    if conn.dialect.name == "postgresql":
        # DELETE, not TRUNCATE: a TRUNCATE of a table Airflow's others reference cascades to dozens of them, each
        # a new file. Without the foreign keys' triggers (session_replication_role) the order does not matter.
        conn.exec_driver_sql("SET LOCAL lock_timeout = '5s'")  # a lock a session left: drop the database instead
        conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
        for key in changed:
            if key.startswith("sequence "):
                conn.exec_driver_sql(f"ALTER SEQUENCE {_quoted(conn, key.removeprefix('sequence '))} RESTART")
            else:
                conn.exec_driver_sql(f"DELETE FROM {_quoted(conn, key)}")
        return
    conn.exec_driver_sql("SET SESSION lock_wait_timeout = 5, innodb_lock_wait_timeout = 5, foreign_key_checks = 0")
    for table in sorted({key.removeprefix("counter ") for key in changed}):
        conn.exec_driver_sql(f"TRUNCATE TABLE {_quoted(conn, table)}")


def airflow_template(revision: str) -> str:
    """The URL of a PostgreSQL database holding the Airflow schema at ``revision``, made once per run
    (``run_database``): CREATE DATABASE copies it for each test, which only read it as a template."""
    return run_database(
        "postgresql", f"airflow_{revision}", lambda url: load_airflow_schema("postgresql", url, revision)
    )
