"""``--backup FILE`` in a store whose tables are in ``[database] sql_alchemy_schema``: every backed-up command
(``clean`` in batches and in one statement, ``clear`` of a task, a dag run, a dag and an asset, ``assets
sweep``) writes each row it deletes, and ``statestore import FILE`` puts them back, on PostgreSQL (a schema)
and MariaDB (another database: a schema is one there).

On PostgreSQL a batch's rows are read through ``COPY (...) TO STDOUT``, whose statement text is sent as it is:
the schema must be written into it, as an executed statement has it put in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from backups import export, lines_of, long_key, records, restore
from cli_running import ok, run_cli
from schema_stores import SCHEMA_ENV, STATE_TABLES, SchemaStore, schema_store, tables_in
from servers import server_statements as admin
from servers import throwaway_database
from sqlalchemy import delete

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine
from statestore_cli.db.schema import asset_active

DAG = "etl_orders_daily"
RUN = "scheduled__2026-11-30T00:00:00+00:00"
OTHER_RUN = "manual__2026-11-29T08:00:00+00:00"
TASK = "submit_spark_job"
EXPIRED_AT = datetime.now(UTC) - timedelta(days=3)


def seed(url: str, schema: str) -> None:
    """Ten expired task keys over two runs and five map indices, three live ones, and two assets' keys (the
    assets named ``orders_*`` no longer active)."""
    backend = MetastoreBackend(make_engine(url, schema=schema))
    try:
        for i in range(10):
            run = RUN if i % 2 else OTHER_RUN
            value = {"id": f"application_1764460800123_{i:04}", "note": "réessai \u2028", "at": [i, None]}
            scope = TaskScope(DAG, run, TASK, i % 5 - 1)
            backend.set(scope, long_key(i), json.dumps(value), expires_at=EXPIRED_AT - timedelta(hours=i))
        for i in range(3):
            backend.set(TaskScope(DAG, RUN, "load"), f"live_{i}", json.dumps(i), expires_at=None)
        for name in ("orders_eu", "orders_us", "customers"):
            scope = AssetScope(name=name, uri=f"s3://warehouse/{name}")
            for k in range(2):
                backend.set(scope, f"last_processed_partition_{k}", json.dumps({"p": k}))
        with backend.engine.begin() as conn:  # the engine names the schema, quoted as it needs
            conn.execute(delete(asset_active).where(asset_active.c.name.like("orders_%")))
    finally:
        backend.engine.dispose()


@pytest.fixture(params=["postgresql", "mariadb"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[SchemaStore]:
    with schema_store(request.param) as made:
        monkeypatch.setenv(SCHEMA_ENV, made.schema)
        ok("db", "init", conn=made.url)
        seed(made.url, made.schema)
        yield made


def backed_up(store: SchemaStore, backup: Path, *args: str) -> list[str]:
    """Run a backed-up command; return the export lines from before it. Checks that the backup holds the lines
    of exactly the rows that went, and that importing it restores the store as it was."""
    before = export(store.url)
    result = run_cli(*args, "--backup", str(backup), conn=store.url)
    assert result.exit_code == 0, result.output
    after = export(store.url)
    gone = [line for line in before if line not in after]
    assert gone, "the command deleted nothing"
    assert records(lines_of(backup)) == records(gone)
    restore(store.url, backup)
    assert export(store.url) == before
    assert tables_in(store, store.default) & STATE_TABLES == set(), "nothing outside the schema"
    return before


def store_of(line: str) -> str:
    return str(json.loads(line)["store"])


@pytest.mark.parametrize("batch", ["0", "4"])
def test_clean_backup_in_a_schema(store, tmp_path, batch):
    before = backed_up(store, tmp_path / "clean.jsonl", "clean", "--batch-size", batch)
    assert len(lines_of(tmp_path / "clean.jsonl")) == 10
    assert len(before) == 19


@pytest.mark.parametrize(
    "scope",
    [
        ("--dag-id", DAG, "--run-id", RUN, "--task-id", TASK, "--all-map-indices"),
        ("--dag-id", DAG, "--run-id", RUN, "--task-id", TASK, "--map-index", "0"),
        ("--dag-id", DAG, "--run-id", RUN),
        ("--dag-id", DAG),
        ("--dag-id", DAG, "--batch-size", "0"),
        ("--dag-id", DAG, "--batch-size", "3"),
        ("--asset-name", "customers"),
    ],
    ids=["task", "map-index", "dag-run", "dag", "dag-one-statement", "dag-in-batches", "asset"],
)
def test_clear_backup_in_a_schema(store, tmp_path, scope):
    backup = tmp_path / "clear.jsonl"
    backed_up(store, backup, "clear", *scope, "--yes")
    stores = {store_of(line) for line in lines_of(backup)}
    assert stores == ({"asset"} if "--asset-name" in scope else {"task"})


@pytest.mark.parametrize("batch", ["0", "1"])
def test_sweep_backup_in_a_schema(store, tmp_path, batch):
    backup = tmp_path / "sweep.jsonl"
    backed_up(store, backup, "assets", "sweep", "--batch-size", batch, "--yes")
    assert sorted(json.loads(line)["name"] for line in lines_of(backup)) == ["orders_eu"] * 2 + ["orders_us"] * 2


@pytest.mark.slow  # on the database servers
@pytest.mark.parametrize("args", [("clean", "--batch-size", "2"), ("clean", "--batch-size", "0")], ids=" ".join)
def test_a_schema_name_that_must_be_quoted(tmp_path, monkeypatch, args):
    """A schema named with capitals and a hyphen is quoted wherever the statements name it."""
    with throwaway_database("postgresql", "ss") as url:
        admin(url, 'CREATE SCHEMA "Airflow-Meta"')
        monkeypatch.setenv(SCHEMA_ENV, "Airflow-Meta")
        ok("db", "init", conn=url)
        seed(url, "Airflow-Meta")
        made = SchemaStore("postgresql", url, "Airflow-Meta", "public")
        backed_up(made, tmp_path / "clean.jsonl", *args)
