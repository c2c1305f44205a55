"""Export lines made from a chunk of SQLite rows a column at a time (a backed-up delete on SQLite).

SQLite runs in this process, so whatever makes a line is paid here. One SQL expression per line (strings quoted
by ``json_quote``, timestamps checked by ``GLOB`` and rewritten, some twenty concatenations) cost SQLite 3.1-3.6 s
per 500,000 rows, where the raw columns cost 1.2-1.4 s. Here each column of a chunk of rows is made at once with
joins, searches and slice assignments, as ``copy_lines`` does with what PostgreSQL's COPY sends: an id or key
with no quote, backslash or control character in the whole chunk is JSON string text as it is; a timestamp in
Airflow's SQLite text form (``YYYY-MM-DD HH:MM:SS.ffffff``, checked for the whole chunk by one regular
expression) becomes ISO 8601 UTC as ``iso_utc`` writes it; a value is checked to be JSON (by SQLite's
``json_valid`` where it follows RFC 8259, else here) and its line breaks become spaces.

A chunk with a field in another form (a timestamp in another text form, a value that is not JSON, a number where
text belongs) makes no lines: ``None``, and the caller makes the batch again from its rows, as ``export`` would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from statestore_cli.model.scopes import NIL_REGION

Column = Sequence[Any]
_CONTROLS = bytes(range(0x20))
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_STORED = b"0000-00-00 00:00:00.000000\n"  # Airflow's SQLite text form, every digit a 0
_PLACEHOLDER = "0001-01-01 00:00:00.000000"


class Shape(NamedTuple):
    """A line as fields and the text around them: ``before[i]`` precedes field ``i`` (the row's field after
    its ``order`` value), ``finish[i]`` makes its column final (None: a field not in the line's form); the
    line ends after the last. ``checked``: a ``json_valid(value)`` column follows the fields; without it
    ``valid`` checks each value here."""

    before: Sequence[str]
    finish: Sequence[Callable[[Column], Column | None]]
    checked: bool
    valid: Callable[[str], bool]


def lines(rows: Sequence[Sequence[Any]], shape: Shape) -> str | None:
    """The lines of ``rows`` (each its ``order`` value, then the fields, then ``json_valid`` where checked), each
    ending in a line break, joined; None where a field is not in the form its line needs."""
    if not rows:
        return ""
    columns = list(zip(*rows, strict=True))
    width = len(shape.before)
    values = columns[width]
    if shape.checked:
        if set(columns[width + 1]) != {1}:
            return None
    elif not all(isinstance(value, str) and shape.valid(value) for value in values):
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
    the chunk holds a quote, a backslash or a control character (byte searches: a third of a regular
    expression's time)."""
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
    """Stored values (JSON, checked by ``lines``) with their line breaks made spaces, as valid JSON has them
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
