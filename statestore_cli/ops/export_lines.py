"""Export lines made from rows a chunk at a time: what a backed-up delete (``--backup FILE``) writes of the rows it
deletes, the lines ``export`` writes of the same keys (the format: ``statestore_cli.ops.records``).

Each column of a chunk is made JSON at once, with joins, searches and slice assignments, rather than a record
per row: an id or key with no quote, backslash or control character in the whole chunk is JSON string text as
it is; a timestamp in Airflow's SQLite text form (``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, the form every engine
returns a backed-up delete's timestamps in: ``EngineImpl.stored_moment``) becomes ISO 8601 UTC as ``iso_utc``
writes it; a value is checked to be JSON (by the engine, ``EngineImpl.json_value``, or here) and written as
stored, its line breaks (which valid JSON has only between its tokens) made spaces.

A chunk with a field in another form (a timestamp in another text form, a value that is not JSON, a number
where text belongs) has each row's line made from its record instead (``Lines.record``), as ``export`` makes
it: that reads any form, and names the key whose value is not JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.ops.records import encode_line, is_json

Column = Sequence[Any]
_CONTROLS = bytes(range(0x20))
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_STORED = b"0000-00-00 00:00:00.000000\n"  # Airflow's SQLite text form, every digit a 0
_PLACEHOLDER = "0001-01-01 00:00:00.000000"


class Shape(NamedTuple):
    """A line as fields and the text around them: ``before[i]`` precedes field ``i`` (the row's field after
    its ``order`` value), ``finish[i]`` makes its column final (None: a field not in the line's form); the
    line ends after the last. ``checked``: a column that is 1 for a value that is JSON follows the fields;
    without it each value is checked here."""

    before: Sequence[str]
    finish: Sequence[Callable[[Column], Column | None]]
    checked: bool


class Lines(NamedTuple):
    """How rows (each its ``order`` value, then ``columns``) become lines: a chunk at a time by ``shape``
    where it is given and the chunk is in its form, else each row's ``record``, encoded as export encodes it."""

    columns: Sequence[Any]
    record: Callable[[Any], dict[str, Any]]
    shape: Shape | None = None

    def text(self, rows: Sequence[Any]) -> str:
        """The lines of ``rows``, each ending in a line break."""
        made = block(rows, self.shape) if self.shape is not None else None
        if made is not None:
            return made
        return "".join(encode_line(self.record(row)) + "\n" for row in rows)


def block(rows: Sequence[Sequence[Any]], shape: Shape) -> str | None:
    """The lines of ``rows`` (each its ``order`` value, then the fields, then the JSON check where ``checked``),
    each ending in a line break, joined; None where a field is not in the form its line needs."""
    if not rows:
        return ""
    columns = list(zip(*rows, strict=True))
    width = len(shape.before)
    values = columns[width]
    if shape.checked:
        if set(columns[width + 1]) != {1}:
            return None
    elif not all(isinstance(value, str) and is_json(value) for value in values):
        return None
    made: list[Column] = []
    for finish, column in zip(shape.finish, columns[1 : width + 1], strict=True):
        done = finish(column)
        if done is None:
            return None
        made.append(done)
    count = len(rows)
    stride = 2 * width + 1
    out: list[str] = [""] * (count * stride)
    for i, (text, fields) in enumerate(zip(shape.before, made, strict=True)):
        out[2 * i : len(out) : stride] = [text] * count
        out[2 * i + 1 : len(out) : stride] = fields
    out[stride - 1 : len(out) : stride] = ["}\n"] * count
    return "".join(out)


def strings(column: Column) -> Column | None:
    """Ids and keys as the inside of JSON strings (``json.dumps(..., ensure_ascii=False)``): as they are unless
    the chunk holds a quote, a backslash or a control character (byte searches, not a regular expression)."""
    try:
        joined = "".join(column)
    except TypeError:  # a field that is not text
        return None
    if '"' not in joined and "\\" not in joined:
        data = joined.encode("utf-8")
        if len(data.translate(None, _CONTROLS)) == len(data):
            return column
    return [json.dumps(text, ensure_ascii=False)[1:-1] for text in column]


def numbers(column: Column) -> Column | None:
    return list(map(str, column)) if set(map(type, column)) == {int} else None


def _moments(column: Column, nullable: bool) -> Column | None:
    """Stored timestamps as JSON strings ``"YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00"`` (no fraction where it is
    zero, as ``iso_utc`` writes it); with ``nullable``, NULL as ``null``."""
    nulls = [i for i, moment in enumerate(column) if moment is None] if nullable else []
    filled = list(column)
    for i in nulls:
        filled[i] = _PLACEHOLDER
    try:
        text = "\n".join(filled)
    except TypeError:
        return None
    if (text + "\n").encode("utf-8").translate(_DIGITS) != _STORED * len(filled):  # that form, every one
        return None
    made = ('"' + text.replace(" ", "T").replace("\n", '+00:00"\n"') + '+00:00"').split("\n")
    if ".000000" in text:
        for i, moment in enumerate(filled):
            if moment.endswith(".000000"):
                made[i] = f'"{moment[:10]}T{moment[11:19]}+00:00"'
    for i in nulls:
        made[i] = "null"
    return made


def moments(column: Column) -> Column | None:
    return _moments(column, False)


def expiries(column: Column) -> Column | None:
    return _moments(column, True)


def values(column: Column) -> Column | None:
    """Stored values (JSON, checked by ``block``) with their line breaks made spaces, as valid JSON has them
    only between its tokens, so that each key stays on one line."""
    try:
        joined = "".join(column)
    except TypeError:
        return None
    if "\r" not in joined and "\n" not in joined:
        return column
    return [value.replace("\r", " ").replace("\n", " ") for value in column]


def regions(column: Column) -> Column | None:
    """The ``"region_id"`` member where a key has a region other than the nil one, else nothing."""
    return ["" if region is None or region == NIL_REGION else f', "region_id": "{region}"' for region in column]


def task_shape(regions_too: bool, checked: bool) -> Shape:
    """A task key's line from its dag_id, run_id, task_id, (region_id,) map_index, key, updated_at,
    expires_at and value."""
    before = ['{"store": "task", "dag_id": "', '", "run_id": "', '", "task_id": "']
    before += ['"', ', "map_index": '] if regions_too else ['", "map_index": ']
    before += [', "key": "', '", "updated_at": ', ', "expires_at": ', ', "value": ']
    finish = [strings] * 3 + ([regions] if regions_too else []) + [numbers, strings, moments, expiries, values]
    return Shape(before, finish, checked)


def dag_run_shape(checked: bool) -> Shape:
    """A dag-run key's line from its dag_id, run_id, key, updated_at, expires_at and value."""
    before = ['{"store": "dag_run", "dag_id": "', '", "run_id": "', '", "key": "', '", "updated_at": ']
    before += [', "expires_at": ', ', "value": ']
    return Shape(before, [strings, strings, strings, moments, expiries, values], checked)
