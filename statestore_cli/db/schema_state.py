"""What state store schema a database holds (standalone store, Airflow's own database, or empty),
and creating the missing tables of a standalone store."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Engine

from statestore_cli.db.database import describe_engine, translate_errors
from statestore_cli.db.schema import PARENT_TABLES, STATE_TABLES, metadata, qualified, store_schema
from statestore_cli.errors import DatabaseError


class SchemaState(NamedTuple):
    """What the database holds: the mode (Airflow's own database, or a standalone store) and tables."""

    mode: str  # "airflow" | "standalone" | "empty"
    present: tuple[str, ...]
    missing: tuple[str, ...]
    alembic_revision: str | None

    @property
    def usable(self) -> bool:
        return not self.missing


def alembic_version_table(connection: Connection) -> str | None:
    """Where Airflow's ``alembic_version`` is, as raw SQL names it; None: not an Airflow database.

    With ``[database] sql_alchemy_schema`` set, ``airflow db migrate`` puts its tables in that schema but
    leaves ``alembic_version`` where an unqualified name lands (``public``, by the default search path):
    the schema is looked in first, then the connection's default schema."""
    schema = store_schema(connection)
    if schema is not None and connection.dialect.has_table(connection, "alembic_version", schema=schema):
        return qualified(connection, "alembic_version")
    if connection.dialect.has_table(connection, "alembic_version"):
        return "alembic_version"
    return None


def inspect_schema(connection: Connection) -> SchemaState:
    inspector = inspect(connection)
    tables = set(inspector.get_table_names(schema=store_schema(connection)))
    revision = None
    version_table = alembic_version_table(connection)
    if version_table is not None:
        revision = connection.exec_driver_sql(f"SELECT version_num FROM {version_table}").scalar()
        mode = "airflow"
    elif tables & set(STATE_TABLES + PARENT_TABLES):
        mode = "standalone"
    else:
        mode = "empty"
    wanted = STATE_TABLES + PARENT_TABLES
    present = tuple(t for t in wanted if t in tables)
    missing = tuple(t for t in wanted if t not in tables)
    return SchemaState(mode=mode, present=present, missing=missing, alembic_revision=revision)


def init_schema(engine: Engine) -> tuple[SchemaState, tuple[str, ...]]:
    """Create the missing tables of a standalone store; idempotent. Returns the state and what was created."""
    with translate_errors(engine), engine.begin() as connection:
        schema = store_schema(connection)
        if schema is not None and not inspect(connection).has_schema(schema):
            raise DatabaseError(
                f"{describe_engine(engine)} has no schema {schema!r} ([database] sql_alchemy_schema): create it "
                "first (CREATE SCHEMA), or fix the option"
            )
        before = inspect_schema(connection)
        if before.mode == "airflow" and before.missing:
            raise DatabaseError(
                f"{describe_engine(engine)} is an Airflow metadata database (revision "
                f"{before.alembic_revision}) without the state store tables; upgrade it to Airflow 3.3 "
                "with `airflow db migrate` instead of creating them here"
            )
        metadata.create_all(connection, checkfirst=True)
        after = inspect_schema(connection)
    return after, tuple(t for t in before.missing if t in after.present)
