"""``diff``: the keys of the store against an export file, both read as streams in one key order.

What is compared: a key's identity (its store, scope and key) and, for a key on both sides, its value and
its expiry. A value is compared as JSON (key order, spacing and escapes do not count; numbers do as
written: ``1`` and ``1.0`` differ); ``updated_at`` and an asset key's ``updated_by`` say when and by whom
a key was written, not what it holds, and are not compared. Like ``export``, the store side is what the
rows hold: with a worker-side backend that is the reference the row keeps, not the value it points to.

The order: a key's identity as Python sorts it (``sort_key``: the store as ``export`` orders them, then
the scope and key, text by code point). The store is read in that order (``EngineImpl.code_point_order``),
a thousand rows per fetch from a server-side cursor, and merged with the file as it is read, each line
parsed and checked. The differences are held (``_Held``: in memory, then in a file) until the whole file
has been read: a bad line is an error with nothing shown, and a file that turns out not to be in that
order has shown nothing before it is sorted. An export is in that order on SQLite, not on PostgreSQL or
MySQL, whose collations order text by language (and ``clean --backup`` writes its rows in batches, not by
key): such a file is sorted outside memory and merged again, from the start: runs of at most
``RUN_LINES`` lines sorted and written to a private temporary folder, then merged. Memory stays flat
either way; standard input is copied to that folder first, since it may have to be read twice.

A key given twice in the file counts as its later line says, as ``import`` would leave it.

Through the REST API (``--api-url``) the store's side is what ``export`` walks, read back as a file's lines are
and sorted in memory once: the API has no order to stream it in.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from sqlalchemy import String, select, type_coerce
from sqlalchemy.engine import Connection

from statestore_cli.backends.api_backend import ApiBackend
from statestore_cli.backends.key_conditions import dag_run_store, run_filters, stores_selected, task_filters
from statestore_cli.backends.store import Store
from statestore_cli.db.database import translate_errors
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import Layout, layout_of
from statestore_cli.db.schema import asset, asset_state_store
from statestore_cli.errors import BackendError, InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import NIL_REGION, AssetScope
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops.external_sort import external_sort
from statestore_cli.ops.records import (
    AssetRow,
    BadRecord,
    DagRunRow,
    TaskRow,
    encode_line,
    load_strict,
    parse_line,
    read_lines,
)

FETCH = 1000  # rows per fetch from the store, as export reads them
RUN_LINES = 20_000  # lines of an unsorted file sorted in memory at a time
RUN_BYTES = 32 << 20  # ... or fewer, when their text is larger than this
HELD = 10_000  # differences held in memory until the file has been read whole; more go to a file
STORE_RANK = {"task": 0, "dag_run": 1, "asset": 2}  # the stores in export's order
_NIL = str(NIL_REGION)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


class Side(NamedTuple):
    """A key as one side holds it: its place in the order, its identity (the export's fields, in their
    order, without timestamps and value), its value as JSON text and its expiry as ISO 8601 UTC."""

    sort: tuple[Any, ...]
    identity: dict[str, Any]
    value: str
    expires_at: str | None


class Difference(NamedTuple):
    """``added``: in the store, not in the file; ``removed``: in the file, not in the store; ``changed``:
    in both, with ``fields`` (value, expires_at) not the same."""

    change: str
    identity: dict[str, Any]
    fields: tuple[str, ...] = ()


class DiffSummary(NamedTuple):
    added: int
    removed: int
    changed: int
    same: int
    sorted_file: bool  # the file was in key order (merged as read; else sorted first)
    elapsed: float

    @property
    def differences(self) -> int:
        return self.added + self.removed + self.changed

    @property
    def exit_code(self) -> int:
        """As diff(1): 0 when the two are the same, 1 when they differ."""
        return 1 if self.differences else 0


class _Counts:
    def __init__(self) -> None:
        self.added = self.removed = self.changed = self.same = 0
        self.sorted_file = True


class DiffRun:
    """One diff: ``differences()`` yields them in key order; ``summary()`` after it is exhausted."""

    def __init__(self, store: Store, filt: KeyFilter, source: str, stdin: IO[bytes] | None = None) -> None:
        self.api = store.api_backend() if store.api_mode else None
        self.engine = None if self.api is not None else store.metastore_backend("`diff`").engine
        if self.engine is not None:
            impl_of(self.engine).check_asset_text(filt.name, filt.uri)
        self.walked: list[Side] | None = None  # through the REST API: the store's keys, walked once, sorted
        self.filt = filt
        self.source = source
        self.stdin = stdin
        self.max_value_bytes = store.settings.max_value_storage_bytes
        self.counts = _Counts()
        self.start = time.monotonic()

    def summary(self) -> DiffSummary:
        c = self.counts
        return DiffSummary(c.added, c.removed, c.changed, c.same, c.sorted_file, time.monotonic() - self.start)

    def differences(self) -> Iterator[Difference]:
        errors = translate_errors(self.engine) if self.engine is not None else contextlib.nullcontext()
        with tempfile.TemporaryDirectory(prefix="statestore-diff-") as name, errors:
            folder = Path(name)
            stream = self._open(folder)
            try:
                wanted = _file_wanted(self._file_filter())
                held = _Held(folder)
                try:
                    with self._stored() as stored:
                        for difference in self._merge(stored, _last_of_each(self._in_order(stream, wanted))):
                            held.add(difference)
                except _OutOfOrder:
                    held.close()
                else:  # every line read and checked: nothing was shown before that
                    yield from held.replay()
                    return
                self.counts = _Counts()
                self.counts.sorted_file = False
                stream.seek(0)
                filed = _last_of_each(
                    external_sort(self._numbered(stream, wanted), folder, self._reread, RUN_LINES, RUN_BYTES)
                )
                with self._stored() as stored:
                    yield from self._merge(stored, filed)
            finally:
                stream.close()

    @contextlib.contextmanager
    def _stored(self) -> Iterator[Iterator[Side]]:
        """The store's keys in the diff's order: read from one snapshot of the database, or through the REST
        API walked once (as ``export`` walks it) and sorted in memory."""
        if self.api is not None:
            if self.walked is None:
                self.walked = sorted(_api_sides(self.api, self.filt), key=lambda side: side.sort)
            yield iter(self.walked)
            return
        assert self.engine is not None
        conn = self.engine.connect()
        with impl_of(conn).read_one_snapshot(conn) as snapshot:  # every store from one snapshot
            yield _checked_order(_store_sides(snapshot, self.filt))

    # -- the file ---------------------------------------------------------------------------------------
    def _open(self, folder: Path) -> IO[bytes]:
        """The file, opened for reading twice: standard input is copied into ``folder`` first."""
        if self.source != "-":
            try:
                return open(self.source, "rb")
            except OSError as exc:
                raise InvalidInputError(f"cannot read {self.source}: {exc.strerror or exc}") from None
        if self.stdin is None:
            raise InvalidInputError("no standard input to read; give the path of an export file")
        fd = os.open(folder / "stdin.jsonl", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        copy = open(fd, "w+b")  # noqa: SIM115  (closed by the caller)
        shutil.copyfileobj(self.stdin, copy, 1 << 20)
        copy.seek(0)
        return copy

    def _file_filter(self) -> KeyFilter:
        """The filter as the file's lines can be held to: an asset id (which differs from one database to
        the next and is not in the file) becomes that asset's name and uri here."""
        filt = self.filt
        if filt.asset_id is None:
            return filt
        if self.api is not None:
            named = self.api.asset_of(AssetScope(asset_id=filt.asset_id))
            found = None if named is None else named[1:]
        else:
            assert self.engine is not None
            with self.engine.connect() as conn:
                found = conn.execute(select(asset.c.name, asset.c.uri).where(asset.c.id == filt.asset_id)).first()
        if found is None:  # no such asset: no key of the file is its
            return filt._replace(name="", uri="")
        name, uri = found
        if (filt.name is not None and filt.name != name) or (filt.uri is not None and filt.uri != uri):
            return filt._replace(name="", uri="")
        return filt._replace(name=name, uri=uri)

    def _rows(self, stream: IO[bytes]) -> Iterator[tuple[int, bytes | str, TaskRow | DagRunRow | AssetRow]]:
        for number, text in enumerate(read_lines(stream, self.max_value_bytes), 1):
            row = self._parse(number, text)
            if row is not None:
                yield number, text, row

    def _parse(self, number: int, text: bytes | str) -> TaskRow | DagRunRow | AssetRow | None:
        if isinstance(text, bytes):
            # Text is parsed with a decoder made once, bytes with one per line; bad UTF-8: parse_line says so.
            with contextlib.suppress(UnicodeDecodeError):
                text = text.decode("utf-8")
        try:
            return parse_line(number, text, self.max_value_bytes)
        except BadRecord as exc:
            raise InvalidInputError(
                f"{self._name()} {exc}; no difference is shown for a file with a bad line"
            ) from None

    def _name(self) -> str:
        return "standard input" if self.source == "-" else self.source

    def _in_order(self, stream: IO[bytes], wanted: Callable[[Any], bool]) -> Iterator[Side]:
        """The lines the filter selects, as long as they are in key order (``_OutOfOrder`` at the first
        that is not)."""
        last: tuple[Any, ...] | None = None
        for _number, _text, row in self._rows(stream):
            if wanted(row):
                side = _file_side(row)
                if last is not None and side.sort < last:
                    raise _OutOfOrder
                last = side.sort
                yield side

    def _numbered(
        self, stream: IO[bytes], wanted: Callable[[Any], bool]
    ) -> Iterator[tuple[tuple[Any, ...], int, bytes]]:
        for number, text, row in self._rows(stream):
            if wanted(row):
                raw = text if isinstance(text, bytes) else text.encode("utf-8")
                yield sort_key(row), number, raw

    def _reread(self, number: int, text: bytes) -> Side:
        row = self._parse(number, text)
        assert row is not None  # checked by the first pass
        return _file_side(row)

    # -- the merge --------------------------------------------------------------------------------------
    def _merge(self, stored: Iterator[Side], filed: Iterator[Side]) -> Iterator[Difference]:
        counts = self.counts
        s, f = next(stored, None), next(filed, None)
        while s is not None or f is not None:
            if f is None or (s is not None and s.sort < f.sort):
                assert s is not None
                counts.added += 1
                yield Difference("added", s.identity)
                s = next(stored, None)
            elif s is None or f.sort < s.sort:
                counts.removed += 1
                yield Difference("removed", f.identity)
                f = next(filed, None)
            else:
                fields = _changed(s, f)
                if fields:
                    counts.changed += 1
                    yield Difference("changed", s.identity, fields)
                else:
                    counts.same += 1
                s, f = next(stored, None), next(filed, None)


