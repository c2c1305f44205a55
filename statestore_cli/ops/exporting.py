"""Bulk export of both stores as JSON Lines (the format is in ``statestore_cli.ops.records``).

``export_records`` streams the keys a ``KeyFilter`` selects, in ``list``'s order, a thousand rows per fetch
from a server-side cursor, so memory stays flat whatever the store's size; ``export_file`` writes them to a
file atomically, owner-only.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from sqlalchemy import String, select, type_coerce
from sqlalchemy.engine import Connection, Engine

from statestore_cli.backends.metastore import dag_run_store, run_filters, stores_selected, task_filters
from statestore_cli.backends.store import Store
from statestore_cli.db.database import translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import layout_of
from statestore_cli.db.schema import ASSET_WRITER_COLUMNS, asset, asset_state_store
from statestore_cli.errors import BackendError, InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops.records import asset_record, dag_run_record, encode_line, load_strict, task_record

_asset_kv = asset_state_store
FETCH = 1000  # rows per fetch of an export: as fast as larger fetches, a few MB at most held


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
    if store.api_mode:
        from statestore_cli.ops.api_walks import export_records as walked

        return walked(store.api_backend(), filt)
    engine = store.metastore_backend("`export`").engine
    impl_of(engine).check_asset_text(filt.name, filt.uri)
    return _records(engine, filt)


def _records(engine: Engine, filt: KeyFilter) -> Iterator[dict[str, Any]]:
    with translate_errors(engine), engine.connect() as conn:
        impl_of(conn).read_one_snapshot(conn)  # both stores from one snapshot, however long the export takes
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
