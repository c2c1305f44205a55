"""The export format: one JSON object per line for each key, and the checks an imported line must pass.

A task key's line::

    {"store": "task", "dag_id": ..., "run_id": ..., "task_id": ..., "map_index": -1, "key": ...,
     "updated_at": "2026-11-30T00:00:00+00:00", "expires_at": null, "value": <the JSON value>}

An asset key's line names its asset by ``name`` and ``uri`` (its id differs from one database to the next),
has ``"expires_at": null`` (asset keys never expire) and ``updated_by``: who last wrote it (``kind`` ``task``,
``watcher`` or ``api``, and for a task its ``dag_id``, ``run_id``, ``task_id``, ``map_index``), or null when
that was never recorded.

On Airflow 3.4's layout a task key may be in a region: its line has ``"region_id": "<uuid>"`` as well
(after ``task_id``). A line without it, or with the nil UUID, is a key outside any region; a region's keys
are never merged with those outside it, so a database without regions refuses a line in one. A dag-run
key (Airflow 3.4's ``dag_run_state_store``; a database without that table refuses the line)::

    {"store": "dag_run", "dag_id": ..., "run_id": ..., "key": ...,
     "updated_at": "2026-11-30T00:00:00+00:00", "expires_at": null, "value": <the JSON value>}

Every field is required (but a task key's ``region_id``) and no other is accepted, so a typo is an error,
not a silently dropped field. Timestamps are ISO 8601 with a UTC offset; exported ones are always in UTC.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

from statestore_cli.db.mysql_text import outside_latin1
from statestore_cli.db.schema import ASSET_WRITER_FIELDS
from statestore_cli.model.json_depth import MAX_JSON_DEPTH, nests_deeper_than
from statestore_cli.model.scopes import ID_MAX_LENGTH, KEY_MAX_LENGTH, NIL_REGION

TASK_FIELDS = ("store", "dag_id", "run_id", "task_id", "map_index", "key", "updated_at", "expires_at", "value")
TASK_OPTIONAL = ("region_id",)  # a task line may have it; absent: outside any region
DAG_RUN_FIELDS = ("store", "dag_id", "run_id", "key", "updated_at", "expires_at", "value")
ASSET_FIELDS = ("store", "name", "uri", "key", "updated_at", "expires_at", "updated_by", "value")
UPDATED_BY_FIELDS = ASSET_WRITER_FIELDS  # one field per last_updated_by_* column of the asset store
WRITER_KINDS = ("task", "watcher", "api")
_NO_WRITER = (None,) * len(UPDATED_BY_FIELDS)  # an asset key whose writer was never recorded
ASSET_TEXT_MAX_LENGTH = 1500  # the asset table's name and uri columns
_TASK_SET, _ASSET_SET, _BY_SET = frozenset(TASK_FIELDS), frozenset(ASSET_FIELDS), frozenset(UPDATED_BY_FIELDS)
_TASK_REGION_SET, _DAG_RUN_SET = _TASK_SET | frozenset(TASK_OPTIONAL), frozenset(DAG_RUN_FIELDS)
# A task line's fields in the export's order, for an error.
_TASK_SHOWN = (*TASK_FIELDS[:4], *(f"{name} (optional)" for name in TASK_OPTIONAL), *TASK_FIELDS[4:])

# A MySQL/MariaDB TIMESTAMP holds 1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC, nothing else.
MYSQL_FIRST = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
MYSQL_LAST = datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)

# JSON text with what json.dumps leaves raw and a terminal may act on (DEL, C1 controls, bidirectional
# overrides) escaped: still the same JSON, safe to print on a terminal.
_UNSAFE = (0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPES = {code: f"\\u{code:04x}" for code in _UNSAFE}


def task_record(
    dag_id: str,
    run_id: str,
    task_id: str,
    region_id: str | None,
    map_index: int,
    key: str,
    updated_at: str,
    expires_at: str | None,
    value: Any,
) -> dict[str, Any]:
    """A task key's line as a record: timestamps already ISO 8601 UTC, the value decoded; ``region_id``
    None for a key outside any region (the line then has no such field)."""
    record: dict[str, Any] = {"store": "task", "dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    if region_id is not None:
        record["region_id"] = region_id
    record["map_index"] = map_index
    record["key"] = key
    record["updated_at"] = updated_at
    record["expires_at"] = expires_at
    record["value"] = value
    return record


def dag_run_record(
    dag_id: str, run_id: str, key: str, updated_at: str, expires_at: str | None, value: Any
) -> dict[str, Any]:
    """A dag-run key's line as a record (Airflow 3.4's dag-run state store)."""
    return {
        "store": "dag_run",
        "dag_id": dag_id,
        "run_id": run_id,
        "key": key,
        "updated_at": updated_at,
        "expires_at": expires_at,
        "value": value,
    }


def asset_record(name: str, uri: str, key: str, updated_at: str, writer: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """An asset key's line as a record; ``writer`` is the stored (kind, dag_id, run_id, task_id, map_index)."""
    return {
        "store": "asset",
        "name": name,
        "uri": uri,
        "key": key,
        "updated_at": updated_at,
        "expires_at": None,
        "updated_by": None if writer == _NO_WRITER else dict(zip(UPDATED_BY_FIELDS, writer, strict=True)),
        "value": value,
    }


