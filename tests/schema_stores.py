"""Stores in a named schema (``[database] sql_alchemy_schema``) on the servers: a database of its own with the
schema beside its default one, so that what lands outside the schema is seen."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from servers import server_statements as admin
from servers import throwaway_database
from sqlalchemy import make_url
from stores import sql

SCHEMA_ENV = "AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA"


STATE_TABLES = {"asset", "asset_active", "asset_state_store", "dag_run", "task_state_store"}


class SchemaStore(NamedTuple):
    engine: str
    url: str  # names the database only
    schema: str
    default: str  # the schema an unqualified name lands in (public; the URL's database on MariaDB)


@contextmanager
def schema_store(name: str) -> Iterator[SchemaStore]:
    if name == "postgresql":
        with throwaway_database(name, "ss") as url:
            admin(url, "CREATE SCHEMA airflow_meta")
            yield SchemaStore(name, url, "airflow_meta", "public")
        return
    with throwaway_database(name, "ss") as url, throwaway_database(name, "ss_meta") as meta:
        schema, default = make_url(meta).database, make_url(url).database
        assert schema and default
        yield SchemaStore(name, url, schema, default)


def tables_in(store: SchemaStore, schema: str) -> set[str]:
    rows = sql(
        store.url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = :schema",
        schema=schema,
    )
    return {row[0].lower() for row in rows}
