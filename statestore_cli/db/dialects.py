"""The earlier function for what differs per engine, kept for its callers (``ops.cleanup``, ``ops.backup``):
it now asks the engine's implementation (``db.engines``), which new code calls itself."""

from __future__ import annotations

from sqlalchemy import Table
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.engines import impl_of


def in_rowid_order(dialect: str, table: Table, where: ColumnElement[bool]) -> ColumnElement[bool]:
    """``EngineImpl.in_rowid_order``: the rows ``where`` selects, for one ``DELETE`` of many of them."""
    return impl_of(dialect).in_rowid_order(table, where)
