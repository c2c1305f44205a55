"""The built-in backend: both stores in the metadata database, over SQLAlchemy Core."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, delete, func, literal_column, or_, select, update
from sqlalchemy import column as named_column
from sqlalchemy import table as named_table
from sqlalchemy.engine import Connection, CursorResult, Engine

from statestore_cli.backends.base import REF_MARKER, BaseStoreBackend, ThreadOffloadMixin, stored_ref
from statestore_cli.backends.entry_listing import stored_entries
from statestore_cli.backends.key_conditions import (
    dag_run_store,
    dag_run_where,
    run_filters,
    stores_selected,
    task_filters,
    task_where,
)
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.db.mysql_text import index_equal
from statestore_cli.db.schema import asset, asset_active, asset_state_store, dag_run, writer_columns
from statestore_cli.db.schema_state import alembic_version_table
from statestore_cli.errors import BackendError, InvalidInputError
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.retention import utcnow
from statestore_cli.model.scopes import (
    AssetScope,
    DagRunScope,
    StoreScope,
    TaskScope,
    no_asset_to_write,
    no_run_to_write,
)

IN_AIRFLOW_DB = "in this Airflow database"  # where a refused write's target is missing (the API: "on this ...")

# The key conditions lived here first: callers may still import them from this module.
__all__ = [
    "MetastoreBackend",
    "UpdatedBy",
    "dag_run_store",
    "dag_run_where",
    "run_filters",
    "stores_selected",
    "task_filters",
    "task_where",
]

_asset_kv = asset_state_store  # the same in every layout (3.4's extra writer columns are nullable)


class UpdatedBy(NamedTuple):
    """Who wrote an asset key (its ``schema.ASSET_WRITER_COLUMNS``): kind is ``task``, ``watcher`` or ``api``."""

    kind: str
    task: TaskScope | None = None


class MetastoreBackend(ThreadOffloadMixin, BaseStoreBackend):
    """Task and asset state in the ``task_state_store`` and ``asset_state_store`` tables.

    ``session`` may be a SQLAlchemy ``Connection`` inside the caller's transaction; without one each
    call is its own transaction. The task table is the database's own layout (``layout``): on Airflow
    3.4's, a task scope's ``region_id`` is part of its identity (the nil UUID outside any region); on
    3.3's, which has no region column, it is not stored (each region keeps its own metadata database).
    """

    can_replace = True
    in_tables = True

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._airflow_mode: bool | None = None

    # -- plumbing ---------------------------------------------------------------------------------
    @contextmanager
    def connection(self, session: Any = None) -> Iterator[Connection]:
        with translate_errors(self.engine):
            if session is not None:
                yield session
            else:
                with self.engine.begin() as conn:
                    yield conn

    def is_airflow_db(self, conn: Connection) -> bool:
        # Airflow's database is managed by its alembic migrations; ours has no alembic_version.
        if self._airflow_mode is None:
            self._airflow_mode = alembic_version_table(conn) is not None
        return self._airflow_mode

    def layout(self, conn: Connection, needs: str = "read") -> Layout:
        return layout_of(conn, needs)

    def _dag_run_id(self, conn: Connection, scope: TaskScope | DagRunScope) -> int:
        query = select(dag_run.c.id).where(dag_run.c.dag_id == scope.dag_id, dag_run.c.run_id == scope.run_id)
        found = conn.execute(query).scalar()
        if found is None:
            if self.is_airflow_db(conn):
                raise InvalidInputError(no_run_to_write(scope, IN_AIRFLOW_DB))
            what = f"dag run dag_id={scope.dag_id!r} run_id={scope.run_id!r}"
            impl_of(conn).refuse_twin_row(conn, what, dag_run, {"dag_id": scope.dag_id, "run_id": scope.run_id})
            impl_of(conn).insert_if_missing(conn, dag_run, {"dag_id": scope.dag_id, "run_id": scope.run_id})
            found = conn.execute(query).scalar_one()
        return int(found)

    def find_asset_id(self, conn: Connection, scope: AssetScope, *, create: bool) -> int | None:
        if scope.asset_id is not None:
            exists = conn.execute(select(asset.c.id).where(asset.c.id == scope.asset_id)).scalar()
            if exists is None and create:
                raise InvalidInputError(no_asset_to_write(scope, IN_AIRFLOW_DB))
            return scope.asset_id
        impl_of(conn).check_asset_text(scope.name, scope.uri)
        conds = [asset.c.name == scope.name] if scope.name else []
        conds += [asset.c.uri == scope.uri] if scope.uri else []
        # As Airflow's execution API does: a name or uri names an active asset (unique by each).
        active = select(asset.c.id).join(
            asset_active, and_(asset_active.c.name == asset.c.name, asset_active.c.uri == asset.c.uri)
        )
        ids = conn.execute(active.where(*conds).limit(2)).scalars().all()
        if len(ids) > 1:
            raise InvalidInputError(f"several assets match {scope.describe()}; give both name and uri, or asset_id")
        if ids:
            return int(ids[0])
        if not create:
            return None
        if self.is_airflow_db(conn):
            raise InvalidInputError(no_asset_to_write(scope, IN_AIRFLOW_DB))
        name, uri = scope.name or scope.uri, scope.uri or scope.name
        impl_of(conn).refuse_twin_row(conn, f"asset name={name!r} uri={uri!r}", asset, {"name": name, "uri": uri})
        # As the unique indexes compare (on MySQL without trailing spaces), since those are what refuse a row.
        clash = conn.execute(
            select(asset_active.c.name, asset_active.c.uri).where(
                or_(index_equal(asset_active.c.name, name), index_equal(asset_active.c.uri, uri))
            )
        ).first()
        if clash is not None:
            raise InvalidInputError(
                f"asset name={name} uri={uri} clashes with the active asset name={clash.name} uri={clash.uri}: "
                "an active asset's name and uri are each unique"
            )
        impl_of(conn).insert_if_missing(conn, asset, {"name": name, "uri": uri})
        impl_of(conn).insert_if_missing(conn, asset_active, {"name": name, "uri": uri})
        return int(conn.execute(select(asset.c.id).where(asset.c.name == name, asset.c.uri == uri)).scalar_one())

    # -- BaseStoreBackend -------------------------------------------------------------------------
    def get(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        entry = self.describe(scope, key, session=session)
        return None if entry is None else entry.value

    def set(
        self,
        scope: StoreScope,
        key: str,
        value: str,
        *,
        expires_at: datetime | None = None,
        session: Any = None,
        updated_by: UpdatedBy | None = None,
        overwrite: bool = True,
    ) -> None:
        """Insert or replace the key; ``overwrite=False``: insert only, a key already there is the database's
        unique-key error (a copy that checked for clashes never replaces a key written since)."""
        if isinstance(scope, AssetScope) and expires_at is not None:
            raise InvalidInputError("asset keys never expire; expires_at must be None for an asset scope")

        def write(conn: Connection) -> None:
            now = utcnow()
            if isinstance(scope, TaskScope):
                result = self._upsert_task(conn, scope, key, value, now, expires_at, overwrite)
            elif isinstance(scope, DagRunScope):
                result = self._upsert_dag_run(conn, scope, key, value, now, expires_at, overwrite)
            else:
                writer = updated_by or UpdatedBy(kind="api")
                result = self._upsert_asset(conn, scope, key, value, now, writer, overwrite)
            if result.rowcount == 0:
                raise BackendError(f"writing key {key!r} for {scope.describe()} changed no row")

        if session is not None:
            with self.connection(session) as conn:
                write(conn)
            return

        def transaction() -> None:
            with self.engine.begin() as conn:
                write(conn)

        with translate_errors(self.engine):
            retry_deadlocks(transaction)  # concurrent upserts of one key may deadlock on MySQL

    def _upsert_task(
        self,
        conn: Connection,
        scope: TaskScope,
        key: str,
        value: str,
        now: datetime,
        expires_at: datetime | None,
        overwrite: bool = True,
    ) -> CursorResult[Any]:
        impl_of(conn).check_expiry(expires_at)
        layout = self.layout(conn, "write")
        run_pk = self._dag_run_id(conn, scope)
        within = {"dag_run_id": run_pk, "map_index": scope.map_index, **layout.region_values(scope.region_id)}
        what = f"key {key!r} for {scope.describe()}"
        impl_of(conn).refuse_twin_row(conn, what, layout.task, {"task_id": scope.task_id, "key": key}, within)
        row = {
            "dag_run_id": run_pk,
            "task_id": scope.task_id,
            **layout.region_values(scope.region_id),
            "map_index": scope.map_index,
            "key": key,
            "dag_id": scope.dag_id,
            "run_id": scope.run_id,
            "value": value,
            "updated_at": now,
            "expires_at": expires_at,
        }
        return _write(conn, layout.task, row, layout.task_identity, ("value", "updated_at", "expires_at"), overwrite)

    def _upsert_dag_run(
        self,
        conn: Connection,
        scope: DagRunScope,
        key: str,
        value: str,
        now: datetime,
        expires_at: datetime | None,
        overwrite: bool = True,
    ) -> CursorResult[Any]:
        impl_of(conn).check_expiry(expires_at)
        table = dag_run_store(conn)
        run_pk = self._dag_run_id(conn, scope)
        impl_of(conn).refuse_twin_row(
            conn, f"key {key!r} for {scope.describe()}", table, {"key": key}, {"dag_run_id": run_pk}
        )
        row = {
            "dag_run_id": run_pk,
            "key": key,
            "dag_id": scope.dag_id,
            "run_id": scope.run_id,
            "value": value,
            "updated_at": now,
            "expires_at": expires_at,
        }
        return _write(conn, table, row, ("dag_run_id", "key"), ("value", "updated_at", "expires_at"), overwrite)

    def _upsert_asset(
        self,
        conn: Connection,
        scope: AssetScope,
        key: str,
        value: str,
        now: datetime,
        writer: UpdatedBy,
        overwrite: bool = True,
    ) -> CursorResult[Any]:
        task = writer.task
        asset_id = self.find_asset_id(conn, scope, create=True)
        impl_of(conn).refuse_twin_row(
            conn, f"key {key!r} for {scope.describe()}", _asset_kv, {"key": key}, {"asset_id": asset_id}
        )
        by: dict[str, object] = {"kind": writer.kind}
        if task is not None:
            by.update(dag_id=task.dag_id, run_id=task.run_id, task_id=task.task_id, map_index=task.map_index)
        row = {"asset_id": asset_id, "key": key, "value": value, "updated_at": now, **writer_columns(**by)}
        return _write(conn, _asset_kv, row, ("asset_id", "key"), tuple(c for c in row if c != "asset_id"), overwrite)

    def replace(self, scope: StoreScope, key: str, value: str, *, session: Any = None) -> int:
        """Replace the value of an existing key and keep its ``expires_at`` (an asset key: now written
        by ``api``); returns the rows changed, 0 when the key does not exist (nothing is created)."""
        now = utcnow()
        with self.connection(session) as conn:
            if isinstance(scope, TaskScope):
                layout = self.layout(conn)
                stmt = update(layout.task).where(task_where(layout, scope, key))
                return int(conn.execute(stmt.values(value=value, updated_at=now)).rowcount)
            if isinstance(scope, DagRunScope):
                table, where = dag_run_where(conn, scope, key)
                return int(conn.execute(update(table).where(where).values(value=value, updated_at=now)).rowcount)
            asset_id = self.find_asset_id(conn, scope, create=False)
            if asset_id is None:
                return 0
            stmt = (
                update(_asset_kv)
                .where(_asset_kv.c.asset_id == asset_id, _asset_kv.c.key == key)
                .values(value=value, updated_at=now, **writer_columns(kind="api"))
            )
            return int(conn.execute(stmt).rowcount)

    def delete(self, scope: StoreScope, key: str, *, session: Any = None) -> int:
        return self._delete(scope, key, all_map_indices=False, session=session)

    def clear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> int:
        return self._delete(scope, None, all_map_indices=all_map_indices, session=session)

    def _delete(self, scope: StoreScope, key: str | None, *, all_map_indices: bool, session: Any) -> int:
        with self.connection(session) as conn:
            if isinstance(scope, TaskScope):
                layout = self.layout(conn)
                where = task_where(layout, scope, key, all_map_indices)
                return int(conn.execute(delete(layout.task).where(where)).rowcount)
            if isinstance(scope, DagRunScope):
                table, where = dag_run_where(conn, scope, key)
                return int(conn.execute(delete(table).where(where)).rowcount)
            asset_id = self.find_asset_id(conn, scope, create=False)
            if asset_id is None:
                return 0
            stmt = delete(_asset_kv).where(_asset_kv.c.asset_id == asset_id)
            if key is not None:
                stmt = stmt.where(_asset_kv.c.key == key)
            return int(conn.execute(stmt).rowcount)

    # -- beyond the base interface: what the CLI shows ------------------------------------------
    def describe(self, scope: StoreScope, key: str, *, session: Any = None) -> Entry | None:
        """The stored entry (value still JSON-encoded) with its timestamps, or None."""
        with self.connection(session) as conn:
            filt = self._scope_filter(conn, scope, key)
            if filt is None:
                return None
            rows = stored_entries(conn, filt, with_values=True)
            try:
                return next(rows, None)
            finally:
                rows.close()  # finish with the cursor before the transaction ends

    def scope_entries(self, conn: Connection, scope: StoreScope) -> list[Entry]:
        """Every key of ``scope`` with its stored value and timestamps, read on the caller's ``conn`` (a copy
        reads its source and its target inside the transaction that writes); [] for an asset not there."""
        filt = self._scope_filter(conn, scope)
        return [] if filt is None else list(stored_entries(conn, filt, with_values=True))

    def _scope_filter(self, conn: Connection, scope: StoreScope, key: str | None = None) -> KeyFilter | None:
        """The filter that selects ``scope``'s keys (only ``key``, when given); None for an asset not there."""
        if isinstance(scope, TaskScope):
            return KeyFilter(
                store="task",
                dag_id=scope.dag_id,
                run_id=scope.run_id,
                task_id=scope.task_id,
                map_index=scope.map_index,
                key=key,
                region_id=scope.region_id,
            )
        if isinstance(scope, DagRunScope):
            dag_run_store(conn)  # a database without the store says so, rather than "no key"
            return KeyFilter(store="dag_run", dag_id=scope.dag_id, run_id=scope.run_id, key=key)
        asset_id = self.find_asset_id(conn, scope, create=False)
        return None if asset_id is None else KeyFilter(store="asset", asset_id=asset_id, key=key)

    def missing_target(self, conn: Connection, scope: StoreScope) -> str | None:
        """On an Airflow database, what a write to ``scope`` needs that Airflow has not created (its dag run,
        its task instance, its asset), said as "no task instance dag_id=..."; None when all is there, and
        always on a standalone store, where a write creates its dag run or asset as ``set`` does."""
        if isinstance(scope, AssetScope):
            if scope.asset_id is not None:
                found = conn.execute(select(asset.c.id).where(asset.c.id == scope.asset_id)).first()
                return None if found is not None else f"no asset with asset_id={scope.asset_id}"
            if self.find_asset_id(conn, scope, create=False) is not None or not self.is_airflow_db(conn):
                return None
            return f"no active asset {scope.describe()}"
        if not self.is_airflow_db(conn):
            return None
        run = select(dag_run.c.id).where(dag_run.c.dag_id == scope.dag_id, dag_run.c.run_id == scope.run_id)
        if conn.execute(run).first() is None:
            return f"no dag run dag_id={scope.dag_id} run_id={scope.run_id}"
        if isinstance(scope, TaskScope) and not self._has_task_instance(conn, scope):
            return f"no task instance {scope.describe()}"
        return None

    def _has_task_instance(self, conn: Connection, scope: TaskScope) -> bool:
        # Airflow renames task_instance's map index with the state store's (3.4: region_index), so the
        # layout's name of the one is the name of the other.
        index = self.layout(conn).task.c.map_index.name
        ti = named_table(
            "task_instance",
            named_column("dag_id"),
            named_column("run_id"),
            named_column("task_id"),
            named_column(index),
        )
        query: Any = (
            select(literal_column("1"))
            .select_from(ti)
            .where(
                ti.c.dag_id == scope.dag_id,
                ti.c.run_id == scope.run_id,
                ti.c.task_id == scope.task_id,
                ti.c[index] == scope.map_index,
            )
        )
        return conn.execute(query.limit(1)).first() is not None

    def other_map_indices(self, scope: TaskScope, key: str | None = None) -> list[tuple[int, int]]:
        """``(map_index, keys)`` for each map index of the scope's task, other than the scope's, that holds
        keys (``key``: that key): where a scope given without its map index finds them."""
        with self.connection() as conn:
            layout = self.layout(conn)
            task = layout.task
            where = and_(task_where(layout, scope, key, all_map_indices=True), task.c.map_index != scope.map_index)
            query = select(task.c.map_index, func.count()).where(where).group_by(task.c.map_index)
            return sorted((int(index), int(count)) for index, count in conn.execute(query))

    def has_asset(self, scope: AssetScope) -> bool:
        """Whether the asset scope names an asset: by asset_id any asset, by name or uri an active one
        (as ``get`` and ``set`` look it up)."""
        with self.connection() as conn:
            if scope.asset_id is not None:
                return conn.execute(select(asset.c.id).where(asset.c.id == scope.asset_id)).first() is not None
            return self.find_asset_id(conn, scope, create=False) is not None

    def asset_names(self) -> list[str]:
        return self.known_ids("name")

    def known_ids(self, field: str, dag_id: str | None = None, limit: int = 100_000) -> list[str]:
        """The distinct values of ``field`` ("dag_id" or "task_id", within ``dag_id`` when given) among task
        keys, or the names of assets ("name"): the candidates of a "did you mean". Task ids are read from
        the task table's lookup index (dag_id, run_id, task_id, ...); at most ``limit`` of them."""
        with self.connection() as conn:
            if field == "name":
                query = select(asset.c.name).distinct()
            else:
                task = self.layout(conn).task
                column = task.c[field]
                query = select(column).distinct()
                if dag_id is not None and field != "dag_id":
                    query = query.where(task.c.dag_id == dag_id)
            return [str(value) for (value,) in conn.execute(query.limit(limit)) if value is not None]

    def has_run(self, scope: TaskScope | DagRunScope) -> bool:
        """Whether the task's dag run exists (a key of a run that does not cannot exist either)."""
        query = select(dag_run.c.id).where(dag_run.c.dag_id == scope.dag_id, dag_run.c.run_id == scope.run_id)
        with self.connection() as conn:
            return conn.execute(query.limit(1)).first() is not None

    def references(self) -> frozenset[str]:
        """Every worker-side reference a row of either store holds (``{"__airflow_state_ref__": ref}``)."""
        found: list[str] = []
        with self.connection() as conn:
            for table in (self.layout(conn).task, _asset_kv):
                # In LIKE each `_` of the marker matches any character: it over-matches, the parse decides.
                query = select(table.c.value).where(table.c.value.like(f"%{REF_MARKER}%"))
                for (value,) in conn.execution_options(yield_per=1000).execute(query):
                    try:
                        ref = stored_ref(json.loads(value))
                    except ValueError:  # not JSON: not written by an accessor, so not a reference
                        continue
                    if ref is not None:
                        found.append(ref)
        return frozenset(found)

    def count(self, scope: StoreScope, *, all_map_indices: bool = False) -> int:
        with self.connection() as conn:
            if isinstance(scope, TaskScope):
                layout = self.layout(conn)
                where = task_where(layout, scope, None, all_map_indices)
                return int(conn.execute(select(func.count()).select_from(layout.task).where(where)).scalar_one())
            if isinstance(scope, DagRunScope):
                table, where = dag_run_where(conn, scope)
                return int(conn.execute(select(func.count()).select_from(table).where(where)).scalar_one())
            asset_id = self.find_asset_id(conn, scope, create=False)
            if asset_id is None:
                return 0
            query = select(func.count()).select_from(_asset_kv).where(_asset_kv.c.asset_id == asset_id)
            return int(conn.execute(query).scalar_one())

    def entries(self, filt: KeyFilter, *, limit: int | None = None, offset: int = 0) -> Iterator[Entry]:
        """Every key matching ``filt``, task keys first, each store in scope order; streamed.

        ``offset`` skips that many keys of that order and ``limit`` stops after that many, both in the
        database (``LIMIT``/``OFFSET``), so paging through a large store never reads what it skips.
        """
        if (limit is not None and limit < 0) or offset < 0:
            raise InvalidInputError(f"limit and offset must be 0 or more, got limit={limit} offset={offset}")
        impl_of(self.engine).check_asset_text(filt.name, filt.uri)
        return self._stream(filt, limit, offset)

    def _stream(self, filt: KeyFilter, limit: int | None, offset: int) -> Iterator[Entry]:
        with self.connection() as conn:
            yield from stored_entries(conn, filt, with_values=False, limit=limit, offset=offset)


def _write(
    conn: Connection, table: Any, row: dict[str, Any], conflict: Any, update: Any, overwrite: bool
) -> CursorResult[Any]:
    """An upsert of ``row``, or with ``overwrite=False`` an insert that a row already there refuses."""
    if overwrite:
        return impl_of(conn).upsert(conn, table, row, conflict, update)
    return impl_of(conn).insert_new(conn, table, row)
