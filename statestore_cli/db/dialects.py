"""The SQL that differs per engine: insert-or-update, insert-if-missing, what a delete of many rows selects, and
the size of a stored value in bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import LargeBinary, Table, cast, func, select
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.sql import ColumnElement


def in_rowid_order(dialect: str, table: Table, where: ColumnElement[bool]) -> ColumnElement[bool]:
    """The rows of ``table`` (which has an ``id`` primary key) that ``where`` selects, for one ``DELETE`` of many
    of them. SQLite deletes what an index finds in the index's order, so a ``DELETE ... WHERE expires_at < ?``
    visits the table's pages at random, one per row; with the ids collected first (the expiry index covers them)
    it deletes in rowid order, page after page, which is much faster when many rows go and no slower where
    few rows are selected. Elsewhere the server plans a plain ``WHERE`` well (MySQL and MariaDB refuse a
    subquery on the table being deleted from)."""
    if dialect != "sqlite":
        return where
    return table.c.id.in_(select(table.c.id).where(where))


def value_bytes(dialect: str, column: Any) -> Any:
    """The size of a stored value in bytes of its (UTF-8) text, the measure writers hold against
    ``[state_store] max_value_storage_bytes``: ``octet_length`` on PostgreSQL, ``LENGTH`` on MySQL/MariaDB (bytes
    there; ``CHAR_LENGTH`` counts characters) and ``length(CAST(value AS BLOB))`` on SQLite, whose ``length`` of
    text counts characters."""
    if dialect == "postgresql":
        return func.octet_length(column)
    if dialect in ("mysql", "mariadb"):
        return func.length(column)
    return func.length(cast(column, LargeBinary))


def upsert(
    conn: Connection, table: Table, values: Mapping[str, Any], conflict: Sequence[str], update: Sequence[str]
) -> CursorResult[Any]:
    """Insert ``values``, or update the ``update`` columns of the row that clashes on ``conflict``
    (column keys, which may differ from the database's names: see ``layout``)."""
    name = conn.dialect.name
    if name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        stmt = mysql.insert(table).values(**values)
        return conn.execute(stmt.on_duplicate_key_update({c: stmt.inserted[c] for c in update}))
    ins = _insert(name, table).values(**values)
    return conn.execute(
        ins.on_conflict_do_update(
            index_elements=[table.c[k] for k in conflict], set_={c: ins.excluded[c] for c in update}
        )
    )


def insert_new(conn: Connection, table: Table, values: Mapping[str, Any]) -> CursorResult[Any]:
    """Insert a row that must be new: one clashing on a unique key fails with the database's error, in every
    engine alike (the counterpart of ``upsert`` for a writer that must never replace a row)."""
    return conn.execute(table.insert().values(**values))


def insert_if_missing(conn: Connection, table: Table, values: Mapping[str, Any]) -> None:
    """Insert a row unless one with the same unique values exists already."""
    name = conn.dialect.name
    if name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        conn.execute(mysql.insert(table).values(**values).prefix_with("IGNORE"))
        return
    conn.execute(_insert(name, table).values(**values).on_conflict_do_nothing())


def _insert(dialect: str, table: Table) -> Any:
    # Each dialect module is imported only for the engine in use: they are slow to import.
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def code_point_order(dialect: str, column: Any) -> Any:
    """``column`` (text) as an ``ORDER BY`` term that sorts as Python sorts ``str``: by code point, whatever
    the column's collation. SQLite compares text with ``memcmp`` of UTF-8, which is that order already;
    PostgreSQL does under the ``C`` collation; MySQL and MariaDB do on the bytes of the text converted to
    UTF-8 (``CAST ... AS BINARY`` of a latin1 column would order its 0x80-0x9F characters as bytes, not as
    the characters MySQL's latin1 maps them to)."""
    if dialect == "postgresql":
        return column.collate("C")
    if dialect in ("mysql", "mariadb"):
        return _MySQLBytes(column)
    return column


def _utf8_bytes_sql(element: Any, compiler: Any, **kw: Any) -> str:
    return f"CAST(CONVERT({compiler.process(element.clauses.clauses[0], **kw)} USING utf8mb4) AS BINARY)"


def _mysql_bytes_class() -> Any:
    from sqlalchemy.ext.compiler import compiles
    from sqlalchemy.sql.functions import FunctionElement

    class MySQLBytes(FunctionElement[Any]):
        """A MySQL text as the bytes of its UTF-8 form (``CONVERT ... USING`` has no function syntax)."""

        name = "mysql_utf8_bytes"
        inherit_cache = True

    compiles(MySQLBytes)(_utf8_bytes_sql)
    return MySQLBytes


_MySQLBytes = _mysql_bytes_class()
