"""The earlier functions for what differs per engine, kept for their callers: each now asks the engine's
implementation (``db.engines``), which new code calls itself (``impl_of(conn).upsert(...)``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.engines import impl_of


def in_rowid_order(dialect: str, table: Table, where: ColumnElement[bool]) -> ColumnElement[bool]:
    """``EngineImpl.in_rowid_order``: the rows ``where`` selects, for one ``DELETE`` of many of them."""
    return impl_of(dialect).in_rowid_order(table, where)


def value_bytes(dialect: str, column: Any) -> Any:
    """``EngineImpl.value_bytes``: the size of a stored value in bytes of its (UTF-8) text."""
    return impl_of(dialect).value_bytes(column)


def upsert(
    conn: Connection, table: Table, values: Mapping[str, Any], conflict: Sequence[str], update: Sequence[str]
) -> CursorResult[Any]:
    """``EngineImpl.upsert``: insert ``values``, or update the ``update`` columns of the row that clashes."""
    return impl_of(conn).upsert(conn, table, values, conflict, update)


def insert_new(conn: Connection, table: Table, values: Mapping[str, Any]) -> CursorResult[Any]:
    """``EngineImpl.insert_new``: insert a row that must be new."""
    return impl_of(conn).insert_new(conn, table, values)


def insert_if_missing(conn: Connection, table: Table, values: Mapping[str, Any]) -> None:
    """``EngineImpl.insert_if_missing``: insert a row unless one with the same unique values exists already."""
    impl_of(conn).insert_if_missing(conn, table, values)


def code_point_order(dialect: str, column: Any) -> Any:
    """``EngineImpl.code_point_order``: ``column`` as an ``ORDER BY`` term in code point order."""
    return impl_of(dialect).code_point_order(column)
