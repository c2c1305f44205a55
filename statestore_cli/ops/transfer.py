"""Bulk export and import of both stores as JSON Lines (the format is in ``statestore_cli.ops.records``).

``export_records`` streams the keys a ``KeyFilter`` selects, in ``list``'s order, a thousand rows per fetch
from a server-side cursor, so memory stays flat whatever the store's size. ``import_records`` upserts lines
in batches, one transaction each, keeping ``updated_at`` and ``expires_at`` as given. A bad line stops the
import before its batch is written; the batches before it stay committed (an import of the same file
again is harmless: every write is an upsert), and the error says which lines were imported. ``dry_run``
checks every line against the database and writes nothing: run it first for all-or-nothing.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from sqlalchemy import String, bindparam, or_, select, type_coerce
from sqlalchemy.engine import Connection, Engine

from statestore_cli.backends.metastore import (
    MetastoreBackend,
    dag_run_store,
    run_filters,
    stores_selected,
    task_filters,
)
from statestore_cli.backends.store import Store
from statestore_cli.db.database import retry_deadlocks, translate_errors
from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.db.mysql_text import check_asset_text, index_equal, padless, twin_problem
from statestore_cli.db.schema import (
    ASSET_WRITER_COLUMNS,
    asset,
    asset_active,
    asset_state_store,
    dag_run,
    qualified,
)
from statestore_cli.errors import BackendError, InterruptedByUser, InvalidInputError, StateStoreError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops.records import (
    AssetRow,
    BadRecord,
    DagRunRow,
    TaskRow,
    asset_record,
    check_mysql,
    dag_run_record,
    encode_line,
    load_strict,
    parse_line,
    read_lines,
    task_record,
)

_asset_kv = asset_state_store
_MYSQL = ("mysql", "mariadb")
FETCH = 1000  # rows per fetch of an export: as fast as larger fetches, a few MB at most held
LOOKUP = 1000  # keys per existence query of an import (SQLite allows 32,766 parameters in one statement)
MAX_BATCH_SIZE = 100_000
DEFAULT_BATCH_SIZE = 1000


def _in(column: Any, name: str) -> Any:
    return column.in_(bindparam(name, expanding=True))


# The import's queries, built once: statements built per batch would leave their reference cycles to the
# garbage collector, and memory would grow with the input until it ran.
_FIND_RUNS = select(dag_run.c.id, dag_run.c.dag_id, dag_run.c.run_id).where(
    _in(dag_run.c.dag_id, "dag_ids"), _in(dag_run.c.run_id, "run_ids")
)
_FIND_ASSETS = select(asset.c.id, asset.c.name, asset.c.uri).where(_in(asset.c.name, "names"), _in(asset.c.uri, "uris"))
_CLASH = select(asset_active.c.name, asset_active.c.uri).where(
    # As the unique indexes compare (on MySQL without trailing spaces), since those are what refuse a row.
    or_(index_equal(asset_active.c.name, bindparam("name")), index_equal(asset_active.c.uri, bindparam("uri")))
)
_ASSET_IDENTITY = (_asset_kv.c.asset_id, _asset_kv.c.key)
_ASSETS_PRESENT = select(*_ASSET_IDENTITY).where(*(_in(c, f"v{i}") for i, c in enumerate(_ASSET_IDENTITY)))


# -- export --------------------------------------------------------------------------------------------
class ExportSummary(NamedTuple):
    task: int
    asset: int
    elapsed: float
    dag_run: int = 0

    @property
    def keys(self) -> int:
        return self.task + self.dag_run + self.asset


def export_records(store: Store, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    """The keys ``filt`` selects as export records (dicts in the line format), in ``list``'s order:
    task keys by dag, run, task, region, map index and key, then dag-run keys (Airflow 3.4) by dag, run
    and key, then asset keys by name, uri and key."""
    engine = store.metastore_backend("`export`").engine
    check_asset_text(engine.dialect.name, filt.name, filt.uri)
    return _records(engine, filt)


def _records(engine: Engine, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    with translate_errors(engine), engine.connect() as conn:
        if engine.dialect.name != "sqlite":  # both stores from one snapshot, however long the export takes
            conn.execution_options(isolation_level="REPEATABLE READ")
        for store in stores_selected(layout_of(conn), filt):  # as `list` selects them
            if store == "task":
                yield from _task_records(conn, filt)
            elif store == "dag_run":
                yield from _dag_run_records(conn, filt)
            else:
                yield from _asset_records(conn, filt)


def _raw(column: Any) -> Any:
    # The driver's own value (SQLite text, a datetime elsewhere) skips SQLAlchemy's per-row parsing.
    return type_coerce(column, String)


def _task_records(conn: Connection, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    layout = layout_of(conn)
    task = layout.task
    # The region (where the table has one) is selected last, so each row unpacks the same way.
    region = [task.c.region_id] if layout.has_region else []
    order = (task.c.dag_id, task.c.run_id, task.c.task_id, *region, task.c.map_index, task.c.key)
    shown = (task.c.dag_id, task.c.run_id, task.c.task_id, task.c.map_index, task.c.key)
    wanted = task_filters(layout, filt)
    query = select(*shown, _raw(task.c.updated_at), _raw(task.c.expires_at), task.c.value, *region)
    for chunk in conn.execution_options(yield_per=FETCH).execute(query.where(*wanted).order_by(*order)).partitions():
        for dag_id, run_id, task_id, map_index, key, updated_at, expires_at, value, *in_region in chunk:
            try:
                decoded = load_strict(value)
            except ValueError as exc:
                raise _not_json(key, f"dag_id={dag_id} run_id={run_id} task_id={task_id}", exc) from None
            where = str(in_region[0]) if in_region and in_region[0] != NIL_REGION else None  # outside any: none
            expiry = None if expires_at is None else iso_utc(expires_at)
            yield task_record(dag_id, run_id, task_id, where, map_index, key, iso_utc(updated_at), expiry, decoded)


def _dag_run_records(conn: Connection, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    table = dag_run_store(conn)  # a database without the store says so
    order = (table.c.dag_id, table.c.run_id, table.c.key)
    query = select(*order, _raw(table.c.updated_at), _raw(table.c.expires_at), table.c.value)
    query = query.where(*run_filters(table, filt)).order_by(*order)
    for chunk in conn.execution_options(yield_per=FETCH).execute(query).partitions():
        for dag_id, run_id, key, updated_at, expires_at, value in chunk:
            try:
                decoded = load_strict(value)
            except ValueError as exc:
                raise _not_json(key, f"dag run dag_id={dag_id} run_id={run_id}", exc) from None
            expiry = None if expires_at is None else iso_utc(expires_at)
            yield dag_run_record(dag_id, run_id, key, iso_utc(updated_at), expiry, decoded)


def _asset_records(conn: Connection, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    by = tuple(_asset_kv.c[name] for name in ASSET_WRITER_COLUMNS)
    query = select(asset.c.name, asset.c.uri, _asset_kv.c.key, _raw(_asset_kv.c.updated_at), _asset_kv.c.value, *by)
    query = query.join(asset, asset.c.id == _asset_kv.c.asset_id)
    for column, wanted in ((asset.c.id, filt.asset_id), (asset.c.name, filt.name), (asset.c.uri, filt.uri)):
        if wanted is not None:
            query = query.where(column == wanted)
    if filt.key is not None:
        query = query.where(_asset_kv.c.key == filt.key)
    query = query.order_by(asset.c.name, asset.c.uri, _asset_kv.c.key)
    for chunk in conn.execution_options(yield_per=FETCH).execute(query).partitions():
        for name, uri, key, updated_at, value, *writer in chunk:
            try:
                decoded = load_strict(value)
            except ValueError as exc:
                raise _not_json(key, f"asset name={name} uri={uri}", exc) from None
            yield asset_record(name, uri, key, iso_utc(updated_at), tuple(writer), decoded)


def _not_json(key: str, scope: str, exc: ValueError) -> BackendError:
    # An export that no import could read back is no backup: stop and say which key it is.
    return BackendError(
        f"the value of key {key!r} for {scope} is not valid JSON ({getattr(exc, 'msg', exc)}); "
        "fix or delete that key, or leave it out with the export's filters"
    )


def write_export(store: Store, filt: KeyFilter, out: IO[str]) -> ExportSummary:
    """Write the selected keys to ``out`` as JSON Lines; returns how many of each store."""
    start = time.monotonic()
    counts = {"task": 0, "dag_run": 0, "asset": 0}
    lines: list[str] = []
    for record in export_records(store, filt):
        counts[record["store"]] += 1
        lines.append(encode_line(record))
        if len(lines) == FETCH:
            out.write("\n".join(lines) + "\n")
            lines.clear()
    if lines:
        out.write("\n".join(lines) + "\n")
    return ExportSummary(counts["task"], counts["asset"], time.monotonic() - start, counts["dag_run"])


EXPORT_MODE = 0o600  # a new export: owner-only, since it holds every value it selects


def export_file(store: Store, filt: KeyFilter, path: Path) -> ExportSummary:
    """Write the export to ``path`` atomically: a temporary file beside it, renamed over it when complete,
    so a failed or interrupted export never leaves a partial file where a complete one is expected.

    A new file is owner-only (0600) whatever the umask; a file of this user's that is replaced keeps its mode,
    less the setuid, setgid and sticky bits and write access for group and others. The path is refused (before
    anything is read) when it is a symbolic link, not a regular file, or another user's file (``export_mode``).
    The temporary file is made as ``mkstemp`` makes it (a new name, never through a link), and the rename
    replaces whatever is at ``path`` itself, never a link's target."""
    mode = export_mode(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".partial")
    except OSError as exc:
        raise InvalidInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    temporary = Path(name)
    try:
        with open(fd, "w", encoding="utf-8") as handle:
            summary = write_export(store, filt, handle)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return summary


