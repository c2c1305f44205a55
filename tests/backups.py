"""A store and its backups, as the tests of ``--backup`` and ``import`` use them: operators' long keys and
awkward values seeded, expired and live; the export and backup lines read back as records; a clean started
with a backup; and the restore."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cli_running import Result, run_cli, start_statestore
from servers import engine_of
from sqlalchemy import text
from stores import sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine

DAG = "etl_orders_daily"
RUN = "scheduled__2026-11-30T00:00:00+00:00"
TASK = "submit_spark_job"
NOW = datetime.now(UTC)
EXPIRED_AT = NOW - timedelta(days=3)


def long_key(i: int) -> str:
    """A 60-character key, as operators' keys are."""
    return f"spark_application_id_of_the_submitted_job_number_{i:04}".ljust(60, "_")


def seed(url: str, expired: int = 12, live: int = 3) -> None:
    """``expired`` task keys over two runs and five map indices (nested, non-ASCII and control-character
    values, expired 3 days ago and earlier), ``live`` keys that expire in a day or never, an asset key."""
    backend = MetastoreBackend(make_engine(url))
    try:
        for i in range(expired):
            run = RUN if i % 2 else "manual__2026-11-29T08:00:00+00:00"
            value = {"id": f"application_1764460800123_{i:04}", "note": "réessai \u2028 \u202e", "at": [i, None]}
            moment = EXPIRED_AT - timedelta(hours=i)
            backend.set(TaskScope(DAG, run, TASK, i % 5 - 1), long_key(i), json.dumps(value), expires_at=moment)
        for i in range(live):
            expires = None if i % 2 else NOW + timedelta(days=1)
            backend.set(TaskScope(DAG, RUN, "load"), f"live_{i}", json.dumps(i), expires_at=expires)
        backend.set(AssetScope(name="orders", uri="s3://warehouse/orders"), "watermark", '"2026-11-29"')
    finally:
        backend.engine.dispose()


def export(url: str) -> list[str]:
    result = run_cli("export", conn=url)
    assert result.exit_code == 0, result.output
    return result.stdout.split("\n")[:-1]  # not splitlines(): a value may hold U+2028, which it splits at


def task_lines(lines: list[str], prefix: str = "spark_application_id") -> list[str]:
    return [line for line in lines if json.loads(line)["key"].startswith(prefix)]


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def records(lines: list[str]) -> list[dict]:
    """The lines as records, timestamps as instants, sorted: what an import reads from them. (The database
    builds a task key's line, with a value's JSON as stored.)"""
    found = []
    for line in lines:
        record = json.loads(line)
        for name in ("updated_at", "expires_at"):
            if record[name] is not None:
                record[name] = datetime.fromisoformat(record[name])
        found.append(record)
    return sorted(found, key=lambda r: json.dumps(r, default=str, sort_keys=True))


def restore(url: str, backup: Path) -> Result:
    result = run_cli("import", str(backup), conn=url)
    assert result.exit_code == 0, result.output
    return result


def task_rows(url: str) -> int:
    return sql(url, "SELECT count(*) FROM task_state_store")[0][0]


def seed_bulk(url: str, count: int) -> None:
    """``count`` expired task keys of one task, written in one statement."""
    backend = MetastoreBackend(make_engine(url))
    backend.set(TaskScope(DAG, RUN, TASK), "first", '{"id": 0}', expires_at=EXPIRED_AT)
    backend.engine.dispose()
    run_pk = sql(url, "SELECT dag_run_id FROM task_state_store")[0][0]
    engine = engine_of(url)
    quoted = "`key`" if engine.dialect.name in ("mysql", "mariadb") else '"key"'
    moment = EXPIRED_AT.replace(tzinfo=None) if engine.dialect.name != "postgresql" else EXPIRED_AT
    statement = text(
        f"INSERT INTO task_state_store (dag_run_id, task_id, map_index, {quoted}, dag_id, run_id, value, "
        f"updated_at, expires_at) VALUES (:r, '{TASK}', -1, :k, '{DAG}', '{RUN}', :v, :t, :t)"
    )
    if engine.dialect.name == "sqlite":
        moment = moment.strftime("%Y-%m-%d %H:%M:%S.%f")  # type: ignore[assignment]
    rows = [{"r": run_pk, "k": long_key(i), "v": json.dumps({"id": i}), "t": moment} for i in range(1, count)]
    with engine.begin() as conn:
        conn.execute(statement, rows)
    engine.dispose()


def start_clean(url: str, backup: Path, batch: int = 20) -> subprocess.Popen:
    return start_statestore(
        "--conn",
        url,
        "clean",
        "--batch-size",
        str(batch),
        "--backup",
        str(backup),
        "-o",
        "json",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "STATESTORE_NO_FAST_PATH": "1"},
    )
