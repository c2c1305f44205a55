"""Export lines from what PostgreSQL's ``COPY ... TO STDOUT`` sends a backed-up batch (psycopg 3).

A batch is ``COPY (DELETE ... RETURNING <fields>) TO STDOUT``. The server sends the columns as they are, but
the value cast to ``json`` (which checks it, cheaply); this process puts each row's fields between the fixed
text of its line (``{"store": "task", "dag_id": "``, ...) a block of rows at a time, with list operations,
while the server goes on deleting. Making each field JSON in SQL (``to_json``, ``to_char``) cost the server
nearly as much as the delete itself (0.8 s of CPU per 500,000 rows against 1.0 s).

This holds because COPY's text format escapes what would be ambiguous: a tab always ends a field and a line
break a row. A column is then made JSON at once where it can be: an id or key with no quote, backslash or
control character in the whole block is JSON string text as it comes (the quotes are in the text around
it); only a block that has one makes its strings one by one (``json.dumps``, as export does). COPY writes a
backslash as two, and the line breaks and tabs a value has between its JSON tokens as ``\\n``, ``\\r``,
``\\t``: those become spaces, so that each key stays on one line. Timestamps come in the ISO form of a UTC
session (``backup._utc_session``: TimeZone UTC, DateStyle ISO) and are written as export writes them: ISO
8601 UTC, six-digit microseconds or none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any, NamedTuple

from sqlalchemy import JSON, String, Table, Text, case, cast, literal_column

from statestore_cli.model.scopes import NIL_REGION


class Unmade(ValueError):
    """A field that is not in the form its line needs (a timestamp before year 1 or after 9999): the batch
    is made again from its rows."""


Column = list[bytes]


class Shape(NamedTuple):
    """A line as COPY fields and the text around them: ``before[i]`` precedes field ``i``, ``end`` follows
    the last; ``finish[i]`` makes the column of field ``i`` (every row's, in order) final."""

    fields: Sequence[Any]
    before: Sequence[bytes]
    end: bytes
    finish: dict[int, Callable[[Column], Column]]


def lines(data: bytes, shape: Shape, trailing: int = 0) -> tuple[bytes, int, list[Column]]:
    """Whole COPY rows (``data`` ends in a line break) as export lines, each ending in a line break, how many,
    and the columns of the ``trailing`` fields each row has after its line's (as COPY sent them). Raises
    ``Unmade``."""
    pieces = data.replace(b"\n", b"\t").split(b"\t")
    pieces.pop()  # after the last line break
    width = len(shape.before)
    rows, odd = divmod(len(pieces), width + trailing)
    if odd:
        raise Unmade("a row of COPY's output has a field too many or too few")
    stride = 2 * width + 1
    out: list[bytes] = [b""] * (rows * stride)
    for i, text in enumerate(shape.before):
        column = pieces[i :: width + trailing]
        finish = shape.finish.get(i)
        out[2 * i : len(out) : stride] = [text] * rows
        out[2 * i + 1 : len(out) : stride] = column if finish is None else finish(column)
    out[stride - 1 : len(out) : stride] = [shape.end] * rows
    return b"".join(out), rows, [pieces[width + i :: width + trailing] for i in range(trailing)]


# -- the columns ----------------------------------------------------------------------------------------------
_ESCAPE = re.compile(rb"\\(.)")
_CONTROLS = bytes(range(0x20))
_COPY_ESCAPES = {b"\\": b"\\", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f", b"v": b"\v"}
_BETWEEN_TOKENS = {b"\\": b"\\", b"n": b" ", b"r": b" ", b"t": b" "}


def _copied(found: re.Match[bytes]) -> bytes:
    return _COPY_ESCAPES[found[1]]


def _spaced(found: re.Match[bytes]) -> bytes:
    return _BETWEEN_TOKENS.get(found[1], found[0])


def _plain(text: bytes) -> bool:
    """Whether ``text`` holds no character a JSON string cannot hold as it is, or COPY escaped: a quote, a
    backslash, a control character (byte searches and a translate, twice as fast as a regular expression)."""
    return b'"' not in text and b"\\" not in text and len(text.translate(None, _CONTROLS)) == len(text)


def _string(field: bytes) -> bytes:
    """A text field as the inside of a JSON string, as ``json.dumps(..., ensure_ascii=False)`` writes it."""
    if _plain(field):
        return field
    return json.dumps(_ESCAPE.sub(_copied, field).decode("utf-8"), ensure_ascii=False)[1:-1].encode("utf-8")


def strings(column: Column) -> Column:
    """Ids and keys: as they come unless the block holds a character JSON or COPY escapes."""
    return column if _plain(b"".join(column)) else list(map(_string, column))


def json_texts(column: Column) -> Column:
    """Values (JSON the server checked): COPY's escapes undone, line breaks and tabs between tokens spaces."""
    return column if b"\\" not in b"".join(column) else [_ESCAPE.sub(_spaced, field) for field in column]


def moment(text: bytes) -> bytes:
    """``YYYY-MM-DD HH:MM:SS[.f]+00`` (ISO, UTC, fraction without trailing zeros) as a JSON string, as
    ``iso_utc`` writes it: ``"YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00"``."""
    size = len(text)
    if size == 22 and text[19:] == b"+00" and text[10] == 0x20:
        return b'"' + text[:10] + b"T" + text[11:19] + b'+00:00"'
    if 24 <= size <= 29 and text[19] == 0x2E and text[size - 3 :] == b"+00" and text[10] == 0x20:
        return b'"' + text[:10] + b"T" + text[11 : size - 3].ljust(15, b"0") + b'+00:00"'
    raise Unmade(f"a timestamp export cannot write: {text!r}")  # BC, a year past 9999, infinity


_FULL = 29  # YYYY-MM-DD HH:MM:SS.ffffff+00: a timestamp whose microseconds end in a digit other than 0
_PLACEHOLDER = b"0001-01-01 00:00:00.000000+00"


def _iso(column: Column, one: Callable[[bytes], bytes]) -> Column:
    """``one`` of each field, made together with bytes operations: five times cheaper than one by one, for
    the two timestamps of every row. The full-length ones (nine in ten) go as they are; those whose fraction
    the server trimmed (microseconds ending in 0) are padded to six digits first, as ``moment`` pads them; the
    rest (no fraction, NULL, a form ``moment`` refuses) are made one by one."""
    rows = len(column)
    odd = list(compress(range(rows), map(_FULL.__ne__, map(len, column))))
    if not rows or len(odd) * 4 > rows:
        return list(map(one, column))
    filled = column.copy() if odd else column
    singles = []
    for i in odd:
        text = column[i]
        if 24 <= len(text) < _FULL and text[19] == 0x2E and text.endswith(b"+00"):
            filled[i] = text[:-3].ljust(_FULL - 3, b"0") + b"+00"
        else:
            filled[i] = _PLACEHOLDER
            singles.append(i)
    joined = b"\n".join(filled)
    stride = _FULL + 1
    if any(
        joined[at::stride] != mark * rows for at, mark in ((10, b" "), (19, b"."), (26, b"+"), (27, b"0"), (28, b"0"))
    ):
        return list(map(one, column))  # not the ISO form of a UTC session: each as moment says
    made = (b'"' + joined.replace(b" ", b"T").replace(b"\n", b':00"\n"') + b':00"').split(b"\n")
    for i in singles:
        made[i] = one(column[i])
    return made


def moments(column: Column) -> Column:
    return _iso(column, moment)


def _expiry(text: bytes) -> bytes:
    return b"null" if text == b"\\N" else moment(text)


def expiries(column: Column) -> Column:
    return _iso(column, _expiry)


# -- the shapes -----------------------------------------------------------------------------------------------
def _literal(text: str) -> Any:
    return literal_column("'" + text.replace("'", "''") + "'", String)


def _value(column: Any) -> Any:
    return cast(cast(column, JSON), Text)  # refused (DataError) where the value is not JSON


def task_shape(table: Table) -> Shape:
    """A task key's line: the fields of ``records.task_record`` in its order (the region only where the key
    has one other than the nil region)."""
    c = table.c
    fields: list[Any] = [c.dag_id, c.run_id, c.task_id]
    before = [b'{"store": "task", "dag_id": "', b'", "run_id": "', b'", "task_id": "']
    closing = b'"'
    if "region_id" in c:
        region = _literal(', "region_id": "').op("||")(cast(c.region_id, Text)).op("||")(_literal('"'))
        fields.append(case((cast(c.region_id, Text) == _literal(str(NIL_REGION)), _literal("")), else_=region))
        before.append(closing)
        closing = b""
    fields += [cast(c.map_index, Text), c.key, c.updated_at, c.expires_at, _value(c.value)]
    before += [closing + b', "map_index": ', b', "key": "', b'", "updated_at": ', b', "expires_at": ', b', "value": ']
    last = len(fields)
    finish: dict[int, Callable[[Column], Column]] = {0: strings, 1: strings, 2: strings, last - 4: strings}
    finish.update({last - 3: moments, last - 2: expiries, last - 1: json_texts})
    return Shape(fields, before, b"}\n", finish)


def dag_run_shape(table: Table) -> Shape:
    """A dag-run key's line: the fields of ``records.dag_run_record`` in its order."""
    c = table.c
    fields: list[Any] = [c.dag_id, c.run_id, c.key, c.updated_at, c.expires_at, _value(c.value)]
    before = [b'{"store": "dag_run", "dag_id": "', b'", "run_id": "', b'", "key": "', b'", "updated_at": ']
    before += [b', "expires_at": ', b', "value": ']
    finish: dict[int, Callable[[Column], Column]] = {0: strings, 1: strings, 2: strings, 3: moments, 4: expiries}
    finish[5] = json_texts
    return Shape(fields, before, b"}\n", finish)
