"""Throwaway Airflow 3.4 metadata databases (tests/fixtures/README.md) for the tests of the dag-run store.

SQLite: a copy of ``airflow-3.4.sqlite``; PostgreSQL and MariaDB: a new database with the 3.3.2 dump and
both hand-written 3.4 DDL steps loaded, as ``tests/test_schema_fixtures.py`` loads them.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from helpers import require_server, sql
from sqlalchemy import create_engine, make_url

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_DUMPS = {"postgresql": "airflow-3.3.2-postgres-schema.sql", "mariadb": "airflow-3.3.2-mysql-schema.sql"}
_STEPS = {"postgresql": "postgres", "mariadb": "mysql"}


def _statements(text: str) -> list[str]:
    text = "\n".join(line for line in text.splitlines() if not line.startswith("/*M!"))
    chunks = (chunk.strip() for chunk in text.split(";\n"))
    return [c for c in chunks if c and not all(line.startswith("--") for line in c.splitlines())]


def _load(name: str, url: str) -> None:
    dump = (FIXTURES / _DUMPS[name]).read_text()
    steps = [(FIXTURES / f"airflow-3.4{part}-{_STEPS[name]}.sql").read_text() for part in ("-between", "")]
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if name == "postgresql":
                conn.exec_driver_sql("\n".join(line for line in dump.splitlines() if not line.startswith("\\")))
                conn.exec_driver_sql("SELECT pg_catalog.set_config('search_path', 'public', false)")
                for step in steps:
                    conn.exec_driver_sql(step)
            else:
                for statement in _statements(dump) + [s for step in steps for s in _statements(step)]:
                    conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


@contextmanager
def airflow34_database(name: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a new Airflow 3.4 database (``sqlite``, ``postgresql`` or ``mariadb``), dropped afterwards."""
    if name == "sqlite":
        path = tmp_path / "airflow-3.4.sqlite"
        shutil.copyfile(FIXTURES / "airflow-3.4.sqlite", path)
        yield f"sqlite:///{path}"
        return
    admin_url = require_server(name)
    label = f"af34_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    charset = "" if name == "postgresql" else " CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {label}{charset}")
    url = make_url(admin_url).set(database=label).render_as_string(hide_password=False)
    try:
        _load(name, url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {label}" + (" WITH (FORCE)" if name == "postgresql" else ""))
        admin.dispose()


def add_runs(url: str, runs: list[tuple[str, str]], at: datetime) -> None:
    """Rows of ``dag_run`` (Airflow makes them; keys can only be written for runs that exist)."""
    moment: object = at.replace(tzinfo=None) if not url.startswith("postgresql") else at
    if url.startswith("sqlite"):
        moment = at.strftime("%Y-%m-%d %H:%M:%S.%f")
    for dag_id, run_id in runs:
        sql(
            url,
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES (:dag_id, :run_id, 'manual', :at, 0, 'not_started')",
            dag_id=dag_id,
            run_id=run_id,
            at=moment,
        )