def export_mode(path: Path) -> int:
    """The mode the export at ``path`` gets: 0600 for a new file; an existing file's without its special bits
    (setuid, setgid, sticky) and without write access for group and others. Refuses (``InvalidInputError``)
    a path whose file this user would not own or whose link it would not write: a symbolic link, a directory or
    other non-file (a device: the rename would put a file in its place), another user's file."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return EXPORT_MODE
    except OSError as exc:
        raise _refuse_export(path, f"cannot be read ({exc.strerror or exc}); give another path") from None
    if stat.S_ISLNK(found.st_mode):
        raise _refuse_export(
            path, "is a symbolic link, which an export never writes through; remove it or give the path of a new file"
        )
    if stat.S_ISDIR(found.st_mode):
        raise _refuse_export(path, "is a directory; give the path of a file in it")
    if not stat.S_ISREG(found.st_mode):
        raise _refuse_export(path, "is not a regular file, which an export would replace; give the path of a new file")
    if found.st_uid != os.geteuid():
        raise _refuse_export(
            path,
            f"is owned by another user (uid {found.st_uid}); an export replaces only this user's files: remove it "
            "or give the path of a new file",
        )
    return stat.S_IMODE(found.st_mode) & 0o755


def _refuse_export(path: Path, problem: str) -> InvalidInputError:
    return InvalidInputError(f"export file {path}: {problem}")


# -- import --------------------------------------------------------------------------------------------
class StoreCounts(NamedTuple):
    inserted: int = 0
    updated: int = 0


class ImportSummary(NamedTuple):
    dry_run: bool
    lines: int
    batches: int
    batch_size: int
    task: StoreCounts
    asset: StoreCounts
    dag_runs_created: int
    assets_created: int
    elapsed: float
    dag_run: StoreCounts = StoreCounts()  # dag-run keys (Airflow 3.4)

    @property
    def keys(self) -> int:
        return sum(self.task) + sum(self.dag_run) + sum(self.asset)


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
    metastore = store.metastore_backend("`import`")
    importer = _Importer(metastore, store.settings.max_value_storage_bytes, dry_run)
    importer.on_progress = on_progress
    try:
        return importer.run(lines, batch_size)
    except BadRecord as exc:
        raise InvalidInputError(f"{exc}; {importer.done()}") from None
    except StateStoreError as exc:
        raise type(exc)(f"{exc.template}; {importer.done()}", parameter=exc.parameter) from None
    except KeyboardInterrupt:
        raise InterruptedByUser(f"interrupted; {importer.done()}") from None


class _Importer:
    def __init__(self, backend: MetastoreBackend, max_value_bytes: int, dry_run: bool) -> None:
        self.backend = backend
        self.engine = backend.engine
        self.dialect = self.engine.dialect.name
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
        self.task_statements: tuple[Any, str] | None = None  # (existence query, upsert), for the layout
        self.dag_run_statements: tuple[Any, str] | None = None
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
        mysql = self.dialect in _MYSQL
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
        if self.dialect in _MYSQL:
            _refuse_twin_lines(list(tasks.values()), list(dag_runs.values()), list(assets.values()))
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
        stored = _stored(conn, present, list(wanted))
        if self.dialect in _MYSQL:
            names = ("dag_run", "task_id", *(("region_id",) if regions else ()), "map_index", "key")
            _refuse_stored_twins(stored, wanted, names, _task_key)
        updated = sum(1 for identity in stored if identity in wanted)
        if not self.dry_run:
            moment = _binder(self.dialect)
            region = self._region_binder(conn)
            params = [
                (
                    k[0],
                    r.task_id,
                    *region(r.region_id),
                    r.map_index,
                    r.key,
                    r.dag_id,
                    r.run_id,
                    r.value,
                    moment(r.updated_at),
                    moment(r.expires_at),
                )
                for k, r in zip(known, rows, strict=True)
            ]
            self._write(conn, upsert, params, rows)
        return StoreCounts(len(rows) - updated, updated)

    def _task_statements(self, conn: Connection) -> tuple[Any, str]:
        """The existence query and the upsert of task rows, built once for the database's layout: both on
        its whole unique key, the region included where it has regions."""
        if self.task_statements is None:
            layout = layout_of(conn, "write")
            task = layout.task
            identity = tuple(task.c[k] for k in layout.task_identity)
            present = select(*identity).where(*(_in(c, f"v{i}") for i, c in enumerate(identity)))
            self.task_statements = (present, _task_upsert(self.dialect, layout, qualified(conn, task.name)))
        return self.task_statements

    def _region_binder(self, conn: Connection) -> Callable[[Any], tuple[Any, ...]]:
        """A row's region as the driver takes it (nothing where the table has no region)."""
        layout = layout_of(conn)
        if not layout.has_region:
            return lambda region: ()
        processor = layout.task.c.region_id.type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
        if processor is None:
            return lambda region: (region,)
        return lambda region: (processor(region),)

    # -- dag-run keys --------------------------------------------------------------------------------
    def _dag_runs(
        self, conn: Connection, rows: list[DagRunRow], runs: dict[tuple[str, str], int | None]
    ) -> StoreCounts:
        known = [(runs[(r.dag_id, r.run_id)], r.key) for r in rows]
        wanted = {k: r for k, r in zip(known, rows, strict=True) if k[0] is not None}
        present, upsert = self._dag_run_statements(conn)
        stored = _stored(conn, present, list(wanted))
        if self.dialect in _MYSQL:
            _refuse_stored_twins(stored, wanted, ("dag_run", "key"), _dag_run_key, fold=_casefold)
        updated = sum(1 for identity in stored if identity in wanted)
        if not self.dry_run:
            moment = _binder(self.dialect)
            params = [
                (k[0], r.key, r.dag_id, r.run_id, r.value, moment(r.updated_at), moment(r.expires_at))
                for k, r in zip(known, rows, strict=True)
            ]
            self._write(conn, upsert, params, rows)
        return StoreCounts(len(rows) - updated, updated)

    def _dag_run_statements(self, conn: Connection) -> tuple[Any, str]:
        """The existence query and the upsert of dag-run rows (``_check_layout`` saw the table exists)."""
        if self.dag_run_statements is None:
            table = dag_run_store(conn)
            identity = (table.c.dag_run_id, table.c.key)
            present = select(*identity).where(*(_in(c, f"v{i}") for i, c in enumerate(identity)))
            columns = ("dag_run_id", "key", "dag_id", "run_id", "value", "updated_at", "expires_at")
            upsert = _upsert_sql(self.dialect, qualified(conn, table.name), columns, columns[:2], columns[-3:])
            self.dag_run_statements = (present, upsert)
        return self.dag_run_statements

    # -- dag runs ------------------------------------------------------------------------------------
    def _run_ids(
        self, conn: Connection, rows: Sequence[TaskRow | DagRunRow]
    ) -> tuple[dict[tuple[str, str], int | None], int]:
        """Each run's ``dag_run.id`` (None: a dry run would create it) and how many runs were created."""
        first = _first_rows(rows, lambda r: (r.dag_id, r.run_id))
        ids = self._stored_parents(conn, first, _find_runs, ("dag_id", "run_id"), _dag_run)
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
        runs = _insert_missing(self.dialect, qualified(conn, dag_run.name), ("dag_id", "run_id"))
        conn.exec_driver_sql(runs, missing)
        created = set(missing)
        found = {run: pk for run, pk in _find_runs(conn, created) if run in created}
        if len(found) != len(missing):
            raise BackendError("creating the dag runs of the imported keys left some of them missing")
        return ids | found, len(missing)

    # -- asset keys ----------------------------------------------------------------------------------
    def _assets(self, conn: Connection, rows: list[AssetRow]) -> tuple[StoreCounts, int]:
        ids, created = self._asset_ids(conn, rows)
        known = [(ids[(r.name, r.uri)], r.key) for r in rows]
        wanted = {k: r for k, r in zip(known, rows, strict=True) if k[0] is not None}
        stored = _stored(conn, _ASSETS_PRESENT, list(wanted))
        if self.dialect in _MYSQL:
            _refuse_stored_twins(stored, wanted, ("asset", "key"), _asset_key)
        updated = sum(1 for identity in stored if identity in wanted)
        if not self.dry_run:
            moment = _binder(self.dialect)
            params = [
                (k[0], r.key, r.value, moment(r.updated_at), *r.updated_by)  # as _ASSET_COLUMNS
                for k, r in zip(known, rows, strict=True)
            ]
            self._write(conn, _asset_upsert(self.dialect, qualified(conn, _asset_kv.name)), params, rows)
        return StoreCounts(len(rows) - updated, updated), created

    def _asset_ids(self, conn: Connection, rows: list[AssetRow]) -> tuple[dict[tuple[str, str], int | None], int]:
        first = _first_rows(rows, lambda r: (r.name, r.uri))
        ids = self._stored_parents(conn, first, _find_assets, ("name", "uri"), _asset)
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
            _check_no_clash(conn, name, uri, first[(name, uri)].line)
            self._check_new_asset(name, uri, first[(name, uri)].line)
        if self.dry_run:
            fresh = [pair for pair in missing if pair not in self.new_assets]
            self.new_assets.update(fresh)
            return ids | dict.fromkeys(missing), len(fresh)
        for table in (asset, asset_active):
            conn.exec_driver_sql(_insert_missing(self.dialect, qualified(conn, table.name), ("name", "uri")), missing)
        created = set(missing)
        found = {pair: pk for pair, pk in _find_assets(conn, created) if pair in created}
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
        if self.dialect in _MYSQL:
            _refuse_stored_twins(found, first, names, what)
        return {parent: pk for parent, pk in found.items() if parent in first}

    # -- writing -------------------------------------------------------------------------------------
    def _write(self, conn: Connection, statement: str, params: list[tuple[Any, ...]], rows: Sequence[Any]) -> None:
        count = conn.exec_driver_sql(statement, params).rowcount
        # MySQL counts 1 for an inserted row and 2 for an updated one (1 when nothing changed: SQLAlchemy
        # connects with CLIENT_FOUND_ROWS); the others count 1 for each row written either way.
        low, high = (len(params), 2 * len(params)) if self.dialect in _MYSQL else (len(params), len(params))
        if count is None or not low <= count <= high:
            first, last = min(r.line for r in rows), max(r.line for r in rows)
            raise BackendError(
                f"writing the {len(params):,} keys of lines {first}-{last} reported {count} rows written; "
                "the batch was rolled back"
            )


