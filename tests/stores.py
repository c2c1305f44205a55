"""Stores for a test: an empty database of its own on any engine, PostgreSQL stores with the schema made and
reused by the worker's next test; and raw SQL on a store."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from servers import database_name, engine_of, kept_engine, require_server, server_statements
from sqlalchemy import make_url, text


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