class _OutOfOrder(Exception):
    """The file is not in key order: it is sorted before it is merged."""


class _Held:
    """Differences kept until the whole file has been read and checked (a bad line or a file out of order
    shows none): the first ``HELD`` in memory, the rest in a file in the private folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "differences.jsonl"
        self.items: list[Difference] = []
        self.file: IO[str] | None = None

    def add(self, difference: Difference) -> None:
        self.items.append(difference)
        if len(self.items) >= HELD:
            self._spill()

    def _spill(self) -> None:
        if self.file is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            self.file = open(fd, "w+", encoding="utf-8")  # noqa: SIM115  (closed by replay or close)
        for d in self.items:
            self.file.write(json.dumps([d.change, d.identity, d.fields]) + "\n")
        self.items.clear()

    def replay(self) -> Iterator[Difference]:
        if self.file is not None:
            self.file.seek(0)
            for line in self.file:
                change, identity, fields = json.loads(line)
                yield Difference(change, identity, tuple(fields))
            self.close()
        yield from self.items

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        self.items.clear()


def sort_key(row: TaskRow | DagRunRow | AssetRow) -> tuple[Any, ...]:
    """A file line's key in the diff's order."""
    if isinstance(row, TaskRow):
        return (0, row.dag_id, row.run_id, row.task_id, str(row.region_id), row.map_index, row.key)
    if isinstance(row, DagRunRow):
        return (1, row.dag_id, row.run_id, row.key)
    return (2, row.name, row.uri, row.key)


def _file_side(row: TaskRow | DagRunRow | AssetRow) -> Side:
    if isinstance(row, TaskRow):
        identity: dict[str, Any] = {"store": "task", "dag_id": row.dag_id, "run_id": row.run_id, "task_id": row.task_id}
        if row.region_id != NIL_REGION:
            identity["region_id"] = str(row.region_id)
        identity |= {"map_index": row.map_index, "key": row.key}
    elif isinstance(row, DagRunRow):
        identity = {"store": "dag_run", "dag_id": row.dag_id, "run_id": row.run_id, "key": row.key}
    else:
        identity = {"store": "asset", "name": row.name, "uri": row.uri, "key": row.key}
    expires = getattr(row, "expires_at", None)
    return Side(sort_key(row), identity, row.value, None if expires is None else iso_utc(expires))


def _api_sides(backend: ApiBackend, filt: KeyFilter) -> Iterator[Side]:
    """The keys ``filt`` selects through the REST API, as an export writes them, each read back as a file's
    line is: the two sides of a diff through the API are made alike."""
    from statestore_cli.ops.api_walks import export_records

    for record in export_records(backend, filt):
        row = parse_line(0, encode_line(record), 0)
        assert row is not None
        yield _file_side(row)


def _file_wanted(filt: KeyFilter) -> Callable[[TaskRow | DagRunRow | AssetRow], bool]:
    """Whether a file line is one the filter selects, as the store's keys are selected (``list``'s
    filters); a dag-run line is selected whether or not the database has a dag-run store."""
    task_only = filt.task_id is not None or filt.map_index is not None or bool(filt.region_id and filt.region_id.int)

    def same(row: Any, names: Iterable[tuple[str, str]]) -> bool:
        return all(getattr(filt, mine) is None or getattr(filt, mine) == getattr(row, theirs) for mine, theirs in names)

    def wanted(row: TaskRow | DagRunRow | AssetRow) -> bool:
        if isinstance(row, TaskRow):
            if filt.store not in (None, "task") or filt.has_asset_fields:
                return False
            if filt.region_id is not None and row.region_id != filt.region_id:
                return False
            names = (("dag_id", "dag_id"), ("run_id", "run_id"), ("task_id", "task_id"), ("map_index", "map_index"))
            return same(row, (*names, ("key", "key")))
        if isinstance(row, DagRunRow):
            if filt.store not in (None, "dag_run") or filt.has_asset_fields or task_only:
                return False
            return same(row, (("dag_id", "dag_id"), ("run_id", "run_id"), ("key", "key")))
        if filt.store not in (None, "asset") or filt.has_task_fields:
            return False
        return same(row, (("name", "name"), ("uri", "uri"), ("key", "key")))

    return wanted


def _last_of_each(sides: Iterator[Side]) -> Iterator[Side]:
    """Of lines with the same key (in order, so side by side), the last: as an import would leave it."""
    held: Side | None = None
    for side in sides:
        if held is not None and held.sort != side.sort:
            yield held
        held = side
    if held is not None:
        yield held


# -- the store ----------------------------------------------------------------------------------------
def _raw(column: Any) -> Any:
    # The driver's own value (SQLite text, a datetime elsewhere) skips SQLAlchemy's per-row parsing.
    return type_coerce(column, String)


def _store_sides(conn: Connection, filt: KeyFilter) -> Iterator[Side]:
    layout = layout_of(conn)
    for store in stores_selected(layout, filt):
        if store == "task":
            yield from _task_sides(conn, layout, filt)
        elif store == "dag_run":
            yield from _dag_run_sides(conn, filt)
        else:
            yield from _asset_sides(conn, filt)


def _task_sides(conn: Connection, layout: Layout, filt: KeyFilter) -> Iterator[Side]:
    task = layout.task
    impl = impl_of(conn)
    text = [task.c.dag_id, task.c.run_id, task.c.task_id]
    region = [task.c.region_id] if layout.has_region else []
    order = [
        *(impl.code_point_order(c) for c in text),
        *(impl.region_order(c) for c in region),
        task.c.map_index,
        impl.code_point_order(task.c.key),
    ]
    query = select(*text, task.c.map_index, task.c.key, _raw(task.c.expires_at), task.c.value, *region)
    query = query.where(*task_filters(layout, filt)).order_by(*order)
    for chunk in conn.execution_options(yield_per=FETCH).execute(query).partitions():
        for dag_id, run_id, task_id, map_index, key, expires_at, value, *in_region in chunk:
            where = str(in_region[0]) if in_region and in_region[0] is not None else _NIL
            identity: dict[str, Any] = {"store": "task", "dag_id": dag_id, "run_id": run_id, "task_id": task_id}
            if where != _NIL:
                identity["region_id"] = where
            identity |= {"map_index": map_index, "key": key}
            expiry = None if expires_at is None else iso_utc(expires_at)
            yield Side((0, dag_id, run_id, task_id, where, map_index, key), identity, value, expiry)


def _dag_run_sides(conn: Connection, filt: KeyFilter) -> Iterator[Side]:
    table = dag_run_store(conn)
    impl = impl_of(conn)
    shown = (table.c.dag_id, table.c.run_id, table.c.key)
    query = select(*shown, _raw(table.c.expires_at), table.c.value).where(*run_filters(table, filt))
    query = query.order_by(*(impl.code_point_order(c) for c in shown))
    for chunk in conn.execution_options(yield_per=FETCH).execute(query).partitions():
        for dag_id, run_id, key, expires_at, value in chunk:
            identity = {"store": "dag_run", "dag_id": dag_id, "run_id": run_id, "key": key}
            expiry = None if expires_at is None else iso_utc(expires_at)
            yield Side((1, dag_id, run_id, key), identity, value, expiry)


def _asset_sides(conn: Connection, filt: KeyFilter) -> Iterator[Side]:
    kv = asset_state_store
    impl = impl_of(conn)
    query = select(asset.c.name, asset.c.uri, kv.c.key, kv.c.value).join(asset, asset.c.id == kv.c.asset_id)
    for column, wanted in ((asset.c.id, filt.asset_id), (asset.c.name, filt.name), (asset.c.uri, filt.uri)):
        if wanted is not None:
            query = query.where(column == wanted)
    if filt.key is not None:
        query = query.where(kv.c.key == filt.key)
    query = query.order_by(*(impl.code_point_order(c) for c in (asset.c.name, asset.c.uri, kv.c.key)))
    for chunk in conn.execution_options(yield_per=FETCH).execute(query).partitions():
        for name, uri, key, value in chunk:
            yield Side((2, name, uri, key), {"store": "asset", "name": name, "uri": uri, "key": key}, value, None)


def _checked_order(sides: Iterator[Side]) -> Iterator[Side]:
    """The store's keys, refused rather than compared wrongly should the database not return them in
    the diff's order (a collation the ordering did not foresee)."""
    last: tuple[Any, ...] | None = None
    for side in sides:
        if last is not None and side.sort <= last:
            raise BackendError(
                f"the database returned key {side.identity['key']!r} out of the order diff compares in; "
                "the store cannot be compared on this database"
            )
        last = side.sort
        yield side


# -- comparing ----------------------------------------------------------------------------------------
def _changed(stored: Side, filed: Side) -> tuple[str, ...]:
    fields: tuple[str, ...] = () if _same_json(stored.value, filed.value) else ("value",)
    if stored.expires_at != filed.expires_at:
        fields += ("expires_at",)
    return fields


def _same_json(stored: str, filed: str) -> bool:
    """Whether two JSON texts hold the same value (the file's as ``import`` would store it)."""
    return stored == filed or _canonical(stored) == _canonical(filed)


def _canonical(text: str) -> str:
    """JSON text with object keys sorted and no spacing; a text that is not JSON stays as it is."""
    try:
        return _CANONICAL.encode(load_strict(text))
    except ValueError:
        return text
