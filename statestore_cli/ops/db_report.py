"""``db init`` and ``db check``: the schema made or inspected, reported as a ``DbReport``."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from statestore_cli.errors import DatabaseError, SchemaMissingError, StateStoreError
from statestore_cli.model.retention import utcnow

# The database's modules (and SQLAlchemy) are imported by the functions that connect: the operations' names
# (``ops.commands``) are imported by every command, through the REST API too, where no database is opened.
if TYPE_CHECKING:
    from statestore_cli.backends.metastore import MetastoreBackend
    from statestore_cli.backends.store import Store
    from statestore_cli.db.database import StoreOrigin
    from statestore_cli.db.layout import Layout
    from statestore_cli.db.schema_state import SchemaState


class StoreSizes(NamedTuple):
    """How many rows each store holds, and how many task rows a clean at ``now`` would delete."""

    task_keys: int
    task_keys_expired: int
    asset_keys: int
    now: datetime


class DbReport(NamedTuple):
    database: str
    engine: str
    schema: SchemaState
    backend: str
    created: tuple[str, ...] = ()
    error: str | None = None
    airflow_version: str | None = None  # an Airflow database: the release its alembic revision belongs to
    counts: StoreSizes | None = None  # an Airflow database with the state store: its rows
    layout: Layout | None = None  # an Airflow database with the state store: the layout of its tables
    origin: StoreOrigin | None = None  # why the URL is this one, for the message of a store not there
    created_file: str | None = None  # db init on SQLite: the file it created (None: the file was there)

    @property
    def usable(self) -> bool:
        return self.error is None and self.schema.usable and not (self.layout is not None and self.layout.problems)

    def problem(self) -> StateStoreError | None:
        """Why the store is not usable, as the error to raise; None when it is usable."""
        if self.error is not None:
            return DatabaseError(self.error)
        if self.layout is not None and self.layout.problems:
            try:
                self.layout.require("write")
            except DatabaseError as exc:
                return exc
        if not self.schema.usable and self.schema.mode == "airflow":
            from statestore_cli.db.airflow_versions import STATE_STORE_SINCE

            release = f" {self.airflow_version}" if self.airflow_version else ""
            return SchemaMissingError(
                f"this is an Airflow{release} metadata database (revision {self.schema.alembic_revision}) without the "
                f"state store, which needs Airflow {STATE_STORE_SINCE} or later: upgrade Airflow and run "
                "`airflow db migrate`"
            )
        if not self.schema.usable:
            from statestore_cli.db.database import missing_store_guide

            return SchemaMissingError(
                f"the state store is not usable: missing tables {', '.join(self.schema.missing)}"
                f"{missing_store_guide(self.origin, 'them')}"
            )
        return None


def db_init(store: Store) -> DbReport:
    """Create the schema; on SQLite, the file too when it is not there (``created_file`` says which) and
    ``store`` was opened with ``create_file``."""
    from statestore_cli.db.database import describe_engine, parse_url
    from statestore_cli.db.engines import impl_of
    from statestore_cli.db.schema_state import init_schema

    settings = store.settings
    url = parse_url(settings.sql_alchemy_conn)
    path = impl_of(url).database_file(url)
    new_file = path is not None and not path.exists()
    engine = store.engine
    state, created = init_schema(engine)
    report = DbReport(describe_engine(engine), impl_of(engine).name, state, settings.backend, created)
    return report._replace(created_file=str(path.resolve()) if new_file and path is not None else None)


def db_check(store: Store) -> DbReport:
    """Connect and report; an unreachable database or a missing schema is reported, not raised."""
    from statestore_cli.db.database import describe_engine, mask_url, parse_url, translate_errors
    from statestore_cli.db.engines import impl_of
    from statestore_cli.db.layout import layout_of
    from statestore_cli.db.schema_state import SchemaState, inspect_schema

    settings = store.settings
    try:
        engine = store.engine
        with translate_errors(engine), engine.connect() as conn:
            state = inspect_schema(conn)
    except DatabaseError as exc:
        url = parse_url(settings.sql_alchemy_conn)
        unknown = SchemaState(mode="unknown", present=(), missing=(), alembic_revision=None)
        return DbReport(mask_url(url), impl_of(url).name, unknown, settings.backend, error=str(exc))
    if not settings.uses_builtin_backend:
        store.backend  # noqa: B018  # a custom backend that cannot load makes the store unusable
    report = DbReport(describe_engine(engine), impl_of(engine).name, state, settings.backend, origin=store.origin)
    if state.mode != "airflow":
        return report
    from statestore_cli.db.airflow_versions import airflow_version

    layout = None
    if state.usable:
        with translate_errors(engine), engine.connect() as conn:
            layout = layout_of(conn, needs=None)
    counts = _store_counts(store.metastore, utcnow()) if state.usable and not (layout and layout.problems) else None
    version = airflow_version(state.alembic_revision)
    return report._replace(airflow_version=version, counts=counts, layout=layout)


def _store_counts(store: MetastoreBackend, now: datetime) -> StoreSizes:
    from sqlalchemy import func, select

    from statestore_cli.db.layout import layout_of
    from statestore_cli.db.schema import asset_state_store
    from statestore_cli.ops.cleanup import expired

    with store.connection() as conn:
        task = layout_of(conn).task
        count = select(func.count()).select_from(task)
        tasks = int(conn.execute(count).scalar_one())
        stale = int(conn.execute(count.where(expired(task, now))).scalar_one())
        assets = int(conn.execute(select(func.count()).select_from(asset_state_store)).scalar_one())
    return StoreSizes(tasks, stale, assets, now)
