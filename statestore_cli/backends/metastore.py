"""The built-in backend: both stores in the metadata database, over SQLAlchemy Core."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, delete, func, literal_column, or_, select, update
from sqlalchemy import column as named_column
from sqlalchemy import table as named_table
from sqlalchemy.engine import Connection, CursorResult, Engine
from sqlalchemy.sql import ColumnElement

from statestore_cli.backends.base import REF_MARKER, BaseStoreBackend, ThreadOffloadMixin, stored_ref
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.db.dialects import insert_if_missing, insert_new, upsert
from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.db.mysql_text import MYSQL_ENGINES, check_asset_text, index_equal, twin_problem, twins
from statestore_cli.db.schema import asset, asset_active, asset_state_store, dag_run, writer_columns
from statestore_cli.db.schema_state import alembic_version_table
from statestore_cli.errors import BackendError, InvalidInputError
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.retention import utcnow
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope

MYSQL_TIMESTAMP_MAX = datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)

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
                raise InvalidInputError(
                    f"no dag run dag_id={scope.dag_id} run_id={scope.run_id} in this Airflow database; "
                    "task keys can only be written for runs Airflow created"
                )
            what = f"dag run dag_id={scope.dag_id!r} run_id={scope.run_id!r}"
            _refuse_twin_row(conn, what, dag_run, {"dag_id": scope.dag_id, "run_id": scope.run_id})
            insert_if_missing(conn, dag_run, {"dag_id": scope.dag_id, "run_id": scope.run_id})
            found = conn.execute(query).scalar_one()
        return int(found)

    def find_asset_id(self, conn: Connection, scope: AssetScope, *, create: bool) -> int | None:
        if scope.asset_id is not None:
            exists = conn.execute(select(asset.c.id).where(asset.c.id == scope.asset_id)).scalar()
            if exists is None and create:
                raise InvalidInputError(f"no asset with asset_id={scope.asset_id}; give an existing asset")
            return scope.asset_id
        check_asset_text(conn.dialect.name, scope.name, scope.uri)
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
            raise InvalidInputError(
                f"no active asset {scope.describe()} in this Airflow database; assets are created by Airflow"
            )
        name, uri = scope.name or scope.uri, scope.uri or scope.name
        _refuse_twin_row(conn, f"asset name={name!r} uri={uri!r}", asset, {"name": name, "uri": uri})
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
        insert_if_missing(conn, asset, {"name": name, "uri": uri})
        insert_if_missing(conn, asset_active, {"name": name, "uri": uri})
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
        _check_mysql_expiry(conn, expires_at)
        layout = self.layout(conn, "write")
        run_pk = self._dag_run_id(conn, scope)
        within = {"dag_run_id": run_pk, "map_index": scope.map_index, **layout.region_values(scope.region_id)}
        what = f"key {key!r} for {scope.describe()}"
        _refuse_twin_row(conn, what, layout.task, {"task_id": scope.task_id, "key": key}, within)
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
        _check_mysql_expiry(conn, expires_at)
        table = dag_run_store(conn)
        run_pk = self._dag_run_id(conn, scope)
        _refuse_twin_row(conn, f"key {key!r} for {scope.describe()}", table, {"key": key}, {"dag_run_id": run_pk})
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
        _refuse_twin_row(conn, f"key {key!r} for {scope.describe()}", _asset_kv, {"key": key}, {"asset_id": asset_id})
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
            rows = self._entries(conn, filt, with_values=True)
            try:
                return next(rows, None)
            finally:
                rows.close()  # finish with the cursor before the transaction ends

    def scope_entries(self, conn: Connection, scope: StoreScope) -> list[Entry]:
        """Every key of ``scope`` with its stored value and timestamps, read on the caller's ``conn`` (a copy
        reads its source and its target inside the transaction that writes); [] for an asset not there."""
        filt = self._scope_filter(conn, scope)
        return [] if filt is None else list(self._entries(conn, filt, with_values=True))

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
        check_asset_text(self.engine.dialect.name, filt.name, filt.uri)
        return self._stream(filt, limit, offset)

    def _stream(self, filt: KeyFilter, limit: int | None, offset: int) -> Iterator[Entry]:
        with self.connection() as conn:
            yield from self._entries(conn, filt, with_values=False, limit=limit, offset=offset)

    def _entries(
        self, conn: Connection, filt: KeyFilter, *, with_values: bool, limit: int | None = None, offset: int = 0
    ) -> Generator[Entry, None, None]:
        """The keys of each store ``filt`` selects, task keys first, then dag-run keys, then asset keys."""
        for store in stores_selected(layout_of(conn), filt):
            if limit == 0:
                return
            shown = 0
            for entry in self._store_entries(store, conn, filt, with_values, limit, offset):
                shown += 1
                yield entry
            if limit is not None:
                limit -= shown
            if shown:
                offset = 0  # the offset ended in this store
            elif offset and store != "asset":  # it skipped every key here: the next store starts after the rest
                offset = max(0, offset - self._store_count(store, conn, filt))

    def _store_entries(
        self, store: str, conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
    ) -> Iterator[Entry]:
        if store == "task":
            return self._task_entries(conn, filt, with_values, limit, offset)
        if store == "dag_run":
            return self._dag_run_entries(conn, filt, with_values, limit, offset)
        return self._asset_entries(conn, filt, with_values, limit, offset)

    def _store_count(self, store: str, conn: Connection, filt: KeyFilter) -> int:
        layout = layout_of(conn)
        if store == "task":
            table, where = layout.task, task_filters(layout, filt)
        else:
            table = dag_run_store(conn)
            where = run_filters(table, filt)
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())

    # Each streams by a statement option, not the connection's: a connection's options last, and a write
    # after a read on the same connection (a copy's) would be sent as a server-side cursor too.
    def _dag_run_entries(
        self, conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
    ) -> Iterator[Entry]:
        table = dag_run_store(conn)
        cols = [table.c.dag_id, table.c.run_id, table.c.key]
        query = select(*cols, table.c.updated_at, table.c.expires_at, *([table.c.value] if with_values else []))
        query = query.where(*run_filters(table, filt)).order_by(*cols).limit(limit).offset(offset or None)
        for row in conn.execute(query.execution_options(yield_per=1000)):
            yield Entry(
                store="dag_run",
                key=row.key,
                updated_at=row.updated_at,
                expires_at=row.expires_at,
                dag_id=row.dag_id,
                run_id=row.run_id,
                value=row.value if with_values else None,
            )

    @classmethod
    def _task_entries(
        cls, conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
    ) -> Iterator[Entry]:
        layout = layout_of(conn)
        task = layout.task
        region = [task.c.region_id] if layout.has_region else []
        cols = [task.c.dag_id, task.c.run_id, task.c.task_id, *region, task.c.map_index, task.c.key]
        shown = [c.label(c.key) for c in cols]  # by the key: the map index may be region_index in the database
        query = select(*shown, task.c.updated_at, task.c.expires_at, *([task.c.value] if with_values else []))
        query = query.where(*task_filters(layout, filt)).order_by(*cols).limit(limit).offset(offset or None)
        for row in conn.execute(query.execution_options(yield_per=1000)):
            region_id = row.region_id if layout.has_region and row.region_id.int else None
            yield Entry(
                store="task",
                key=row.key,
                updated_at=row.updated_at,
                expires_at=row.expires_at,
                dag_id=row.dag_id,
                run_id=row.run_id,
                task_id=row.task_id,
                map_index=row.map_index,
                value=row.value if with_values else None,
                region_id=region_id,
            )

    @staticmethod
    def _asset_entries(
        conn: Connection, filt: KeyFilter, with_values: bool, limit: int | None, offset: int
    ) -> Iterator[Entry]:
        cols = [asset.c.id, asset.c.name, asset.c.uri, _asset_kv.c.key, _asset_kv.c.updated_at]
        query = select(*cols, *([_asset_kv.c.value] if with_values else [])).join(
            asset, asset.c.id == _asset_kv.c.asset_id
        )
        for column, wanted in ((asset.c.id, filt.asset_id), (asset.c.name, filt.name), (asset.c.uri, filt.uri)):
            if wanted is not None:
                query = query.where(column == wanted)
        if filt.key is not None:
            query = query.where(_asset_kv.c.key == filt.key)
        query = query.order_by(asset.c.name, asset.c.uri, _asset_kv.c.key).limit(limit).offset(offset or None)
        for row in conn.execute(query.execution_options(yield_per=1000)):
            yield Entry(
                store="asset",
                key=row.key,
                updated_at=row.updated_at,
                expires_at=None,
                asset_id=row.id,
                name=row.name,
                uri=row.uri,
                value=row.value if with_values else None,
            )


def _write(
    conn: Connection, table: Any, row: dict[str, Any], conflict: Any, update: Any, overwrite: bool
) -> CursorResult[Any]:
    """An upsert of ``row``, or with ``overwrite=False`` an insert that a row already there refuses."""
    if overwrite:
        return upsert(conn, table, row, conflict, update)
    return insert_new(conn, table, row)


def _refuse_twin_row(
    conn: Connection, what: str, table: Any, texts: dict[str, Any], within: dict[str, Any] | None = None
) -> None:
    """On MySQL/MariaDB, refuse a write of ``texts`` (and ``within``, compared as they are) that the
    table's unique index would land on a stored row that differs from it: in trailing spaces (every
    collation there ignores them), or in what a column's own collation ignores besides (letter case,
    accents: Airflow 3.4's ``dag_run_state_store.key`` takes the database's default collation)."""
    if conn.dialect.name not in MYSQL_ENGINES:
        return
    columns = [table.c[name] for name in texts]
    conds = [index_equal(table.c[name], value) for name, value in texts.items()]
    conds += [table.c[name] == value for name, value in (within or {}).items()]
    given = tuple(texts.values())
    for stored in conn.execute(select(*columns).where(*conds).limit(2)):
        if twins(given, tuple(stored)):
            raise InvalidInputError(twin_problem(what, tuple(texts), given, tuple(stored)))
        if tuple(stored) != given:  # the index holds them for one: its collation ignores more than spaces
            pairs = [f"{n} {g!r} and the stored {o!r}" for n, g, o in zip(texts, given, stored, strict=True) if g != o]
            raise InvalidInputError(
                f"cannot write {what}: {', '.join(pairs)} are one in the database's unique index (its "
                "collation ignores letter case or accents), so they cannot be stored apart"
            )


def task_where(
    layout: Layout, scope: TaskScope, key: str | None = None, all_map_indices: bool = False
) -> ColumnElement[bool]:
    """The rows of one task's key (``key`` None: all its keys; ``all_map_indices``: at every map index)."""
    task = layout.task
    parts = [task.c.dag_id == scope.dag_id, task.c.run_id == scope.run_id, task.c.task_id == scope.task_id]
    parts += _region_where(layout, scope)
    if not all_map_indices:
        parts.append(task.c.map_index == scope.map_index)
    if key is not None:
        parts.append(task.c.key == key)
    return and_(*parts)