_LINE = json.JSONEncoder(ensure_ascii=False)  # json.dumps(record, ensure_ascii=False), without an encoder per call


def encode_line(record: dict[str, Any]) -> str:
    """One record as a line of JSON (without the newline): readable UTF-8, nothing a terminal acts on."""
    return printable(_LINE.encode(record))


def printable(text: str) -> str:
    """``text`` (JSON) with what a terminal may act on escaped as ``\\uXXXX``: still the same JSON."""
    return text if text.isascii() and "\x7f" not in text else text.translate(_ESCAPES)


def printable_utf8(data: bytes) -> bytes:
    """``printable`` of JSON lines encoded as UTF-8, without decoding the ASCII ones."""
    return data if data.isascii() and b"\x7f" not in data else printable(data.decode("utf-8")).encode("utf-8")


class BadRecord(Exception):
    """A line that cannot be imported; ``line`` is its number in the input (1-based)."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem


class TaskRow(NamedTuple):
    """A task key ready to write: timestamps still aware datetimes in UTC, the value as stored text."""

    line: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    key: str
    updated_at: datetime
    expires_at: datetime | None
    value: str
    region_id: uuid.UUID = NIL_REGION  # the nil UUID: outside any region


class DagRunRow(NamedTuple):
    """A dag-run key ready to write (Airflow 3.4's dag-run state store)."""

    line: int
    dag_id: str
    run_id: str
    key: str
    updated_at: datetime
    expires_at: datetime | None
    value: str


class AssetRow(NamedTuple):
    line: int
    name: str
    uri: str
    key: str
    updated_at: datetime
    value: str
    updated_by: tuple[Any, ...]  # who last wrote it, in UPDATED_BY_FIELDS' order; all None: never recorded


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# Made once: json.loads and json.dumps with arguments make a decoder or an encoder per call, a third of the
# time of a small value's line.
_STRICT = json.JSONDecoder(parse_constant=_no_constant)


def load_strict(text: str | bytes, max_depth: int | None = MAX_JSON_DEPTH) -> Any:
    """JSON as the standard has it: NaN and Infinity (which Python's json accepts) are errors; so is a text
    nested more than ``max_depth`` levels (a stored value no import reads back), before json recurses
    into it (None: the caller has checked)."""
    if max_depth is not None and nests_deeper_than(text, max_depth):
        raise ValueError(f"it nests arrays or objects more than {max_depth} levels deep, more than an import reads")
    if isinstance(text, str) and not text.startswith("\ufeff"):  # json.loads names a BOM: let it
        return _STRICT.decode(text)
    return json.loads(text, parse_constant=_no_constant)


def is_json(text: str) -> bool:
    """Whether ``text`` is JSON as ``load_strict`` reads it."""
    try:
        load_strict(text)
    except ValueError:
        return False
    return True


# What a line may hold besides its value: its fields at their longest (ids, key, asset name and uri: about
# 6,000 characters, 12 bytes each at worst as \\u escapes of surrogate pairs, under 80 KB), with room to spare.
LINE_OVERHEAD = 1 << 20
# The value of a line when max_value_storage_bytes is 0 (no limit): MySQL/MariaDB's MEDIUMTEXT value
# column holds 16 MiB; a larger value needs the limit raised to it, which raises the line limit as well.
UNLIMITED_VALUE_BYTES = 16 << 20


def line_limit(max_value_bytes: int) -> int:
    """The longest line an import reads (its line feed not counted): the largest value it may hold, and
    ``LINE_OVERHEAD`` for the rest. A longer line is refused before it is read whole: an import's memory
    stays bounded whatever its input holds."""
    return (max_value_bytes or UNLIMITED_VALUE_BYTES) + LINE_OVERHEAD


def _longer_than(text: str | bytes, limit: int) -> bool:
    """Whether ``text`` (a line, with or without its line feed) holds more than ``limit`` bytes."""
    return len(text) > limit and (len(text) > limit + 1 or text[-1:] not in ("\n", b"\n"))


def _too_long(number: int, limit: int, max_value_bytes: int) -> BadRecord:
    setting = (
        f"[state_store] max_value_storage_bytes = {max_value_bytes}"
        if max_value_bytes
        else "16 MiB, as [state_store] max_value_storage_bytes = 0 sets no limit of its own"
    )
    return BadRecord(
        number,
        f"longer than {limit:,} bytes, the most a line may hold (a value of {setting}, and 1 MiB for the "
        "other fields); raise max_value_storage_bytes to import larger values",
    )


def read_lines(source: Iterable[str | bytes], max_value_bytes: int) -> Iterator[str | bytes]:
    """The lines of ``source``; from a file (anything with ``readline``) each is read at most
    ``line_limit`` bytes at a time, so a longer one raises ``BadRecord`` without being held whole."""
    readline = getattr(source, "readline", None)
    if readline is None:
        yield from source  # already in memory: parse_line checks each line's length
        return
    limit = line_limit(max_value_bytes)
    number = 0
    while line := readline(limit + 1):
        number += 1
        if _longer_than(line, limit):
            raise _too_long(number, limit, max_value_bytes)
        yield line


def parse_line(number: int, text: str | bytes, max_value_bytes: int) -> TaskRow | DagRunRow | AssetRow | None:
    """The key on line ``number``, checked; None for a blank line. Raises ``BadRecord``."""
    limit = line_limit(max_value_bytes)
    if _longer_than(text, limit):
        raise _too_long(number, limit, max_value_bytes)
    if not text.strip():
        return None
    if nests_deeper_than(text, MAX_JSON_DEPTH + 1):  # the line's object, then its value; before json recurses
        raise BadRecord(
            number, f"its value nests arrays or objects more than {MAX_JSON_DEPTH} levels deep; store a flatter value"
        )
    try:
        record = load_strict(text, None)
    except ValueError as exc:  # JSONDecodeError, a bad UTF-8 byte, NaN or Infinity
        raise BadRecord(number, f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(record, dict):
        raise BadRecord(number, f"expected a JSON object, got {_kind(record)}")
    store = record.get("store")
    if store == "task":
        fields = _TASK_REGION_SET if "region_id" in record else _TASK_SET
        _check_fields(number, record, fields, TASK_FIELDS, "a task key", _TASK_SHOWN)
        return _task_row(number, record, max_value_bytes)
    if store == "dag_run":
        _check_fields(number, record, _DAG_RUN_SET, DAG_RUN_FIELDS, "a dag-run key")
        return _dag_run_row(number, record, max_value_bytes)
    if store == "asset":
        _check_fields(number, record, _ASSET_SET, ASSET_FIELDS, "an asset key")
        return _asset_row(number, record, max_value_bytes)
    if "store" not in record:
        raise BadRecord(number, 'a key needs store ("task", "dag_run" or "asset"): missing')
    raise BadRecord(number, f'store must be "task", "dag_run" or "asset", got {_shown(store)}')


def _check_fields(
    number: int,
    record: dict[str, Any],
    wanted: frozenset[str],
    order: tuple[str, ...],
    what: str,
    shown: tuple[str, ...] | None = None,
) -> None:
    """``record`` has exactly the fields ``wanted``: those of ``order`` (all required) and the optional
    ones it has; ``shown`` is every field it may have, for the error."""
    if record.keys() == wanted:
        return
    missing = [name for name in order if name not in record]
    if missing:
        raise BadRecord(number, f"{what} needs {', '.join(missing)}: missing")
    unknown = sorted(set(record) - wanted)
    fields = ", ".join(shown or order)
    raise BadRecord(number, f"unknown field {', '.join(map(repr, unknown))} in {what} (its fields: {fields})")


def _task_row(number: int, record: dict[str, Any], max_value_bytes: int) -> TaskRow:
    map_index = record["map_index"]
    if type(map_index) is not int or map_index < -1:
        raise BadRecord(number, f"map_index must be an integer, -1 or more, got {_shown(map_index)}")
    expires = record["expires_at"]
    return TaskRow(
        number,
        _text(number, record, "dag_id", ID_MAX_LENGTH),
        _text(number, record, "run_id", ID_MAX_LENGTH),
        _text(number, record, "task_id", ID_MAX_LENGTH),
        map_index,
        _text(number, record, "key", KEY_MAX_LENGTH),
        _moment(number, "updated_at", record["updated_at"]),
        None if expires is None else _moment(number, "expires_at", expires),
        _value(number, record["value"], max_value_bytes),
        _region(number, record),
    )


def _region(number: int, record: dict[str, Any]) -> uuid.UUID:
    """A task line's ``region_id``: a UUID string; absent, the nil UUID: outside any region."""
    if "region_id" not in record:
        return NIL_REGION
    text = record["region_id"]
    if type(text) is not str:
        raise BadRecord(number, f"region_id must be a UUID string, got {_shown(text)}")
    try:
        return uuid.UUID(text)
    except ValueError:
        raise BadRecord(number, f"region_id {_shown(text)} is not a UUID") from None


def _dag_run_row(number: int, record: dict[str, Any], max_value_bytes: int) -> DagRunRow:
    expires = record["expires_at"]
    return DagRunRow(
        number,
        _text(number, record, "dag_id", ID_MAX_LENGTH),
        _text(number, record, "run_id", ID_MAX_LENGTH),
        _text(number, record, "key", KEY_MAX_LENGTH),
        _moment(number, "updated_at", record["updated_at"]),
        None if expires is None else _moment(number, "expires_at", expires),
        _value(number, record["value"], max_value_bytes),
    )


def _asset_row(number: int, record: dict[str, Any], max_value_bytes: int) -> AssetRow:
    if record["expires_at"] is not None:
        raise BadRecord(number, f"asset keys never expire: expires_at must be null, got {_shown(record['expires_at'])}")
    by = _updated_by(number, record["updated_by"])
    return AssetRow(
        number,
        _text(number, record, "name", ASSET_TEXT_MAX_LENGTH),
        _text(number, record, "uri", ASSET_TEXT_MAX_LENGTH),
        _text(number, record, "key", KEY_MAX_LENGTH),
        _moment(number, "updated_at", record["updated_at"]),
        _value(number, record["value"], max_value_bytes),
        by,
    )


def _updated_by(number: int, by: Any) -> tuple[Any, ...]:
    if by is None:
        return (None,) * len(UPDATED_BY_FIELDS)
    if not isinstance(by, dict):
        raise BadRecord(number, f"updated_by must be an object or null, got {_kind(by)}")
    _check_fields(number, by, _BY_SET, UPDATED_BY_FIELDS, "updated_by")
    kind, map_index = by["kind"], by["map_index"]
    if kind is not None and kind not in WRITER_KINDS:
        kinds = ", ".join(WRITER_KINDS)
        raise BadRecord(number, f"updated_by.kind must be one of {kinds} or null, got {_shown(kind)}")
    if map_index is not None and (type(map_index) is not int or map_index < -1):
        raise BadRecord(
            number, f"updated_by.map_index must be an integer, -1 or more, or null, got {_shown(map_index)}"
        )
    checked = {"kind": kind, "map_index": map_index}
    for name in ("dag_id", "run_id", "task_id"):
        checked[name] = None if by[name] is None else _text(number, by, name, ID_MAX_LENGTH, f"updated_by.{name}")
    return tuple(checked[name] for name in UPDATED_BY_FIELDS)


def _text(number: int, record: dict[str, Any], name: str, max_length: int, label: str | None = None) -> str:
    value = record[name]
    label = label or name
    if type(value) is not str or not value:
        raise BadRecord(number, f"{label} must be a non-empty string, got {_shown(value)}")
    if len(value) > max_length:
        raise BadRecord(number, f"{label} is {len(value)} characters long; the limit is {max_length}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRecord(number, f"{label} holds a lone surrogate escape, which no database stores") from None
    if "\x00" in value:
        raise BadRecord(number, f"{label} holds a NUL character, which PostgreSQL cannot store")
    return value


def _moment(number: int, name: str, text: Any) -> datetime:
    if type(text) is not str:
        raise BadRecord(number, f"{name} must be an ISO 8601 timestamp string, got {_shown(text)}")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRecord(number, f"{name} {text!r} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        raise BadRecord(number, f"{name} {text!r} has no UTC offset; add one, e.g. {text}+00:00")
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00, 9999-12-31T23:59:59-14:00
        raise BadRecord(number, f"{name} {text!r} is outside the years 1 to 9999 in UTC") from None


def _value(number: int, value: Any, max_value_bytes: int) -> str:
    if value is None:
        raise BadRecord(number, "value is JSON null, which cannot be stored; leave the key out instead")
    stored = json.dumps(value)  # what Airflow and `set` store: ASCII-escaped
    if max_value_bytes and len(stored) > max_value_bytes:
        raise BadRecord(
            number,
            f"value is {len(stored)} bytes, over [state_store] max_value_storage_bytes = {max_value_bytes}; "
            "raise the limit or leave the key out",
        )
    return stored


def check_mysql(row: TaskRow | DagRunRow | AssetRow) -> None:
    """What only a MySQL/MariaDB store cannot hold: timestamps outside TIMESTAMP's range, and asset
    names or uris outside latin1 (the character set Airflow gives those columns there)."""
    moments: tuple[tuple[str, datetime], ...] = (("updated_at", row.updated_at),)
    if isinstance(row, TaskRow | DagRunRow):
        moments += (("expires_at", row.expires_at),) if row.expires_at is not None else ()
    else:
        for name in ("name", "uri"):
            if outside_latin1(getattr(row, name)) is not None:
                raise BadRecord(row.line, f"asset {name} has characters MySQL's latin1 asset columns cannot hold")
    for name, moment in moments:
        if not MYSQL_FIRST <= moment <= MYSQL_LAST:
            raise BadRecord(
                row.line,
                f"{name} {moment.isoformat()} is outside what a MySQL TIMESTAMP holds "
                "(1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC)",
            )


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
