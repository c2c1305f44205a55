"""Throwaway Airflow 3.4 metadata databases (tests/fixtures/README.md) for the tests of the dag-run store.

SQLite: a copy of ``airflow-3.4.sqlite``; PostgreSQL and MariaDB: a new database with the 3.3.2 dump and
both hand-written 3.4 DDL steps loaded (``airflow_schema.airflow_database``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from airflow_schema import HEAD_34, airflow_database
from stores import sql


@contextmanager
def airflow34_database(name: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a new Airflow 3.4 database (``sqlite``, ``postgresql`` or ``mariadb``), dropped afterwards."""
    with airflow_database(name, HEAD_34, tmp_path) as url:
        yield url


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
