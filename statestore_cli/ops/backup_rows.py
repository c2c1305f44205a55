"""What a backed-up delete deletes (``clean``, ``clear``, ``assets sweep`` with ``--backup FILE``) and how its rows
become lines of the export format: a ``Selection`` of one store's rows, and its ``Lines``: built by the database
(one SQL expression per line on PostgreSQL, MySQL and MariaDB; the fields of each line, joined by ``copy_lines``,
where PostgreSQL sends them with ``COPY``), made from the columns as stored a chunk of rows at a time on SQLite
(``row_lines``), or made in Python from each row's record, as ``export`` makes them, where the database cannot
build a line (``Redo``). Values are written as stored, as ``export`` writes them: with a worker-side backend
they are its references. ``statestore_cli.ops.backup`` runs the batches that delete them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, NamedTuple

from sqlalchemy import JSON, String, Table, Text, case, cast, func, literal_column, null, type_coerce
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.mysql_text import MYSQL_ENGINES
from statestore_cli.db.schema import asset, asset_state_store
from statestore_cli.errors import BackendError
from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops import copy_lines, row_lines
from statestore_cli.ops.backup_file import BackupFile
from statestore_cli.ops.records import (
    asset_record,
    dag_run_record,
    encode_line,
    is_json,
    load_strict,
    task_record,
)


class Lines(NamedTuple):
    """How rows become lines: ``columns`` selected (or returned) after each row's ``order`` value, and ``make``,
    the line of such a row, None where the database could not build it (the batch is then made again from
    the rows in Python). ``copied``: on PostgreSQL with psycopg 3, the fields ``COPY`` sends instead and the
    text of the line around them (``copy_lines.Shape``). ``block``: the lines of a chunk of rows made at once,
    each ending in a line break, or None (as ``make``); preferred to ``make`` where given."""

    columns: Sequence[Any]
    make: Callable[[Any], str | None]
    copied: copy_lines.Shape | None = None
    block: Callable[[Sequence[Any]], str | None] | None = None

    def add(self, rows: Sequence[Any], backup: BackupFile) -> None:
        """Write the lines of ``rows``; raises ``Redo`` where one cannot be made (nothing of them written)."""
        if self.block is not None:
            text = self.block(rows)
            if text is None:
                raise Redo
            backup.add_lines(text)
            return
        made = list(map(self.make, rows))
        if None in made:
            raise Redo
        backup.add_many(made)  # type: ignore[arg-type]  # None ruled out just above


@dataclass(frozen=True, eq=False)  # compared (and hashed) by identity: it keys its compiled statements
class Selection:
    """What a backed-up delete deletes from one table, and how each row becomes a line.

    ``order`` is unique within ``where`` (a row id; an asset's key within its asset) and is walked upwards;
    ``where`` selects the rows and is re-checked by the delete; ``walk`` is the same selection written so that
    the engine walks ``order`` (see ``run_clear.run_keys``), ``where`` when None. ``columns`` and
    ``record`` make each row's export record in Python; ``lines``, where given, has the database build the
    lines instead (for a dialect; None: not there), much cheaper for the many rows of a clean."""

    table: Table
    order: Any
    where: ColumnElement[bool]
    columns: Sequence[Any]
    record: Callable[[Any], dict[str, Any]]  # a Row, unpacked
    walk: ColumnElement[bool] | None = None
    lock_of: Table | None = None  # PostgreSQL: lock only this table's rows (a query that joins another)
    primary_walk: bool = False  # MySQL/MariaDB: keep the walk on the primary key (``order`` is the id)
    source: Any = None  # what the rows are selected from, when not ``table`` alone (a join)
    tiebreak: Any = None  # ordered by after ``order`` when that is not unique (a one-statement run only)
    lines: Callable[[str], Lines | None] | None = None

    @property
    def walked(self) -> ColumnElement[bool]:
        """The selection as the engine walks ``order``: ``walk``, or ``where`` where none is given."""
        return self.walk if self.walk is not None else self.where

    def in_python(self) -> Lines:
        record = self.record
        return Lines(self.columns, lambda row: encode_line(record(row)))


class Redo(Exception):
    """The database could not build a line of the batch (a value that is not JSON, a timestamp in an unusual
    form): the batch is rolled back and made again from its rows, which says which key it is."""


def decoded(value: str, key: str, scope: Callable[[], str]) -> Any:
    """A stored value as the export writes it (the JSON it holds); a value that is not JSON stops the batch
    (rolled back: nothing of it deleted), since no import could read its line back."""
    try:
        return load_strict(value)
    except ValueError as exc:
        raise BackendError(
            f"the value of key {key!r} for {scope()} is not valid JSON ({getattr(exc, 'msg', exc)}), so it cannot "
            "be backed up; the batch was rolled back: fix or delete that key, or run without --backup"
        ) from None


# -- lines built by the database -------------------------------------------------------------------------------
# The export line of a task or dag-run key as one SQL expression (PostgreSQL, MySQL, MariaDB; SQLite's lines are
# made from its raw columns instead, ``_in_blocks``): the same fields in the same order, strings JSON-quoted by the
# engine (as Python quotes them; MariaDB writes hex digits in capitals), timestamps in ISO 8601 UTC, the stored
# value embedded as the JSON it is (line breaks in it, which valid JSON has only between its tokens, made spaces).
# On a server, Python's line for the same row would cost more than the delete itself.
def _text(sql: str) -> Any:
    return literal_column("'" + sql.replace("'", "''") + "'", String)


def _joined(dialect: str, parts: Sequence[Any]) -> Any:
    if dialect in MYSQL_ENGINES:
        return func.concat(*parts)
    out = parts[0]
    for part in parts[1:]:
        out = out.op("||")(part)
    return type_coerce(out, String)


def _quoted(dialect: str, column: Any) -> Any:
    """A text column as a JSON string."""
    if dialect == "postgresql":
        return cast(func.to_json(column), Text)
    return func.json_quote(column)


def _number(column: Any) -> Any:
    return cast(column, Text)


def _moment(dialect: str, column: Any) -> Any:
    """A timestamp column as a JSON string ``"YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00"``."""
    if dialect == "postgresql":  # ISO 8601 in the session's zone, UTC (_utc_session); microseconds trimmed
        return cast(func.to_json(column), Text)
    # MySQL and MariaDB: naive UTC (sessions run at +00:00)
    fraction = case(
        (func.microsecond(column) == 0, _text("")),
        else_=func.concat(_text("."), func.lpad(func.microsecond(column), 6, _text("0"))),
    )
    return func.concat(_text('"'), func.date_format(column, _text("%Y-%m-%dT%H:%i:%s")), fraction, _text('+00:00"'))


def _maybe_moment(dialect: str, column: Any) -> Any:
    if dialect == "postgresql":
        return func.coalesce(_moment(dialect, column), _text("null"))
    return case((column.is_(None), _text("null")), else_=_moment(dialect, column))


def _sqlite_json_valid_is_strict() -> bool:
    """Whether SQLite's json_valid(X) accepts RFC 8259 JSON only: before JSON5 came (3.42) and since its one
    argument form went back to RFC 8259 (3.45). Between, a value is checked in Python instead."""
    import sqlite3

    return not (3, 42, 0) <= sqlite3.sqlite_version_info < (3, 45, 0)


def _json(dialect: str, column: Any) -> Any:
    """The stored value as the JSON it holds, on one line; on PostgreSQL the cast to json refuses text that is
    not JSON (the batch is then made in Python, which names the key), on MySQL and MariaDB the line is NULL
    for it."""
    if dialect == "postgresql":  # tabs too, which COPY's text format would escape
        breaks = func.chr(13).op("||")(func.chr(10)).op("||")(func.chr(9))
        return func.translate(cast(cast(column, JSON), Text), breaks, _text("   "))
    cr: Any = literal_column("CHAR(13 USING utf8mb4)")
    lf: Any = literal_column("CHAR(10 USING utf8mb4)")
    flat = func.replace(func.replace(column, cr, _text(" ")), lf, _text(" "))
    return case((func.json_valid(column) == 1, flat), else_=null())


def _task_lines(table: Table) -> Callable[[str], Lines | None]:
    regions = "region_id" in table.c

    @cache  # every batch asks: the expressions are made once per selection and engine
    def build(dialect: str) -> Lines | None:
        c = table.c
        if dialect == "sqlite":
            fields = [c.dag_id, c.run_id, c.task_id, *([c.region_id] if regions else []), c.map_index, c.key]
            before = ['{"store": "task", "dag_id": "', '", "run_id": "', '", "task_id": "']
            before += ['"', ', "map_index": '] if regions else ['", "map_index": ']
            before += [', "key": "']
            finish = [row_lines.strings] * 3 + ([row_lines.regions] if regions else []) + [row_lines.numbers]
            return _in_blocks(fields, before, [*finish, row_lines.strings], c)
        head = [_text('{"store": "task", "dag_id": '), _quoted(dialect, c.dag_id), _text(', "run_id": ')]
        head += [_quoted(dialect, c.run_id), _text(', "task_id": '), _quoted(dialect, c.task_id)]
        tail = [_text(', "map_index": '), _number(c.map_index), _text(', "key": '), _quoted(dialect, c.key)]
        tail += [_text(', "updated_at": '), _moment(dialect, c.updated_at), _text(', "expires_at": ')]
        tail += [_maybe_moment(dialect, c.expires_at), _text(', "value": '), _json(dialect, c.value), _text("}")]
        copied = copy_lines.task_shape(table) if dialect == "postgresql" else None
        if not regions:
            return Lines([_joined(dialect, head + tail)], _as_export(dialect, _line), copied)
        columns = [_joined(dialect, head), _joined(dialect, tail), c.region_id]
        return Lines(columns, _as_export(dialect, _region_line), copied)

    return build


def _dag_run_lines(table: Table) -> Callable[[str], Lines | None]:
    @cache  # every batch asks: the expressions are made once per selection and engine
    def build(dialect: str) -> Lines | None:
        c = table.c
        if dialect == "sqlite":
            before = ['{"store": "dag_run", "dag_id": "', '", "run_id": "', '", "key": "']
            return _in_blocks([c.dag_id, c.run_id, c.key], before, [row_lines.strings] * 3, c)
        parts = [_text('{"store": "dag_run", "dag_id": '), _quoted(dialect, c.dag_id), _text(', "run_id": ')]
        parts += [_quoted(dialect, c.run_id), _text(', "key": '), _quoted(dialect, c.key)]
        parts += [_text(', "updated_at": '), _moment(dialect, c.updated_at), _text(', "expires_at": ')]
        parts += [_maybe_moment(dialect, c.expires_at), _text(', "value": '), _json(dialect, c.value), _text("}")]
        copied = copy_lines.dag_run_shape(table) if dialect == "postgresql" else None
        return Lines([_joined(dialect, parts)], _as_export(dialect, _line), copied)

    return build


def _in_blocks(fields: list[Any], before: list[str], finish: list[Any], c: Any) -> Lines:
    """SQLite's lines, made in this process a chunk of rows at a time (``row_lines``): ``fields``, the line's up to
    its key (``c.key``, the last), ``before`` the text before each, ``finish`` what makes each column; then the
    timestamps and the value as stored, and ``json_valid`` of the value where SQLite's follows RFC 8259."""
    strict = _sqlite_json_valid_is_strict()
    columns = [*fields, _raw(c.updated_at), _raw(c.expires_at), c.value]
    columns += [func.json_valid(c.value)] if strict else []
    before = [*before, '", "updated_at": ', ', "expires_at": ', ', "value": ']
    finish = [*finish, row_lines.moments, row_lines.expiries, row_lines.values]
    block = partial(row_lines.lines, shape=row_lines.Shape(before, finish, strict, is_json))

    def make(row: Any) -> str | None:
        text = block([row])
        return None if text is None else text[:-1]

    return Lines(columns, make, None, block)


# MySQL's and MariaDB's JSON_QUOTE write a control character as \u000B where json.dumps writes \u000b: the hex
# digits of such an escape (not of an escaped backslash followed by "u00") in lower case, as export writes them.
_UPPER_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*\\u00)([01][A-F])")