def dag_run_where(conn: Connection, scope: DagRunScope, key: str | None = None) -> tuple[Any, Any]:
    """The dag-run state store table and the rows of one run's keys (``key`` None: all of them)."""
    table = dag_run_store(conn)
    parts = [table.c.dag_id == scope.dag_id, table.c.run_id == scope.run_id]
    return table, and_(*parts, *([table.c.key == key] if key is not None else []))


def dag_run_store(conn: Connection) -> Any:
    """The dag-run state store table, or an ``InvalidInputError`` where the database has none."""
    layout = layout_of(conn, needs=None)  # the task table's problems are not the dag-run store's
    if layout.dag_run_store is None:
        raise InvalidInputError(
            f"this database has no dag-run state store (Airflow {layout.name} layout): dag-run keys need "
            "Airflow 3.4's dag_run_state_store; give --task-id for a task key"
        )
    return layout.dag_run_store


def task_filters(layout: Layout, filt: KeyFilter) -> list[ColumnElement[bool]]:
    """The conditions of ``filt``'s task fields (and region, where the table has one) on the task table."""
    names = ("dag_id", "run_id", "task_id", "map_index", "key")
    task = layout.task
    found = [task.c[name] == getattr(filt, name) for name in names if getattr(filt, name) is not None]
    if filt.region_id is not None and layout.has_region:
        found.append(task.c.region_id == filt.region_id)
    return found


