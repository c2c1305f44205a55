"""Export lines made from PostgreSQL's ``COPY ... TO STDOUT`` text rows, for ``--backup`` on psycopg 3.

A backed-up batch on PostgreSQL is ``COPY (DELETE ... RETURNING <the row's columns>) TO STDOUT``: the server
only deletes and sends each row in COPY's text format (tab-separated, ``\\N`` for NULL, a backslash before
a tab, line break or backslash in a value), and this process makes each key's line of the export format
while the server goes on deleting, on the other core. Building the same line in SQL (``to_json`` of every
field, the value cast to ``json``) doubled what the delete costs the server.

A line is what ``export`` writes for the same key: strings JSON-quoted as Python quotes them, timestamps in
ISO 8601 UTC with six-digit microseconds (or none), the stored value embedded as the JSON it is, checked to
be JSON and its line breaks made spaces. A row whose line cannot be made here (a value that is not JSON, a
timestamp in another form) gives None: the batch is then made again from its rows, which names the key.
The session's ``TimeZone`` must be UTC and its ``DateStyle`` ISO (``backup._utc_session``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from json.encoder import encode_basestring as _quoted
from typing import Any

from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.ops.records import load_strict

Fields = list[Any]  # a row's fields: str, None for NULL
Make = Callable[[Fields], str | None]

_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPED = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_FLAT = str.maketrans("\r\n\t", "   ")  # the whitespace JSON allows between tokens, on one line


def fields(row: str) -> Fields:
    """One row of COPY's text format (without its line break) as its fields, NULL as None."""
    split: Fields = row.split("\t")
    if "\\" not in row:  # nothing escaped, and no NULL (written \N)
        return split
    return [None if f == "\\N" else _ESCAPE.sub(_unescaped, f) if f and "\\" in f else f for f in split]


def _unescaped(found: re.Match[str]) -> str:
    return _ESCAPED.get(found[1], found[1])


def lines(text: str, make: Make) -> list[str | None]:
    """The lines of whole COPY rows, ``text`` ending in a line break."""
    return [make(fields(row)) for row in text.split("\n")[:-1]]  # not splitlines: a value may hold \x1c, U+2028


def _moment(text: str | None) -> str | None:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]+00`` (timestamptz in UTC, DateStyle ISO) as a JSON string of
    ISO 8601, as ``iso_utc`` writes it; None for any other form (a year past 9999, BC)."""
    if text is None or len(text) < 22 or text[10] != " " or text[19:20] not in ("+", ".") or text[-3:] != "+00":
        return None
    if len(text) == 22:
        return f'"{text[:10]}T{text[11:19]}+00:00"'
    fraction = text[19:-3]
    if not 2 <= len(fraction) <= 7 or not fraction[1:].isdigit():
        return None
    return f'"{text[:10]}T{text[11:19]}{fraction.ljust(7, "0")}+00:00"'


def _value(text: str | None) -> str | None:
    """The stored value as the JSON it holds, on one line; None when it is not JSON."""
    if text is None:
        return None
    try:
        load_strict(text)
    except ValueError:
        return None
    return text.translate(_FLAT) if "\n" in text or "\r" in text or "\t" in text else text


def _expiry(text: str | None) -> str | None:
    return "null" if text is None else _moment(text)


def task_line(row: Fields) -> str | None:
    """The line of a task key from its COPY fields: dag_id, run_id, task_id, map_index, key, updated_at,
    expires_at, value, and region_id where the layout has regions (the identifiers are NOT NULL columns)."""
    dag_id, run_id, task_id, map_index, key, updated_at, expires_at, value, *in_region = row
    updated, expires, stored = _moment(updated_at), _expiry(expires_at), _value(value)
    if updated is None or expires is None or stored is None:
        return None
    region = in_region[0] if in_region else None
    place = "" if region is None or region == NIL_REGION else f', "region_id": {_quoted(region)}'
    return (
        f'{{"store": "task", "dag_id": {_quoted(dag_id)}, "run_id": {_quoted(run_id)}, "task_id": '
        f'{_quoted(task_id)}{place}, "map_index": {map_index}, "key": {_quoted(key)}, "updated_at": {updated}, '
        f'"expires_at": {expires}, "value": {stored}}}'
    )


def dag_run_line(row: Fields) -> str | None:
    """The line of a dag-run key from its COPY fields: dag_id, run_id, key, updated_at, expires_at, value."""
    dag_id, run_id, key, updated_at, expires_at, value = row
    updated, expires, stored = _moment(updated_at), _expiry(expires_at), _value(value)
    if updated is None or expires is None or stored is None:
        return None
    return (
        f'{{"store": "dag_run", "dag_id": {_quoted(dag_id)}, "run_id": {_quoted(run_id)}, "key": {_quoted(key)}, '
        f'"updated_at": {updated}, "expires_at": {expires}, "value": {stored}}}'
    )
