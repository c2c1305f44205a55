"""Which state store layout a database holds, and the tables every statement is built from.

Airflow changes the state store tables between releases, so the library never assumes them: it
reads the layout from the database once per engine (its ``Database``) and builds its statements from the ``Layout``'s
tables. Three layouts are known:

- ``3.3``: Airflow 3.3's (migration ``fde9ed84d07b``), and every standalone store ``db init`` makes;
- ``3.4-between``: after ``54a27b6f9d01`` ("dynamic region storage"): ``task_state_store.region_id``
  joins the unique key ``(dag_run_id, task_id, region_id, map_index, key)``;
- ``3.4``: after ``7f8c9a2d410e`` as well: ``map_index`` is called ``region_index`` (rows, keys and
  indexes unchanged), and ``dag_run_state_store`` holds dag-run keys (``8a1d6c4f0b53``).

A database at a revision of Airflow 3.3 or older (or with no ``alembic_version``: a standalone store)
has the ``3.3`` layout without a look at its tables. Any other revision is read from the tables
themselves: the map index column's name, ``region_id`` and how it is stored, the unique key, and
whether ``dag_run_state_store`` exists. What a layout lacks is in ``problems``, each tagged with what it
blocks: ``read`` (every command on task keys) or ``write`` (the commands that write task keys); a command
asks ``layout_of(conn, needs=...)`` and gets a one-line error naming the revision and what is missing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import pairwise
from typing import Any

from sqlalchemy import (
    Column,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    exists,
    literal_column,
    or_,
    select,
    tuple_,
)
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ColumnElement, FromClause, Select
from sqlalchemy.types import TypeDecorator, TypeEngine

from statestore_cli.db import schema
from statestore_cli.db.airflow_versions import airflow_version
from statestore_cli.db.engines import impl_of
from statestore_cli.db.schema import store_schema

LAYOUT_33, LAYOUT_BETWEEN, LAYOUT_34 = "3.3", "3.4-between", "3.4"

# The task instance states Airflow never leaves on its own: a task instance in any other state (running,
# up_for_retry, deferred, queued, scheduled, up_for_reschedule, restarting, or none yet, as one just cleared
# is) may still run, and find the job id its earlier try stored in its task keys.
FINISHED_STATES = ("success", "failed", "skipped", "upstream_failed", "removed")


class RegionId(TypeDecorator[uuid.UUID]):
    """A region's UUID in the form the database's ``region_id`` column stores it.

    Airflow 3.4 declares the column with its own ``CompactUUID`` type, whose storage this tool could
    not read from Airflow's sources; so the form is taken from the column the database has:
    ``native`` (PostgreSQL's ``uuid``, MariaDB's ``UUID``), ``hex`` (``CHAR(32)``: 32 lower-case hex
    digits, SQLAlchemy's ``Uuid`` on SQLite and MySQL), ``text`` (``CHAR(36)``, with dashes) or
    ``bytes`` (``BINARY(16)``). The nil UUID marks a task outside any region.
    """

    impl = String(36)
    cache_ok = True

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if self.form == "native":
            from sqlalchemy import Uuid

            return dialect.type_descriptor(Uuid(as_uuid=True, native_uuid=True))
        if self.form == "bytes":
            return dialect.type_descriptor(LargeBinary(16))
        return dialect.type_descriptor(String(32 if self.form == "hex" else 36))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        region = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
        if self.form == "native":
            return region
        if self.form == "bytes":
            return region.bytes
        return region.hex if self.form == "hex" else str(region)

    def process_result_value(self, value: Any, dialect: Dialect) -> uuid.UUID | None:
        if value is None or isinstance(value, uuid.UUID):
            return value
        if isinstance(value, bytes | bytearray | memoryview):
            return uuid.UUID(bytes=bytes(value))
        return uuid.UUID(str(value))


@dataclass(frozen=True)
class Layout:
    """The state store tables of one database, as statements address them.

    ``task.c.map_index`` is the map index column whatever the database calls it (``region_index`` on
    3.4), and ``task.c.region_id`` exists only where the database has it. ``dag_run_store`` is None
    where the database has no dag-run state store.
    """

    name: str
    revision: str | None
    task: Table
    asset: Table
    dag_run: Table
    asset_parent: Table
    asset_active: Table
    dag_run_store: Table | None = None
    task_instance: Table | None = None  # Airflow's task_instance, where the database has it (see ``unfinished``)
    problems: tuple[tuple[str, str], ...] = ()  # (what it blocks: "read" | "write", what the tables lack)
    found: dict[str, Any] = field(default_factory=dict, compare=False)  # columns and keys as read

    @property
    def has_region(self) -> bool:
        return "region_id" in self.task.c

    @property
    def task_identity(self) -> tuple[str, ...]:
        """The column keys of the task table's unique key: what an upsert conflicts on."""
        return ("dag_run_id", "task_id", *(("region_id",) if self.has_region else ()), "map_index", "key")

    @property
    def airflow_version(self) -> str | None:
        return airflow_version(self.revision)

    @property
    def revision_known(self) -> bool:
        """Whether the revision is one of Airflow's this tool knows (a standalone store has none: known)."""
        return self.revision is None or self.airflow_version is not None

    def blocked(self, needs: str) -> list[str]:
        """What keeps a command that ``needs`` "read" (or "write", which needs reading too) from working."""
        kinds = ("read",) if needs == "read" else ("read", "write")
        return [problem for kind, problem in self.problems if kind in kinds]

    def commands(self) -> dict[str, bool]:
        """Which commands can work on this layout (for ``db check``)."""
        reads, writes = not self.blocked("read"), not self.blocked("write")
        shown = dict.fromkeys(READING_COMMANDS, reads)
        shown.update(dict.fromkeys(WRITING_COMMANDS, writes))
        return shown

    def require(self, needs: str) -> None:
        """Raise a ``DatabaseError`` (exit 3) naming the revision and what is missing when ``needs`` is blocked."""
        missing = self.blocked(needs)
        if missing:
            from statestore_cli.errors import DatabaseError

            known = "" if self.revision_known else ", a revision this tool does not know"
            raise DatabaseError(
                f"cannot {'write' if needs == 'write' else 'read'} task keys on this Airflow metadata database "
                f"(revision {self.revision}{known}): {'; '.join(missing)}; `statestore db check` shows what was found"
            )

    def task_instance_of(self, table: Table, ti: FromClause | None = None) -> list[ColumnElement[bool]]:
        """The conditions that pair a row of the task table ``table`` with its task instance in ``ti`` (the
        ``task_instance`` table, or ``task_instances``): the same dag, run, task and map index
        (``region_index`` on 3.4), and region where both tables have one."""
        ti = self.task_instance if ti is None else ti
        assert ti is not None
        return [ti.c[name] == table.c[name] for name in _paired_columns(ti, table)]

    def unfinished_state(self, ti: FromClause | None = None) -> ColumnElement[bool]:
        """A task instance that may still run: its state is none of ``FINISHED_STATES`` (or not set)."""
        ti = self.task_instance if ti is None else ti
        assert ti is not None
        # The states as literals, not parameters: statements compiled once and run per batch (a backed-up
        # delete's COPY) take no expanding parameter.
        finished = [literal_column(f"'{state}'", String) for state in FINISHED_STATES]
        return or_(ti.c.state.is_(None), ti.c.state.not_in(finished))

    def task_instances(self, dialect: str) -> FromClause:
        """Where a clean looks up the task instances of the keys it may keep (rows of it that pass
        ``unfinished_state`` are the unfinished ones): as the engine reads them best
        (``EngineImpl.unfinished_instances``)."""
        ti = self.task_instance
        assert ti is not None
        return impl_of(dialect).unfinished_instances(ti, self.unfinished_ranges())

    def unfinished_ranges(self) -> ColumnElement[bool]:
        """``unfinished_state`` as the ranges between the finished states (in SQLite's binary order of text):
        SQLite answers each range from an index on ``state``, where a ``NOT IN`` reads every row."""
        ti = self.task_instance
        assert ti is not None
        finished = sorted(FINISHED_STATES)
        bound = [literal_column(f"'{state}'", String) for state in finished]
        state = ti.c.state
        gaps = [and_(state > low, state < high) for low, high in pairwise(bound)]
        return or_(state.is_(None), state < bound[0], *gaps, state > bound[-1])

    def unfinished(self, table: Table, dialect: str, per_batch: bool = True) -> ColumnElement[bool] | None:
        """Where the row of ``table`` (the task table) has a task instance that has not finished; None where
        there is nothing to ask (no ``task_instance`` table: a standalone store; or a dag-run table).
        ``per_batch``: the statement runs once per batch of a clean, not once over the whole table (see
        ``EngineImpl.keeps_by_id_list``: the engine may then ask it by id, of ``unfinished_key_ids``)."""
        if self.task_instance is None or table is not self.task:
            return None
        impl = impl_of(dialect)
        if impl.keeps_by_id_list and not per_batch:
            return table.c.id.in_(impl.kept_ids(self.unfinished_key_ids(table, dialect)))
        ti = self.task_instances(dialect)
        return exists().where(*self.task_instance_of(table, ti), self.unfinished_state(ti))

    def unfinished_key_ids(self, table: Table, dialect: str) -> Select[Any]:
        """The ids of the task keys whose task instance has not finished, found from the task instances'
        side: the few unfinished ones, then each one's keys through the task table's index on (dag, run,
        task, map index). A row-value ``IN`` and not a join, so that SQLite takes that order even on a
        database it has no statistics for."""
        ti = self.task_instances(dialect)
        pairs = _paired_columns(ti, table)
        keys = table.alias("unfinished_key")
        instances = select(*(ti.c[name] for name in pairs)).where(self.unfinished_state(ti))
        return select(keys.c.id).where(tuple_(*(keys.c[name] for name in pairs)).in_(instances))

    def unfinished_sql(self, conn: Connection, table: Table, outer: str) -> str | None:
        """``unfinished(table)`` as raw SQL, for a statement SQLAlchemy cannot build (MySQL's multi-table
        ``DELETE`` with an index hint), the task table named ``outer`` in it; None as ``unfinished``."""
        ti = self.task_instance
        if ti is None or table is not self.task:
            return None
        quote = conn.dialect.identifier_preparer
        from statestore_cli.db.schema import qualified

        name = qualified(conn, ti.name)
        pairs = _paired_columns(ti, table)
        on = " AND ".join(f"{name}.{quote.quote(ti.c[c].name)} = {outer}.{quote.quote(table.c[c].name)}" for c in pairs)
        state = f"{name}.{quote.quote(ti.c.state.name)}"
        finished = ", ".join(f"'{s}'" for s in FINISHED_STATES)
        return f"EXISTS (SELECT 1 FROM {name} WHERE {on} AND ({state} IS NULL OR {state} NOT IN ({finished})))"

    def region_where(self, region: uuid.UUID) -> list[Any]:
        """The condition on ``region_id`` that keeps a region's keys apart (none where there is no column)."""
        return [self.task.c.region_id == region] if self.has_region else []

    def region_values(self, region: uuid.UUID) -> dict[str, Any]:
        """``region_id`` of a row to write (nothing where there is no column)."""
        return {"region_id": region} if self.has_region else {}


def _paired_columns(ti: FromClause, table: FromClause) -> list[str]:
    """The column keys a task key is paired with its task instance by: dag, run, task and map index
    (``region_index`` on 3.4), and region where both tables have one."""
    names = ("dag_id", "run_id", "task_id", "map_index", "region_id")
    return [name for name in names if name in ti.c and name in table.c]


# The commands each kind of access serves, as `db check` lists them.
READING_COMMANDS = ("get", "list", "stats", "export", "clean", "delete", "clear")
WRITING_COMMANDS = ("set", "import")


def _build(
    name: str,
    revision: str | None,
    *,
    index_column: str = "map_index",
    region_form: str | None = None,
    dag_run_store: bool = False,
    task_instance: tuple[str, bool] | None = None,
    problems: tuple[tuple[str, str], ...] = (),
    found: dict[str, Any] | None = None,
) -> Layout:
    tables = _tables(index_column, region_form, dag_run_store, task_instance)
    return Layout(name, revision, *tables, problems=problems, found=found or {})


@cache
def _tables(
    index_column: str, region_form: str | None, dag_run_store: bool, task_instance: tuple[str, bool] | None
) -> tuple[Table, Table, Table, Table, Table, Table | None, Table | None]:
    """A layout's tables, in ``Layout``'s order: made once per process for each shape of the tables (they are
    never changed, as ``AIRFLOW_33``'s are shared by every standalone store), not again for each engine."""
    target = MetaData()
    parents = [t.to_metadata(target) for t in (schema.dag_run, schema.asset, schema.asset_active)]
    region = RegionId(region_form) if region_form else None
    task = schema.task_table(target, index_column=index_column, region=region)
    asset = schema.asset_state_store.to_metadata(target)
    runs = schema.dag_run_state_table(target) if dag_run_store else None
    dag_run, asset_parent, asset_active = parents
    ti = None if task_instance is None else _task_instance_table(target, *task_instance, region)
    return task, asset, dag_run, asset_parent, asset_active, runs, ti


def _task_instance_table(target: MetaData, index_column: str, region: bool, region_type: Any) -> Table:
    """The columns of Airflow's ``task_instance`` a clean reads: which task instance a task key belongs to
    (keyed as the task table's columns are), and its state."""
    columns: list[Column[Any]] = [
        Column("dag_id", String(250)),
        Column("run_id", String(250)),
        Column("task_id", String(250)),
        Column(index_column, Integer, key="map_index"),
        *([Column("region_id", region_type or String(36))] if region else []),
        Column("state", String(20)),
    ]
    return Table("task_instance", target, *columns)


# Airflow 3.3's layout, and every standalone store's: the module-level tables of ``schema``.
AIRFLOW_33 = Layout(
    LAYOUT_33,
    None,
    schema.task_state_store,
    schema.asset_state_store,
    schema.dag_run,
    schema.asset,
    schema.asset_active,
)


def layout_of(conn: Connection, needs: str | None = "read") -> Layout:
    """The layout of the database behind ``conn``, read once per engine (its ``Database``); a layout that
    lacks what ``needs`` ("read", "write"; None: nothing) raises a ``DatabaseError`` saying what is missing."""
    from statestore_cli.db.database import Database

    # The engine's, not the connection's options: a connection opened before an engine made elsewhere got
    # its Database does not hold it.
    database = Database.of(conn) or Database.kept_for(conn.engine)
    known = database.layout
    if not isinstance(known, Layout):
        known = database.layout = read_layout(conn)
    if needs is not None and known.problems:
        known.require(needs)
    return known


def read_layout(conn: Connection) -> Layout:
    """Tell the layout from the database: its Airflow revision where that settles it, else its tables."""
    from statestore_cli.db.schema_state import alembic_version_table

    version_table = alembic_version_table(conn)
    if version_table is None:
        return AIRFLOW_33  # a standalone store: what `db init` makes
    revision = conn.exec_driver_sql(f"SELECT version_num FROM {version_table}").scalar()
    if revision is None or _at_most_33(revision):
        layout = AIRFLOW_33 if revision is None else _with_revision(AIRFLOW_33, revision)
        task_instance = _task_instance_columns(conn)
        if task_instance is None:
            return layout
        return replace(layout, task_instance=_task_instance_tables(*task_instance))
    return _read_tables(conn, str(revision))


@cache
def _task_instance_tables(index_column: str, region: bool) -> Table:
    """The ``task_instance`` beside the 3.3 layout's tables, made once per process for each shape."""
    return _task_instance_table(MetaData(), index_column, region, None)


def _task_instance_columns(conn: Connection) -> tuple[str, bool] | None:
    """How Airflow's ``task_instance`` names its map index, and whether it has ``region_id``; None where the
    database has no such table, or one without the columns that pair it with a task key."""
    return _pairing(impl_of(conn).table_columns(conn, store_schema(conn), "task_instance"))


def _pairing(columns: frozenset[str] | None) -> tuple[str, bool] | None:
    """``_task_instance_columns`` of the columns ``task_instance`` has (None: no such table)."""
    if columns is None:
        return None
    index_column = next((n for n in schema.MAP_INDEX_COLUMNS if n in columns), None)
    if index_column is None or not {"dag_id", "run_id", "task_id", "state"} <= columns:
        return None
    return index_column, "region_id" in columns


def _at_most_33(revision: str | None) -> bool:
    """Whether ``revision`` is one of Airflow's up to 3.3.2 (an empty alembic_version counts: a dump)."""
    if revision is None:
        return True
    version = airflow_version(revision)
    return version is not None and tuple(int(p) for p in version.split(".")) < (3, 4)


def _with_revision(layout: Layout, revision: str) -> Layout:
    return replace(layout, revision=revision)


def _read_tables(conn: Connection, revision: str) -> Layout:
    read = impl_of(conn).store_tables(conn, store_schema(conn))
    tables, columns, uniques = read.tables, read.task_columns, list(read.unique_keys)
    if "task_state_store" not in tables:
        return _with_revision(AIRFLOW_33, revision)  # nothing to read: the missing tables are reported as today
    found: dict[str, Any] = {"columns": sorted(columns), "unique_keys": sorted(set(uniques))}
    problems: list[tuple[str, str]] = []
    found_index = next((n for n in schema.MAP_INDEX_COLUMNS if n in columns), None)
    if found_index is None:
        problems.append(("read", "task_state_store has neither map_index nor region_index"))
    index_column = found_index or "map_index"
    region_form = _region_form(read.region_type) if "region_id" in columns else None
    if "region_id" in columns and region_form is None:
        stored_as = read.region_type
        problems.append(("read", f"task_state_store.region_id is stored as {stored_as}, a form not known"))
        region_form = "text"
    wanted = ("dag_run_id", "task_id", *(("region_id",) if region_form else ()), index_column, "key")
    if wanted not in uniques:
        shown = ", ".join(wanted)
        problems.append(("write", f"task_state_store has no unique key ({shown}) for writes to land on"))
    missing = [
        c
        for c in ("id", "dag_run_id", "task_id", "key", "dag_id", "run_id", "value", "updated_at", "expires_at")
        if c not in columns
    ]
    if missing:
        problems.append(("read", f"task_state_store lacks the column(s) {', '.join(missing)}"))
    runs = "dag_run_state_store" in tables
    task_instance = _pairing(read.task_instance)
    if task_instance is not None and region_form is None:
        task_instance = (task_instance[0], False)  # a region joins the pair only where both tables have one
    if index_column == "region_index":
        name = LAYOUT_34
    elif region_form:
        name = LAYOUT_BETWEEN
    else:
        name = LAYOUT_33
    return _build(
        name,
        revision,
        index_column=index_column,
        region_form=region_form,
        dag_run_store=runs,
        task_instance=task_instance,
        problems=tuple(problems),
        found=found,
    )


def _region_form(column_type: Any) -> str | None:
    """How a reflected ``region_id`` column stores a UUID (see ``RegionId``), or None when not known."""
    from sqlalchemy import types

    if isinstance(column_type, types.Uuid) or "UUID" in type(column_type).__name__.upper():
        return "native"
    if isinstance(column_type, types._Binary):
        return "bytes" if getattr(column_type, "length", None) in (None, 16) else None
    if isinstance(column_type, types.String):
        return {32: "hex", 36: "text"}.get(column_type.length or 0)
    return None
