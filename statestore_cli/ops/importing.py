"""Bulk import of JSON Lines (as ``ops.exporting`` writes them) into both stores.

``import_records`` upserts lines in batches, one transaction each, keeping ``updated_at`` and ``expires_at``
as given. A bad line stops the import before its batch is written; the batches before it stay committed (an
import of the same file again is harmless: every write is an upsert), and the error says which lines were
imported. ``dry_run`` checks every line against the database and writes nothing: run it first for
all-or-nothing. How batches are looked up and written is in ``ops.import_writes``; twins in ``ops.import_twins``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.engine import Connection

from statestore_cli.backends.metastore import MetastoreBackend, dag_run_store
from statestore_cli.backends.store import Store
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.db.schema import asset, asset_active, dag_run
from statestore_cli.errors import BackendError, InvalidInputError
from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.ops.import_summary import ImportSummary, StoreCounts, saying_how_far
from statestore_cli.ops.import_twins import (
    casefold_identity,
    describe_asset,
    describe_asset_key,
    describe_dag_run,
    describe_dag_run_key,
    describe_task_key,
    refuse_stored_twins,
    refuse_twin_lines,
)
from statestore_cli.ops.import_writes import (
    ASSETS_PRESENT,
    asset_row,
    asset_upsert,
    check_no_clash,
    find_assets,
    find_runs,
    first_rows,
    in_list,
    stored_identities,
    task_upsert,
)
from statestore_cli.ops.records import AssetRow, BadRecord, DagRunRow, TaskRow, check_mysql, parse_line, read_lines

MAX_BATCH_SIZE = 100_000
DEFAULT_BATCH_SIZE = 1000


class _Batch(NamedTuple):
    """What one batch did (or, in a dry run, would do)."""

    task: StoreCounts
    asset: StoreCounts
    dag_runs_created: int
    assets_created: int
    dag_run: StoreCounts = StoreCounts()


def import_records(
    store: Store,
    lines: Iterable[str | bytes],
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> ImportSummary:
    """Upsert the keys of ``lines`` (JSON Lines, as ``export_records`` writes them), ``batch_size`` keys per
    transaction. On a standalone store missing dag runs and assets are created as ``set`` creates them; an
    Airflow database must have them already. ``dry_run`` checks everything and writes nothing.
    ``on_progress`` is called after each batch with the number of lines read so far."""
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise InvalidInputError(f"batch_size must be 1 to {MAX_BATCH_SIZE:,}, got {batch_size}", parameter="batch_size")
    if store.api_mode:
        from statestore_cli.ops.api_import import import_over_api

        max_bytes = store.settings.max_value_storage_bytes
        return import_over_api(store.api_backend(), lines, max_bytes, dry_run, on_progress)
    metastore = store.metastore_backend("`import`")
    importer = _Importer(metastore, store.settings.max_value_storage_bytes, dry_run)
    importer.on_progress = on_progress
    with saying_how_far(importer.done):
        return importer.run(lines, batch_size)


class _Importer:
    def __init__(self, backend: MetastoreBackend, max_value_bytes: int, dry_run: bool) -> None:
        self.backend = backend
        self.engine = backend.engine
        self.impl = impl_of(self.engine)
        self.max_value_bytes = max_value_bytes
        self.dry_run = dry_run
        self.committed_through = 0  # the last line of the last committed batch
        self.totals = _Batch(StoreCounts(), StoreCounts(), 0, 0)
        self.batches = 0
        self.new_runs: set[tuple[str, str]] = set()  # dry run: runs a real import would create
        self.new_assets: set[tuple[str, str]] = set()
        # The assets this import creates, by name and by uri, with the line that names each first: two of them
        # sharing a name or a uri could not both be active, and a sweep deletes an inactive asset's keys.
        self.new_names: dict[str, tuple[str, int]] = {}
        self.new_uris: dict[str, tuple[str, int]] = {}
        self.dry_conn: Connection | None = None
        self.task_statements: tuple[Any, Any] | None = None  # (existence query, upsert), for the layout
        self.dag_run_statements: tuple[Any, Any] | None = None
        self.asset_statement: Any = None  # the asset keys' upsert
        self.creates: dict[str, Any] = {}  # table name -> its insert-if-missing (dag runs, assets)
        self.layout: Layout | None = None
        self.on_progress: Callable[[int], None] | None = None

    def done(self) -> str:
        """What is in the database after a failure: for the error message."""
        if self.dry_run:
            return "nothing was written (dry run)"
        last = self.committed_through
        if last == 0:
            return "nothing was imported"
        return f"{'line 1 was' if last == 1 else f'lines 1-{last} were'} imported, nothing after"

    def run(self, lines: Iterable[str | bytes], batch_size: int) -> ImportSummary:
        start = time.monotonic()
        mysql = self.impl.mysql_column_limits
        batch: list[TaskRow | DagRunRow | AssetRow] = []
        number = 0
        with translate_errors(self.engine):
            try:
                for number, text in enumerate(read_lines(lines, self.max_value_bytes), 1):
                    row = parse_line(number, text, self.max_value_bytes)
                    if row is None:
                        continue
                    if mysql:
                        check_mysql(row)
                    self._check_layout(row)
                    batch.append(row)
                    if len(batch) == batch_size:
                        self._batch(batch, number)
                        batch = []
                        if self.on_progress is not None:
                            self.on_progress(number)
                if batch:
                    self._batch(batch, number)
                if self.on_progress is not None:
                    self.on_progress(number)
            finally:
                if self.dry_conn is not None:
                    self.dry_conn.close()
        totals = self.totals
        return ImportSummary(
            self.dry_run,
            number,
            self.batches,
            batch_size,
            totals.task,
            totals.asset,
            totals.dag_runs_created,
            totals.assets_created,
            time.monotonic() - start,
            totals.dag_run,
        )

    def _check_layout(self, row: TaskRow | DagRunRow | AssetRow) -> None:
        """Refuse a line the database's layout has no place for: a dag-run key without a dag-run state
        store, a task key in a region without regions (its keys would be merged with those outside it)."""
        if isinstance(row, DagRunRow):
            layout = self._layout()
            if layout.dag_run_store is None:
                raise BadRecord(
                    row.line,
                    f"a dag-run key, but this database has no dag-run state store (the Airflow {layout.name} "
                    "layout): dag-run keys need Airflow 3.4's dag_run_state_store",
                )
        elif isinstance(row, TaskRow) and row.region_id != NIL_REGION:
            layout = self._layout()
            if not layout.has_region:
                raise BadRecord(
                    row.line,
                    f"a task key in region_id {row.region_id}, but this database has no regions (the Airflow "
                    f"{layout.name} layout): its keys would be merged with the keys of other regions",
                )

    def _layout(self) -> Layout:
        if self.layout is None:
            with self.engine.connect() as conn:
                self.layout = layout_of(conn)
        return self.layout

    def _batch(self, rows: list[TaskRow | DagRunRow | AssetRow], last_line: int) -> None:
        if self.dry_run:
            if self.dry_conn is None:
                self.dry_conn = self.engine.connect()
            done = self._apply(self.dry_conn, rows)
            self.dry_conn.rollback()
        else:

            def transaction() -> _Batch:
                with self.engine.begin() as conn:
                    return self._apply(conn, rows)

            done = retry_deadlocks(transaction)  # a batch is all or nothing, so running it again is safe
            self.committed_through = last_line
        t = self.totals
        self.totals = _Batch(
            StoreCounts(t.task.inserted + done.task.inserted, t.task.updated + done.task.updated),
            StoreCounts(t.asset.inserted + done.asset.inserted, t.asset.updated + done.asset.updated),
            t.dag_runs_created + done.dag_runs_created,
            t.assets_created + done.assets_created,
            StoreCounts(t.dag_run.inserted + done.dag_run.inserted, t.dag_run.updated + done.dag_run.updated),
        )
        self.batches += 1

    def _apply(self, conn: Connection, rows: list[TaskRow | DagRunRow | AssetRow]) -> _Batch:
        # A key given twice in one batch is written once, as its later line says. A region's keys are
        # never those outside it: the region is part of a task key's identity.
        tasks = {
            (r.dag_id, r.run_id, r.task_id, r.region_id, r.map_index, r.key): r for r in rows if isinstance(r, TaskRow)
        }
        dag_runs = {(r.dag_id, r.run_id, r.key): r for r in rows if isinstance(r, DagRunRow)}
        assets = {(r.name, r.uri, r.key): r for r in rows if isinstance(r, AssetRow)}
        if self.impl.pads_unique_text:
            refuse_twin_lines(list(tasks.values()), list(dag_runs.values()), list(assets.values()))
        keyed: list[TaskRow | DagRunRow] = sorted([*tasks.values(), *dag_runs.values()], key=lambda r: r.line)
        runs, runs_created = self._run_ids(conn, keyed) if keyed else ({}, 0)
        task_counts = self._tasks(conn, list(tasks.values()), runs) if tasks else StoreCounts()
        dag_run_counts = self._dag_runs(conn, list(dag_runs.values()), runs) if dag_runs else StoreCounts()
        asset_counts, assets_created = self._assets(conn, list(assets.values())) if assets else (StoreCounts(), 0)
        return _Batch(task_counts, asset_counts, runs_created, assets_created, dag_run_counts)

    # -- task keys -----------------------------------------------------------------------------------
    def _tasks(self, conn: Connection, rows: list[TaskRow], runs: dict[tuple[str, str], int | None]) -> StoreCounts:
        regions = layout_of(conn).has_region
        known = [
            (runs[(r.dag_id, r.run_id)], r.task_id, *((r.region_id,) if regions else ()), r.map_index, r.key)
            for r in rows
        ]
        wanted = {k: r for k, r in zip(known, rows, strict=True) if k[0] is not None}
        present, upsert = self._task_statements(conn)
        stored = stored_identities(conn, present, list(wanted))
        if self.impl.pads_unique_text:
            names = ("dag_run", "task_id", *(("region_id",) if regions else ()), "map_index", "key")
            refuse_stored_twins(stored, wanted, names, describe_task_key)
        updated = sum(1 for identity in stored if identity in wanted)
        if not self.dry_run:
            params = [
                {
                    "dag_run_id": k[0],
                    "task_id": r.task_id,
                    **({"region_id": r.region_id} if regions else {}),
                    "map_index": r.map_index,
                    "key": r.key,
                    "dag_id": r.dag_id,
                    "run_id": r.run_id,
                    "value": r.value,
                    "updated_at": r.updated_at,
                    "expires_at": r.expires_at,
                }
                for k, r in zip(known, rows, strict=True)
            ]
            self._write(conn, upsert, params, rows)
        return StoreCounts(len(rows) - updated, updated)

    def _task_statements(self, conn: Connection) -> tuple[Any, Any]:
        """The existence query and the upsert of task rows, built once for the database's layout: both on
        its whole unique key, the region included where it has regions."""
        if self.task_statements is None:
            layout = layout_of(conn, "write")
            task = layout.task
            identity = tuple(task.c[k] for k in layout.task_identity)
            present = select(*identity).where(*(in_list(c, f"v{i}") for i, c in enumerate(identity)))
            self.task_statements = (present, task_upsert(self.impl, layout))
        return self.task_statements

    # -- dag-run keys --------------------------------------------------------------------------------
    def _dag_runs(
        self, conn: Connection, rows: list[DagRunRow], runs: dict[tuple[str, str], int | None]
    ) -> StoreCounts:
        known = [(runs[(r.dag_id, r.run_id)], r.key) for r in rows]
        wanted = {k: r for k, r in zip(known, rows, strict=True) if k[0] is not None}
        present, upsert = self._dag_run_statements(conn)
        stored = stored_identities(conn, present, list(wanted))
        if self.impl.pads_unique_text:
            refuse_stored_twins(stored, wanted, ("dag_run", "key"), describe_dag_run_key, fold=casefold_identity)
        updated = sum(1 for identity in stored if identity in wanted)
        if not self.dry_run:
            params = [
                {
                    "dag_run_id": k[0],
                    "key": r.key,
                    "dag_id": r.dag_id,
                    "run_id": r.run_id,
                    "value": r.value,
                    "updated_at": r.updated_at,
                    "expires_at": r.expires_at,
                }
                for k, r in zip(known, rows, strict=True)
            ]
            self._write(conn, upsert, params, rows)
        return StoreCounts(len(rows) - updated, updated)

    def _dag_run_statements(self, conn: Connection) -> tuple[Any, Any]:
        """The existence query and the upsert of dag-run rows (``_check_layout`` saw the table exists)."""
        if self.dag_run_statements is None:
            table = dag_run_store(conn)
            identity = (table.c.dag_run_id, table.c.key)
            present = select(*identity).where(*(in_list(c, f"v{i}") for i, c in enumerate(identity)))
            upsert = self.impl.upsert_of(table, ("dag_run_id", "key"), ("value", "updated_at", "expires_at"))
            self.dag_run_statements = (present, upsert)
        return self.dag_run_statements

    # -- dag runs ------------------------------------------------------------------------------------
    def _run_ids(
        self, conn: Connection, rows: Sequence[TaskRow | DagRunRow]
    ) -> tuple[dict[tuple[str, str], int | None], int]:
        """Each run's ``dag_run.id`` (None: a dry run would create it) and how many runs were created."""
        first = first_rows(rows, lambda r: (r.dag_id, r.run_id))
        ids = self._stored_parents(conn, first, find_runs, ("dag_id", "run_id"), describe_dag_run)
        missing = [run for run in first if run not in ids]
        if not missing:
            return ids, 0
        if self.backend.is_airflow_db(conn):
            dag_id, run_id = missing[0]
            row = first[missing[0]]
            raise BadRecord(
                row.line,
                f"no dag run dag_id={dag_id} run_id={run_id} in this Airflow database; "
                f"{'task' if isinstance(row, TaskRow) else 'dag-run'} keys can only be imported for runs Airflow "
                "created",
            )
        if self.dry_run:
            fresh = [run for run in missing if run not in self.new_runs]
            self.new_runs.update(fresh)
            return ids | dict.fromkeys(missing), len(fresh)
        conn.execute(self._create(dag_run), [{"dag_id": d, "run_id": r} for d, r in missing])
        created = set(missing)
        found = {run: pk for run, pk in find_runs(conn, created) if run in created}
        if len(found) != len(missing):
            raise BackendError("creating the dag runs of the imported keys left some of them missing")
        return ids | found, len(missing)

    # -- asset keys ----------------------------------------------------------------------------------
    def _assets(self, conn: Connection, rows: list[AssetRow]) -> tuple[StoreCounts, int]:
        ids, created = self._asset_ids(conn, rows)
        known = [(ids[(r.name, r.uri)], r.key) for r in rows]
        wanted = {k: r for k, r in zip(known, rows, strict=True) if k[0] is not None}
        stored = stored_identities(conn, ASSETS_PRESENT, list(wanted))
        if self.impl.pads_unique_text:
            refuse_stored_twins(stored, wanted, ("asset", "key"), describe_asset_key)
        updated = sum(1 for identity in stored if identity in wanted)
        if not self.dry_run:
            if self.asset_statement is None:
                self.asset_statement = asset_upsert(self.impl)
            params = [asset_row(k[0], r) for k, r in zip(known, rows, strict=True)]
            self._write(conn, self.asset_statement, params, rows)
        return StoreCounts(len(rows) - updated, updated), created

    def _asset_ids(self, conn: Connection, rows: list[AssetRow]) -> tuple[dict[tuple[str, str], int | None], int]:
        first = first_rows(rows, lambda r: (r.name, r.uri))
        ids = self._stored_parents(conn, first, find_assets, ("name", "uri"), describe_asset)
        missing = [pair for pair in first if pair not in ids]
        if not missing:
            return ids, 0
        if self.backend.is_airflow_db(conn):
            name, uri = missing[0]
            raise BadRecord(
                first[missing[0]].line,
                f"no asset name={name} uri={uri} in this Airflow database; assets are created by Airflow",
            )
        for name, uri in missing:
            check_no_clash(conn, name, uri, first[(name, uri)].line)
            self._check_new_asset(name, uri, first[(name, uri)].line)
        if self.dry_run:
            fresh = [pair for pair in missing if pair not in self.new_assets]
            self.new_assets.update(fresh)
            return ids | dict.fromkeys(missing), len(fresh)
        pairs = [{"name": name, "uri": uri} for name, uri in missing]
        for table in (asset, asset_active):
            conn.execute(self._create(table), pairs)
        created = set(missing)
        found = {pair: pk for pair, pk in find_assets(conn, created) if pair in created}
        if len(found) != len(missing):
            raise BackendError("creating the assets of the imported keys left some of them missing")
        return ids | found, len(missing)

    def _check_new_asset(self, name: str, uri: str, line: int) -> None:
        """Another asset this import creates may not have the same name or the same uri (see new_names)."""
        for field, value, other, seen in (("name", name, uri, self.new_names), ("uri", uri, name, self.new_uris)):
            first = seen.setdefault(value, (other, line))
            if first[0] != other:
                shared = f"name={name} uri={first[0]}" if field == "name" else f"name={first[0]} uri={uri}"
                raise BadRecord(
                    line,
                    f"asset name={name} uri={uri} shares its {field} with the asset {shared} created by line "
                    f"{first[1]}: an active asset's name and uri are each unique",
                )

    # -- dag runs and assets ---------------------------------------------------------------------------
    def _stored_parents(
        self,
        conn: Connection,
        first: dict[tuple[str, str], Any],
        find: Callable[[Connection, Iterable[tuple[str, str]]], Iterator[tuple[tuple[str, str], int]]],
        names: Sequence[str],
        what: Callable[[Any], str],
    ) -> dict[tuple[str, str], int | None]:
        """The ids of the stored dag runs (or assets) among ``first``'s (each with its first line); on MySQL
        refuses a line whose run or asset differs from a stored one only in trailing spaces."""
        found = dict(find(conn, first))
        if self.impl.pads_unique_text:
            refuse_stored_twins(found, first, names, what)
        return {parent: pk for parent, pk in found.items() if parent in first}

    # -- writing -------------------------------------------------------------------------------------
    def _create(self, table: Any) -> Any:
        """The insert-if-missing of ``table``'s parents (dag runs, assets), built once."""
        found = self.creates.get(table.name)
        if found is None:
            found = self.creates[table.name] = self.impl.insert_if_missing_of(table)
        return found

    def _write(self, conn: Connection, statement: Any, params: list[dict[str, Any]], rows: Sequence[Any]) -> None:
        # One execution of the engine's upsert with every row of the batch (``executemany``): the batch holds
        # each key once (``_apply``), so no two of its rows clash with each other.
        count = conn.execute(statement, params).rowcount
        low, high = self.impl.upsert_rowcounts(len(params))  # what the engine counts for an insert, an update
        if count is None or not low <= count <= high:
            first, last = min(r.line for r in rows), max(r.line for r in rows)
            raise BackendError(
                f"writing the {len(params):,} keys of lines {first}-{last} reported {count} rows written; "
                "the batch was rolled back"
            )