def stores_selected(layout: Layout, filt: KeyFilter) -> list[str]:
    """The stores whose keys ``filt`` can select, in the order they are listed."""
    stores = []
    if filt.store in (None, "task") and not filt.has_asset_fields:
        stores.append("task")
    task_only = filt.task_id is not None or filt.map_index is not None or bool(filt.region_id and filt.region_id.int)
    # Asked for by name (--store dag_run), a database without the store says so instead of listing nothing.
    present = layout.dag_run_store is not None or filt.store == "dag_run"
    if filt.store in (None, "dag_run") and not filt.has_asset_fields and not task_only and present:
        stores.append("dag_run")
    if filt.store in (None, "asset") and not filt.has_task_fields:
        stores.append("asset")
    return stores


def run_filters(table: Any, filt: KeyFilter) -> list[ColumnElement[bool]]:
    """The conditions of ``filt``'s dag id, run id and key on a table that has those columns."""
    names = ("dag_id", "run_id", "key")
    return [table.c[name] == getattr(filt, name) for name in names if getattr(filt, name) is not None]


def _region_where(layout: Layout, scope: TaskScope) -> list[ColumnElement[bool]]:
    """The scope's region as a condition where the table has regions: a region's keys are never merged
    with the keys outside it. Airflow 3.3's table has no region column; there, as before, a region is
    not stored (each region keeps its own metadata database)."""
    return layout.region_where(scope.region_id) if layout.has_region else []


def _check_mysql_expiry(conn: Connection, expires_at: datetime | None) -> None:
    if expires_at is not None and conn.dialect.name in MYSQL_ENGINES and expires_at > MYSQL_TIMESTAMP_MAX:
        raise InvalidInputError(
            f"expires_at {expires_at:%Y-%m-%d %H:%M:%S} UTC is past 2038-01-19 03:14:07, the last instant a MySQL "
            "TIMESTAMP holds; use a shorter retention or never"
        )
