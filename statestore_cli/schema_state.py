"""What state store schema a database holds (standalone store, Airflow's own database, or empty),
and creating the missing tables of a standalone store."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Engine

from statestore_cli.database import describe_engine, translate_errors
from statestore_cli.errors import DatabaseError
from statestore_cli.schema import PARENT_TABLES, STATE_TABLES, metadata


class SchemaState(NamedTuple):
    """What the database holds: the mode (Airflow's own database, or a standalone store) and tables."""

    mode: str  # "airflow" | "standalone" | "empty"
    present: tuple[str, ...]
    missing: tuple[str, ...]
    alembic_revision: str | None

    @property
    def usable(self) -> bool:
        return not self.missing


def inspect_schema(connection: Connection) -> SchemaState:
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    revision = None
    if "alembic_version" in tables:
        revision = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
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
