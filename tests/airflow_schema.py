"""Airflow metadata databases from tests/fixtures (their README says how each was made): the schema at a
revision on any engine, a copy of the SQLite fixture or a database loaded from the dumps."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

from paths import REPO
from run_scope import run_lock
from servers import engine_of, run_database, throwaway_database
from sqlalchemy import make_url

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
