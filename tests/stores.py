"""Stores for a test: an empty database of its own on any engine, PostgreSQL stores with the schema made and
reused by the worker's next test; and raw SQL on a store."""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from servers import database_name, engine_of, kept_engine, mark_database, require_server, server_statements
from sqlalchemy import Connection, make_url, text

from statestore_cli.backends.store import Store


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


def pg_shape(schema: str, conn: Connection | None = None) -> list[tuple]:
    """What is in the PostgreSQL schema ``schema`` besides rows (of the database ``conn`` is in; by default
    this worker's): its tables, columns, indexes, constraints..."""
    if conn is None:
        with kept_engine(require_server("postgresql")).connect() as own:
            return pg_shape(schema, own)
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
        db_init(
            Store.open(
                load_settings(conn_override=url, environ={"AIRFLOW_HOME": tempfile.gettempdir()}), create_file=True
            )
        )
        shape = pg_shape(label)
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


# MariaDB stores db_url hands out, kept for the worker's next test as the PostgreSQL ones are: a database with
# its tables made by db init and dropped again cost each test several times what emptying it does.
_idle_mariadb_stores: list[tuple[str, str, list[tuple]]] = []  # (database, url, what db init made)
_MARIADB_SHAPE = """
SELECT 'database', schema_name, default_character_set_name, default_collation_name
  FROM information_schema.schemata WHERE schema_name = :s
UNION ALL SELECT 'table', table_name, table_type,
       concat_ws('/', engine, row_format, table_collation, create_options, table_comment)
  FROM information_schema.tables WHERE table_schema = :s
UNION ALL SELECT 'column', table_name, column_name,
       concat_ws('/', column_type, is_nullable, column_default, extra, collation_name, ordinal_position)
  FROM information_schema.columns WHERE table_schema = :s
UNION ALL SELECT 'index', table_name, index_name,
       concat_ws('/', non_unique, seq_in_index, column_name, sub_part, index_type)
  FROM information_schema.statistics WHERE table_schema = :s
UNION ALL SELECT 'constraint', table_name, constraint_name, constraint_type
  FROM information_schema.table_constraints WHERE constraint_schema = :s
UNION ALL SELECT 'check', table_name, constraint_name, check_clause
  FROM information_schema.check_constraints WHERE constraint_schema = :s
UNION ALL SELECT 'reference', table_name, constraint_name,
       concat_ws('/', referenced_table_name, update_rule, delete_rule)
  FROM information_schema.referential_constraints WHERE constraint_schema = :s
UNION ALL SELECT 'trigger', event_object_table, trigger_name, action_statement
  FROM information_schema.triggers WHERE trigger_schema = :s
UNION ALL SELECT 'routine', routine_name, routine_type, '' FROM information_schema.routines WHERE routine_schema = :s
UNION ALL SELECT 'event', event_name, '', '' FROM information_schema.events WHERE event_schema = :s
ORDER BY 1, 2, 3, 4
"""


@contextmanager
def mariadb_store() -> Iterator[str]:
    """The URL of a MariaDB store with the schema made, a database of its own on the server, as
    ``isolated_database`` and ``db init`` make it, with nothing configured. Afterwards it is emptied (its rows
    deleted, a table whose counter moved truncated: counters from 1 again) and kept for the worker's next test,
    unless the test changed what is in it (the database's character set, a table, column, index, constraint,
    trigger, routine or event added, changed or dropped), or a session is still in it, or it cannot be emptied
    at once: then it is dropped."""
    worker_url = require_server("mariadb")
    if _idle_mariadb_stores:
        label, url, shape = _idle_mariadb_stores.pop()
    else:
        from statestore_cli.config import load_settings
        from statestore_cli.ops.commands import db_init

        label = database_name("ss")
        mark_database("mariadb", label)  # a database of the server's, not the worker's: dropped when the run ends
        server_statements(worker_url, f"CREATE DATABASE {label}")
        url = make_url(worker_url).set(database=label).render_as_string(hide_password=False)
        db_init(
            Store.open(
                load_settings(conn_override=url, environ={"AIRFLOW_HOME": tempfile.gettempdir()}), create_file=True
            )
        )
        shape = mariadb_shape(label)
    try:
        yield url
    finally:
        if _empty_mariadb_store(label, shape):
            _idle_mariadb_stores.append((label, url, shape))
        else:
            server_statements(worker_url, f"DROP DATABASE {label}")


def mariadb_shape(database: str, conn: Connection | None = None) -> list[tuple]:
    """What is in the MariaDB database ``database`` besides rows: its tables, columns, indexes, constraints..."""
    if conn is None:
        with kept_engine(require_server("mariadb")).connect() as own:
            return mariadb_shape(database, own)
    return [tuple(row) for row in conn.execute(text(_MARIADB_SHAPE), {"s": database})]


def sessions_left(conn: Connection, database: str) -> bool:
    """Whether a session other than ``conn`` is still in ``database`` once the test's garbage is collected: the
    command run in-process leaves its pooled connections to the collector, and a session left in the store would
    meet the next test (a test that kills "the command's session" finds it by the database's name; a lock it
    holds, GET_LOCK of clean --exclusive, is the session's). A new store would not see it: the store is dropped."""
    if conn.dialect.name == "postgresql":
        others = "SELECT count(*) FROM pg_stat_activity WHERE datname = :s AND pid <> pg_backend_pid()"
    else:
        others = "SELECT count(*) FROM information_schema.processlist WHERE db = :s AND id <> CONNECTION_ID()"
    if not conn.execute(text(others), {"s": database}).scalar():
        return False
    gc.collect()
    deadline = time.monotonic() + 0.5  # the server ends a session when it reads the client's COM_QUIT
    while conn.execute(text(others), {"s": database}).scalar():
        if time.monotonic() > deadline:
            return True
        time.sleep(0.01)
    return False


def _empty_mariadb_store(database: str, shape: list[tuple]) -> bool:
    """Empty the store in ``database`` if it is as db init made it; whether it was."""
    tables = sorted({row[1] for row in shape if row[0] == "table"})
    try:
        with kept_engine(require_server("mariadb")).connect() as conn:
            if mariadb_shape(database, conn) != shape:
                return False
            if sessions_left(conn, database):
                return False
            conn.exec_driver_sql("SET SESSION lock_wait_timeout = 5, innodb_lock_wait_timeout = 5")
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")  # any order: each table is emptied
            try:
                # A table whose counter moved is truncated (a new, empty table, its counter at 1), a costly
                # statement on MariaDB; the others only lose their rows.
                counted = (
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = :s AND auto_increment > 1"
                )
                moved = {row[0] for row in conn.execute(text(counted), {"s": database})}
                for table in tables:
                    verb = "TRUNCATE TABLE" if table in moved else "DELETE FROM"
                    conn.exec_driver_sql(f"{verb} {database}.{table}")
            finally:
                conn.exec_driver_sql(
                    "SET SESSION foreign_key_checks = 1, lock_wait_timeout = DEFAULT, "
                    "innodb_lock_wait_timeout = DEFAULT"
                )
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


def sql_each(url: str, statement: str, rows: list[dict[str, object]]) -> None:
    """Run one SQL statement (written as ``sql`` takes it) once for each of ``rows`` (its parameters), all in
    one transaction on one connection: a seeding loop's rows, without a server session started for each."""
    engine = engine_of(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(quote_key(statement, engine.dialect.name)), rows)
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