def _find_runs(conn: Connection, runs: Iterable[tuple[str, str]]) -> Iterator[tuple[tuple[str, str], int]]:
    """Every run whose dag id is one of ``runs``' and run id one of theirs: a superset of ``runs``, with
    on MySQL the runs differing from them only in trailing spaces; the caller picks the exact ones."""
    wanted = set(runs)
    params = {"dag_ids": sorted({d for d, _ in wanted}), "run_ids": sorted({r for _, r in wanted})}
    for run_pk, dag_id, run_id in conn.execute(_FIND_RUNS, params):
        yield (dag_id, run_id), int(run_pk)


def _find_assets(conn: Connection, pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[tuple[str, str], int]]:
    """As ``_find_runs``, for assets by name and uri."""
    wanted = set(pairs)
    params = {"names": sorted({n for n, _ in wanted}), "uris": sorted({u for _, u in wanted})}
    for asset_pk, name, uri in conn.execute(_FIND_ASSETS, params):
        yield (name, uri), int(asset_pk)


def _first_rows(rows: Sequence[Any], parent: Callable[[Any], tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """Each dag run (or asset) of ``rows`` with the first row that names it."""
    first: dict[tuple[str, str], Any] = {}
    for r in rows:
        first.setdefault(parent(r), r)
    return first


# What a refused import line was writing, for the error.
def _dag_run(row: TaskRow | DagRunRow) -> str:
    return f"dag run dag_id={row.dag_id!r} run_id={row.run_id!r}"


def _task_key(row: TaskRow) -> str:
    region = f" region_id={row.region_id}" if row.region_id != NIL_REGION else ""
    return (
        f"key {row.key!r} for dag_id={row.dag_id} run_id={row.run_id} task_id={row.task_id} map_index={row.map_index}"
        + region
    )


def _dag_run_key(row: DagRunRow) -> str:
    return f"key {row.key!r} for dag run dag_id={row.dag_id} run_id={row.run_id}"


def _asset(row: AssetRow) -> str:
    return f"asset name={row.name!r} uri={row.uri!r}"


def _asset_key(row: AssetRow) -> str:
    return f"key {row.key!r} for asset name={row.name} uri={row.uri}"


def _refuse_twin_lines(tasks: Sequence[TaskRow], dag_runs: Sequence[DagRunRow], assets: Sequence[AssetRow]) -> None:
    """MySQL/MariaDB: refuse a batch with two lines whose runs, assets or keys differ only in trailing
    spaces, which a unique index there takes for one row (the later line would overwrite the earlier)."""
    _twin_lines([*tasks, *dag_runs], lambda r: (r.dag_id, r.run_id), ("dag_id", "run_id"), _dag_run)
    names = ("dag_id", "run_id", "task_id", "region_id", "map_index", "key")
    _twin_lines(tasks, lambda r: (r.dag_id, r.run_id, r.task_id, r.region_id, r.map_index, r.key), names, _task_key)
    _twin_lines(dag_runs, lambda r: (r.dag_id, r.run_id, r.key), ("dag_id", "run_id", "key"), _dag_run_key)
    _twin_lines(assets, lambda r: (r.name, r.uri), ("name", "uri"), _asset)
    _twin_lines(assets, lambda r: (r.name, r.uri, r.key), ("name", "uri", "key"), _asset_key)


def _twin_lines(
    rows: Sequence[Any], identity: Callable[[Any], tuple[Any, ...]], names: Sequence[str], what: Callable[[Any], str]
) -> None:
    seen: dict[tuple[Any, ...], Any] = {}
    for row in sorted(rows, key=lambda r: r.line):
        mine = identity(row)
        first = seen.setdefault(padless(mine), row)
        if identity(first) != mine:
            raise BadRecord(row.line, twin_problem(what(row), names, mine, identity(first), f"line {first.line}'s"))


def _refuse_stored_twins(
    stored: Iterable[tuple[Any, ...]],
    wanted: dict[Any, Any],
    names: Sequence[str],
    what: Callable[[Any], str],
    fold: Callable[[tuple[Any, ...]], tuple[Any, ...]] = padless,
) -> None:
    """MySQL/MariaDB: refuse a line (``wanted``: identity -> its row) whose identity differs from a stored
    one only in trailing spaces (``fold``: or in what else the column's collation ignores); its ``IN``
    lookup, compared as the unique index compares, returned that one."""
    extra = [identity for identity in stored if identity not in wanted]
    if not extra:
        return
    by_folded = {fold(identity): (identity, row) for identity, row in wanted.items()}
    for identity in extra:
        hit = by_folded.get(fold(identity))
        if hit is not None and padless(hit[0]) == padless(identity):
            raise BadRecord(hit[1].line, twin_problem(what(hit[1]), names, hit[0], identity))
        if hit is not None:
            raise BadRecord(
                hit[1].line,
                f"cannot write {what(hit[1])}: it and the stored key {identity[-1]!r} are one in the database's "
                "unique index (its collation ignores letter case), so they cannot be stored apart",
            )


def _casefold(identity: tuple[Any, ...]) -> tuple[Any, ...]:
    """An identity as a case-insensitive PAD SPACE index sees it, near enough: texts folded, spaces gone
    from their ends (Airflow 3.4's ``dag_run_state_store.key`` may have such a collation on MySQL)."""
    return tuple(v.casefold() if isinstance(v, str) else v for v in padless(identity))


def _check_no_clash(conn: Connection, name: str, uri: str, line: int) -> None:
    """A new asset may not share its name or its uri with an active asset (Airflow's rule)."""
    clash = conn.execute(_CLASH, {"name": name, "uri": uri}).first()
    if clash is not None:
        raise BadRecord(
            line,
            f"asset name={name} uri={uri} clashes with the active asset name={clash.name} uri={clash.uri}: "
            "an active asset's name and uri are each unique",
        )


def _stored(conn: Connection, query: Any, identities: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    """The stored rows (values of a store's unique columns, as ``query`` selects them) among which are
    those of ``identities``: the caller picks the exact matches (and on MySQL the trailing-space twins).

    One query per ``LOOKUP`` keys: each column ``IN`` the chunk's values, which every engine answers from
    the unique index (a row-value ``IN`` list makes SQLite scan the whole table)."""
    found: set[tuple[Any, ...]] = set()  # a set: the lists of two chunks may both match a row
    ordered = sorted(set(identities))
    for start in range(0, len(ordered), LOOKUP):
        chunk = ordered[start : start + LOOKUP]
        params = {f"v{i}": sorted({identity[i] for identity in chunk}) for i in range(len(chunk[0]))}
        found.update(tuple(row) for row in conn.execute(query, params))
    return found


def _binder(dialect: str) -> Callable[[datetime | None], Any]:
    """A UTC instant as each engine stores it: SQLite text ``YYYY-MM-DD HH:MM:SS.ffffff`` (what Airflow
    writes and compares as text), naive UTC on MySQL (sessions run at +00:00), aware on PostgreSQL."""
    if dialect == "sqlite":
        return lambda m: None if m is None else m.replace(tzinfo=None).isoformat(" ", "microseconds")
    if dialect in _MYSQL:
        return lambda m: None if m is None else m.replace(tzinfo=None)
    return lambda m: m


def _insert_missing(dialect: str, table: str, columns: Sequence[str]) -> str:
    """Insert a row unless one with the same unique values exists, for ``executemany``."""
    marks = ", ".join(["?" if dialect == "sqlite" else "%s"] * len(columns))
    if dialect in _MYSQL:
        return f"INSERT IGNORE INTO {table} ({', '.join(columns)}) VALUES ({marks})"
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) ON CONFLICT DO NOTHING"


def _quoted_key(dialect: str) -> str:
    return "`key`" if dialect in _MYSQL else '"key"'


def _upsert_sql(
    dialect: str, table: str, columns: Sequence[str], conflict: Sequence[str], update: Sequence[str]
) -> str:
    """One row's ``INSERT ... ON CONFLICT DO UPDATE`` (``ON DUPLICATE KEY UPDATE`` on MySQL), for
    ``executemany``: PyMySQL turns it into multi-row inserts, the other drivers run it per row."""
    key = _quoted_key(dialect)
    names = [key if c == "key" else c for c in columns]
    marks = ", ".join(["?" if dialect == "sqlite" else "%s"] * len(columns))
    head = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})"
    if dialect in _MYSQL:
        return head + " ON DUPLICATE KEY UPDATE " + ", ".join(f"{c} = VALUES({c})" for c in update)
    targets = ", ".join(key if c == "key" else c for c in conflict)
    return head + f" ON CONFLICT ({targets}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in update)


def _task_upsert(dialect: str, layout: Layout, table: str) -> str:
    """The task rows' upsert into ``table`` (its name, qualified as it must be), with the layout's names,
    conflicting on its whole unique key (the region included where it has one)."""
    task = layout.task
    keys = (*layout.task_identity[:-2], "map_index", "key", "dag_id", "run_id", "value", "updated_at", "expires_at")
    columns = tuple(task.c[k].name for k in keys)
    conflict = tuple(task.c[k].name for k in layout.task_identity)
    return _upsert_sql(dialect, table, columns, conflict, ("value", "updated_at", "expires_at"))


# The asset rows' upsert: each parameter row is these columns' values (``updated_by`` in the order of
# ``ASSET_WRITER_FIELDS``, as records.AssetRow holds it).
_ASSET_COLUMNS = ("asset_id", "key", "value", "updated_at", *ASSET_WRITER_COLUMNS)


def _asset_upsert(dialect: str, table: str) -> str:
    return _upsert_sql(dialect, table, _ASSET_COLUMNS, ("asset_id", "key"), _ASSET_COLUMNS[2:])
