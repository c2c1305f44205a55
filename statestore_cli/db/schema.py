"""The state store tables, as Airflow 3.3.2 defines them (its migration revision fde9ed84d07b).

Table, column, constraint and index names match Airflow's so the same rows can be read and cleaned
by either tool. ``dag_run``, ``asset`` and ``asset_active`` are the minimal parents a standalone
store needs for its foreign keys; in an Airflow database the real (wider) tables are used and only
the columns declared here are ever read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    TIMESTAMP,
    Column,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.types import TypeDecorator, TypeEngine

from statestore_cli.db.mysql_text import MYSQL_ENGINES, BytesComparator, ExactComparator

# Ids and keys are case-sensitive everywhere; MySQL needs a binary collation for that. utf8mb4 (not
# Airflow's utf8mb3) so keys outside the Basic Multilingual Plane fit; the widest index,
# (dag_run_id, task_id, map_index, key), still stays under InnoDB's 3072-byte key limit.
_MYSQL = MYSQL_ENGINES


class MySqlCollated(TypeDecorator[str]):
    """``String(length)`` (``Text`` without a length), but on MySQL and MariaDB the MySQL type
    ``mysql_type`` with this character set and collation.

    What ``with_variant`` does, except that SQLAlchemy's MySQL dialect module is imported only when a
    MySQL engine needs the type: on every other engine it would only slow down each command's start.
    ``==`` on such a column is exact on every engine, trailing spaces included (``mysql_text``).
    """

    impl: TypeEngine[Any] | type[TypeEngine[Any]] = String
    cache_ok = True
    comparator_factory = ExactComparator

    def __init__(self, length: int | None, mysql_type: str, charset: str, collation: str) -> None:
        super().__init__()
        self.impl = String(length) if length is not None else Text()
        self.length, self.mysql_type, self.charset, self.collation = length, mysql_type, charset, collation

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name not in _MYSQL:
            return self.impl_instance
        from sqlalchemy.dialects import mysql

        sized = () if self.length is None else (self.length,)
        mysql_type = getattr(mysql, self.mysql_type)(*sized, charset=self.charset, collation=self.collation)
        return dialect.type_descriptor(mysql_type)


def _id(length: int) -> Any:
    return MySqlCollated(length, "VARCHAR", "utf8mb4", "utf8mb4_bin")


class _RunKey(MySqlCollated):
    """The dag-run store's key: compared byte for byte on MySQL/MariaDB, since Airflow 3.4 creates the
    column without a collation of its own (``mysql_text.BytesComparator``)."""

    cache_ok = True
    comparator_factory = BytesComparator


def _run_key() -> Any:
    return _RunKey(512, "VARCHAR", "utf8mb4", "utf8mb4_bin")


def _asset_text() -> Any:
    # As Airflow on MySQL: single-byte case-sensitive text, so the unique (name, uri) index fits.
    return MySqlCollated(1500, "VARCHAR", "latin1", "latin1_general_cs")


def _value_text() -> Any:
    return MySqlCollated(None, "MEDIUMTEXT", "utf8mb4", "utf8mb4_bin")


class UtcTimestamp(TypeDecorator[datetime]):
    """A UTC instant: ``timestamp with time zone`` on PostgreSQL, naive UTC elsewhere.

    On SQLite the value is stored as text ``YYYY-MM-DD HH:MM:SS.ffffff`` (SQLAlchemy's SQLite
    format, the one Airflow writes), so comparisons as text are comparisons in time.
    """

    impl = TIMESTAMP(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in _MYSQL:
            from sqlalchemy.dialects import mysql

            return dialect.type_descriptor(mysql.TIMESTAMP(fsp=6))  # naive UTC: sessions run at +00:00
        return self.impl_instance

    def bind_processor(self, dialect: Dialect) -> Any:
        from statestore_cli.db.engines import impl_of

        return impl_of(dialect.name).instant_processor() or super().bind_processor(dialect)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: state store timestamps must be timezone-aware")
        value = value.astimezone(UTC)
        if dialect.name != "postgresql":
            value = value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        moment: datetime = value
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


metadata = MetaData()

dag_run = Table(
    "dag_run",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("dag_id", _id(250), nullable=False),
    Column("run_id", _id(250), nullable=False),
    UniqueConstraint("dag_id", "run_id", name="dag_run_dag_id_run_id_key"),
)
dag_run.primary_key.name = "dag_run_pkey"

asset = Table(
    "asset",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", _asset_text(), nullable=False),
    Column("uri", _asset_text(), nullable=False),
    Index("idx_asset_name_uri_unique", "name", "uri", unique=True),
)


@event.listens_for(asset, "before_create")
def _sqlite_autoincrement(table: Table, connection: Connection, **_: Any) -> None:
    """SQLite's ``AUTOINCREMENT`` on ``asset.id``, as Airflow creates it (ids never reused), set as the table
    is created: given to ``Table`` as ``sqlite_autoincrement=True``, the option made SQLAlchemy import its
    SQLite dialect when this module was imported, on every engine."""
    if connection.dialect.name == "sqlite":
        table.dialect_options["sqlite"]["autoincrement"] = True


asset_active = Table(
    "asset_active",
    metadata,
    Column("name", _asset_text(), nullable=False),
    Column("uri", _asset_text(), nullable=False),
    PrimaryKeyConstraint("name", "uri", name="asset_active_pkey"),
    ForeignKeyConstraint(
        ["name", "uri"], ["asset.name", "asset.uri"], name="asset_active_asset_name_uri_fkey", ondelete="CASCADE"
    ),
    # Airflow's rule: an active asset is unique by name and by uri on its own.
    Index("idx_asset_active_name_unique", "name", unique=True),
    Index("idx_asset_active_uri_unique", "uri", unique=True),
)

# Airflow 3.4 renames the map index column and adds a region to the task table's identity; the
# column's key stays "map_index" in every layout, so statements read `table.c.map_index` whatever the
# database calls it (results are labelled by the database's name: select it `.label("map_index")`).
MAP_INDEX_COLUMNS = ("map_index", "region_index")


def task_table(target: MetaData, *, index_column: str = "map_index", region: TypeEngine[Any] | None = None) -> Table:
    """``task_state_store`` as a layout has it: Airflow 3.3's by default; ``index_column`` is the
    database's name of the map index, ``region`` the type of its ``region_id`` (None: no such column)."""
    index = Column(index_column, Integer, key="map_index", nullable=False, server_default="-1")
    identity: tuple[str, ...] = ("dag_run_id", "task_id", "map_index", "key")
    columns: list[Any] = []
    if region is not None:
        columns.append(Column("region_id", region, nullable=False))
        identity = ("dag_run_id", "task_id", "region_id", "map_index", "key")
    table = Table(
        "task_state_store",
        target,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column(
            "dag_run_id",
            Integer,
            ForeignKey("dag_run.id", name="task_state_store_dag_run_fkey", ondelete="CASCADE"),
            nullable=False,
        ),
        Column("task_id", _id(250), nullable=False),
        index,
        *columns,
        Column("key", _id(512), nullable=False),
        Column("dag_id", _id(250), nullable=False),
        Column("run_id", _id(250), nullable=False),
        Column("value", _value_text(), nullable=False),
        Column("updated_at", UtcTimestamp(), nullable=False),
        Column("expires_at", UtcTimestamp(), nullable=True),
        UniqueConstraint(*identity, name="task_state_store_uq"),  # names are column keys
        Index("idx_task_state_store_lookup", "dag_id", "run_id", "task_id", "map_index"),
        Index("idx_task_state_store_expires_at", "expires_at"),
    )
    table.primary_key.name = "task_state_store_pkey"
    return table