def _lower_escape(found: re.Match[str]) -> str:
    return found[1] + found[2].lower()


def _lowered(line: str | None) -> str | None:
    return line if line is None or "\\u00" not in line else _UPPER_ESCAPE.sub(_lower_escape, line)


def _as_export(dialect: str, make: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """``make``, its lines' escapes as export writes them where the database's JSON_QUOTE does not."""
    return make if dialect not in MYSQL_ENGINES else lambda row: _lowered(make(row))


def _line(row: Any) -> str | None:
    """The line of a row (``row[1]``), None when the database could not build it."""
    line: str | None = row[1]
    return line


def _region_line(row: Any) -> str | None:
    """A line spliced from its head, its region (where it is not the nil one) and its tail."""
    _, head, tail, region = row
    if head is None or tail is None:
        return None
    if region is None or region == NIL_REGION:
        return f"{head}{tail}"
    return f'{head}, "region_id": "{region}"{tail}'


# -- the rows of each store as lines ---------------------------------------------------------------------------
def _raw(column: Any) -> Any:
    # The driver's own value (SQLite text, a datetime elsewhere) skips SQLAlchemy's per-row parsing.
    return type_coerce(column, String)


def task_rows(table: Table, where: ColumnElement[bool], walk: ColumnElement[bool] | None = None) -> Selection:
    """Task keys (``table``: the layout's task table) that ``where`` selects, as export lines."""
    regions = "region_id" in table.c
    columns = [table.c.dag_id, table.c.run_id, table.c.task_id, table.c.map_index, table.c.key]
    columns += [_raw(table.c.updated_at), _raw(table.c.expires_at), table.c.value]
    columns += [table.c.region_id] if regions else []

    def record(row: Any) -> dict[str, Any]:
        _, dag_id, run_id, task_id, map_index, key, updated_at, expires_at, value, *in_region = row
        value = decoded(value, key, lambda: f"dag_id={dag_id} run_id={run_id} task_id={task_id} map_index={map_index}")
        region = str(in_region[0]) if in_region and in_region[0] != NIL_REGION else None  # outside any: none
        expiry = None if expires_at is None else iso_utc(expires_at)
        return task_record(dag_id, run_id, task_id, region, map_index, key, iso_utc(updated_at), expiry, value)

    return Selection(table, table.c.id, where, columns, record, walk, primary_walk=True, lines=_task_lines(table))


def dag_run_rows(table: Table, where: ColumnElement[bool], walk: ColumnElement[bool] | None = None) -> Selection:
    """Dag-run keys (Airflow 3.4's ``dag_run_state_store``) that ``where`` selects, as export lines."""
    columns = [table.c.dag_id, table.c.run_id, table.c.key, _raw(table.c.updated_at), _raw(table.c.expires_at)]
    columns.append(table.c.value)

    def record(row: Any) -> dict[str, Any]:
        _, dag_id, run_id, key, updated_at, expires_at, value = row
        value = decoded(value, key, lambda: f"dag run dag_id={dag_id} run_id={run_id}")
        expiry = None if expires_at is None else iso_utc(expires_at)
        return dag_run_record(dag_id, run_id, key, iso_utc(updated_at), expiry, value)

    return Selection(table, table.c.id, where, columns, record, walk, primary_walk=True, lines=_dag_run_lines(table))


_WRITER = (
    asset_state_store.c.last_updated_by_kind,
    asset_state_store.c.last_updated_by_dag_id,
    asset_state_store.c.last_updated_by_run_id,
    asset_state_store.c.last_updated_by_task_id,
    asset_state_store.c.last_updated_by_map_index,
)


def asset_rows(where: ColumnElement[bool], name: str, uri: str) -> Selection:
    """The keys of one asset (named ``name`` and ``uri``) that ``where`` selects, walked by key, as export lines."""
    kv = asset_state_store
    columns = [_raw(kv.c.updated_at), kv.c.value, *_WRITER]

    def record(row: Any) -> dict[str, Any]:
        key, updated_at, value, *writer = row
        value = decoded(value, key, lambda: f"asset name={name} uri={uri}")
        return asset_record(name, uri, key, iso_utc(updated_at), tuple(writer), value)

    return Selection(kv, kv.c.key, where, columns, record)


def assets_rows(where: ColumnElement[bool]) -> Selection:
    """The asset keys ``where`` selects, of any assets (their names joined in), as export lines: for a
    one-statement delete, walked by (asset id, key) in one transaction, so never bounded by ``order``."""
    kv = asset_state_store
    joined = kv.join(asset, asset.c.id == kv.c.asset_id)
    columns = [asset.c.name, asset.c.uri, kv.c.key, _raw(kv.c.updated_at), kv.c.value, *_WRITER]

    def record(row: Any) -> dict[str, Any]:
        _, name, uri, key, updated_at, value, *writer = row
        value = decoded(value, key, lambda: f"asset name={name} uri={uri}")
        return asset_record(name, uri, key, iso_utc(updated_at), tuple(writer), value)

    return Selection(kv, kv.c.asset_id, where, columns, record, lock_of=kv, source=joined, tiebreak=kv.c.key)
