"""Export lines from what PostgreSQL's ``COPY ... TO STDOUT`` sends a backed-up batch (psycopg 3).

A batch is ``COPY (DELETE ... RETURNING <fields>) TO STDOUT``. Each field is already JSON where the server
makes that cheaply (``to_json`` of the ids and the key, the value cast to ``json``, which checks it), the
timestamps are ``to_char`` text; this process puts each row's fields between the fixed text of its line
(``{"store": "task", "dag_id": ``, ...) a block of rows at a time, with list operations, while the server
goes on deleting on the other core. Building the whole line in SQL cost the server as much as the delete;
making each line in Python code of its own, four times as much as that.

This holds because every field is JSON or a timestamp: none holds a tab or line break of its own, so in COPY's
text format a tab always ends a field and a line break a row. COPY writes a backslash as two, and the line
breaks and tabs a value has between its JSON tokens as ``\\n``, ``\\r``, ``\\t``: those become spaces, so that
each key stays on one line. Timestamps are written as export writes them: ISO 8601 UTC, six-digit
microseconds or none. The session's time zone must be UTC (``backup._utc_session``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import JSON, String, Table, Text, case, cast, func, literal_column

from statestore_cli.model.scopes import NIL_REGION


class Unmade(ValueError):
    """A field that is not in the form its line needs (a timestamp before year 1 or after 9999): the batch
    is made again from its rows."""


class Shape(NamedTuple):
    """A line as COPY fields and the text around them: ``before[i]`` precedes field ``i``, ``end`` follows
    the last; ``finish`` makes the fields Python completes (the timestamps) final."""

    fields: Sequence[Any]
    before: Sequence[bytes]
    end: bytes
    finish: dict[int, Callable[[bytes], bytes]]


_ESCAPE = re.compile(rb"\\(.)")
_UNESCAPED = {b"\\": b"\\", b"n": b" ", b"r": b" ", b"t": b" "}  # the whitespace between a value's tokens


def _unescaped(found: re.Match[bytes]) -> bytes:
    return _UNESCAPED.get(found[1], found[0])


def lines(data: bytes, shape: Shape) -> tuple[bytes, int]:
    """Whole COPY rows (``data`` ends in a line break) as export lines, each ending in a line break, and how
    many. Raises ``Unmade``."""
    if b"\\" in data:
        data = _ESCAPE.sub(_unescaped, data)
    pieces = data.replace(b"\n", b"\t").split(b"\t")
    pieces.pop()  # after the last line break
    width = len(shape.before)
    rows, odd = divmod(len(pieces), width)
    if odd:
        raise Unmade("a row of COPY's output has a field too many or too few")
    stride = 2 * width + 1
    out: list[bytes] = [b""] * (rows * stride)
    for i, text in enumerate(shape.before):
        column = pieces[i::width]
        finish = shape.finish.get(i)
        out[2 * i : len(out) : stride] = [text] * rows
        out[2 * i + 1 : len(out) : stride] = column if finish is None else list(map(finish, column))
    out[stride - 1 : len(out) : stride] = [shape.end] * rows
    return b"".join(out), rows


def _literal(text: str) -> Any:
    return literal_column("'" + text.replace("'", "''") + "'", String)


def _moment_text(column: Any) -> Any:
    """28 characters from year 1 to 9999: ``YYYY-MM-DDTHH:MM:SS.ffffffAD``, in the session's zone (UTC)."""
    return func.to_char(column, _literal('YYYY-MM-DD"T"HH24:MI:SS.USAD'))


def moment(text: bytes) -> bytes:
    """``YYYY-MM-DDTHH:MM:SS.ffffffAD`` as a JSON string, as ``iso_utc`` writes it (no ``.000000``)."""
    if len(text) != 28 or text[26:] != b"AD":
        raise Unmade(f"a timestamp export cannot write: {text!r}")
    return b'"' + (text[:19] if text[20:26] == b"000000" else text[:26]) + b'+00:00"'


def expiry(text: bytes) -> bytes:
    return b"null" if text == b"null" else moment(text)


def _quoted(column: Any) -> Any:
    return cast(func.to_json(column), Text)


def _value(column: Any) -> Any:
    return cast(cast(column, JSON), Text)  # refused (DataError) where the value is not JSON


def task_shape(table: Table) -> Shape:
    """A task key's line: the fields of ``records.task_record`` in its order (the region only where the key
    has one other than the nil region)."""
    c = table.c
    fields = [_quoted(c.dag_id), _quoted(c.run_id), _quoted(c.task_id)]
    before = [b'{"store": "task", "dag_id": ', b', "run_id": ', b', "task_id": ']
    if "region_id" in c:
        region = _literal(', "region_id": "').op("||")(cast(c.region_id, Text)).op("||")(_literal('"'))
        fields.append(case((cast(c.region_id, Text) == _literal(str(NIL_REGION)), _literal("")), else_=region))
        before.append(b"")
    fields += [cast(c.map_index, Text), _quoted(c.key), _moment_text(c.updated_at)]
    before += [b', "map_index": ', b', "key": ', b', "updated_at": ']
    fields += [func.coalesce(_moment_text(c.expires_at), _literal("null")), _value(c.value)]
    before += [b', "expires_at": ', b', "value": ']
    last = len(fields)
    return Shape(fields, before, b"}\n", {last - 3: moment, last - 2: expiry})


def dag_run_shape(table: Table) -> Shape:
    """A dag-run key's line: the fields of ``records.dag_run_record`` in its order."""
    c = table.c
    fields = [_quoted(c.dag_id), _quoted(c.run_id), _quoted(c.key), _moment_text(c.updated_at)]
    fields += [func.coalesce(_moment_text(c.expires_at), _literal("null")), _value(c.value)]
    before = [b'{"store": "dag_run", "dag_id": ', b', "run_id": ', b', "key": ', b', "updated_at": ']
    before += [b', "expires_at": ', b', "value": ']
    return Shape(fields, before, b"}\n", {3: moment, 4: expiry})