def dag_run_state_table(target: MetaData) -> Table:
    """Airflow 3.4's ``dag_run_state_store``: keys of one dag run, expiring like task keys."""
    table = Table(
        "dag_run_state_store",
        target,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column(
            "dag_run_id",
            Integer,
            ForeignKey("dag_run.id", name="dag_run_state_store_dag_run_fkey", ondelete="CASCADE"),
            nullable=False,
        ),
        Column("key", _run_key(), nullable=False),
        Column("dag_id", _id(250), nullable=False),
        Column("run_id", _id(250), nullable=False),
        Column("value", _value_text(), nullable=False),
        Column("updated_at", UtcTimestamp(), nullable=False),
        Column("expires_at", UtcTimestamp(), nullable=True),
        UniqueConstraint("dag_run_id", "key", name="dag_run_state_store_uq"),
        Index("idx_dag_run_state_store_lookup", "dag_id", "run_id"),
        Index("idx_dag_run_state_store_expires_at", "expires_at"),
    )
    table.primary_key.name = "dag_run_state_store_pkey"
    return table


task_state_store = task_table(metadata)

asset_state_store = Table(
    "asset_state_store",
    metadata,
    Column(
        "asset_id",
        Integer,
        ForeignKey("asset.id", name="asset_state_store_asset_fkey", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("key", _id(512), nullable=False),
    Column("value", _value_text(), nullable=False),
    Column("updated_at", UtcTimestamp(), nullable=False),
    Column("last_updated_by_kind", String(16)),
    Column("last_updated_by_dag_id", _id(250)),
    Column("last_updated_by_run_id", _id(250)),
    Column("last_updated_by_task_id", _id(250)),
    Column("last_updated_by_map_index", Integer),
    PrimaryKeyConstraint("asset_id", "key", name="asset_state_store_pkey"),
)

# Every column of the asset store, in the table's order; who last wrote a key is in its last_updated_by_*
# columns, named for the fields they hold (kind, dag_id, run_id, task_id, map_index), which the export's
# `updated_by` object has too. Statements and rows are built from these, never from a list of their own.
ASSET_STATE_COLUMNS = tuple(column.name for column in asset_state_store.columns)
_WRITER_PREFIX = "last_updated_by_"
ASSET_WRITER_COLUMNS = tuple(name for name in ASSET_STATE_COLUMNS if name.startswith(_WRITER_PREFIX))
ASSET_WRITER_FIELDS = tuple(name.removeprefix(_WRITER_PREFIX) for name in ASSET_WRITER_COLUMNS)


def writer_columns(**fields: object) -> dict[str, object]:
    """The ``last_updated_by_*`` values of an asset key's row: each field of ``ASSET_WRITER_FIELDS``
    given (``kind="api"``), the others None."""
    unknown = set(fields) - set(ASSET_WRITER_FIELDS)
    if unknown:
        raise ValueError(f"not a writer field of asset_state_store: {', '.join(sorted(unknown))}")
    return {_WRITER_PREFIX + name: fields.get(name) for name in ASSET_WRITER_FIELDS}


STATE_TABLES = (task_state_store.name, asset_state_store.name)
PARENT_TABLES = (dag_run.name, asset.name, asset_active.name)


# -- the schema the tables are in ([database] sql_alchemy_schema) ------------------------------------------
# The tables above name no schema: an engine made with one maps "no schema" to it for every statement
# built from them (SQLAlchemy's schema_translate_map, see database.open_database). Raw SQL and reflection
# are not translated: they ask ``store_schema`` and qualify names with ``qualified``. A SET search_path
# would do it for every statement, but it is session state, which a PgBouncer in transaction mode loses.
def store_schema(bind: Connection | Engine) -> str | None:
    """The schema the state store tables are in; None for the connection's default."""
    translate = bind.get_execution_options().get("schema_translate_map") or {}
    schema: str | None = translate.get(None)
    return schema


def qualified(bind: Connection | Engine, name: str) -> str:
    """``name`` of one of the tables above, qualified with the store's schema, for raw SQL."""
    schema = store_schema(bind)
    if schema is None:
        return name
    return f"{bind.dialect.identifier_preparer.quote_schema(schema)}.{name}"
