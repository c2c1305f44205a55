"""Where MySQL/MariaDB text differs from SQLite and PostgreSQL: trailing spaces, and latin1 asset text.

Their ``utf8mb4_bin`` and ``latin1_general_cs`` collations are PAD SPACE: ``'a' = 'a '`` is true, in a
``WHERE`` and in a unique index alike. So every equality the library builds on an id, key, asset name or
uri goes through ``ExactComparator`` (the comparator of ``schema.MySqlCollated``), which on MySQL adds
``CHAR_LENGTH(col) = CHAR_LENGTH(value)``: still an index seek on ``col = value``, then exact. A write
that its unique index would land on a stored twin differing only in trailing spaces cannot be a row of
its own there; ``twin_problem`` says why. Asset names and uris are MySQL's ``latin1`` (Windows-1252 with
five C1 controls), and ``check_asset_text`` refuses text that cannot be stored or looked up in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Boolean
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import BinaryExpression, ColumnElement
from sqlalchemy.sql.sqltypes import Concatenable
from sqlalchemy.sql.type_api import TypeDecorator
from sqlalchemy.sql.visitors import InternalTraversal

from statestore_cli.errors import InvalidInputError

if TYPE_CHECKING:
    from sqlalchemy.sql.compiler import SQLCompiler

MYSQL_ENGINES = ("mysql", "mariadb")

# Bytes 0x81, 0x8D, 0x8F, 0x90 and 0x9D, undefined in Windows-1252, are these controls in MySQL's latin1.
_LATIN1_CONTROLS = frozenset("\x81\x8d\x8f\x90\x9d")
WHY_TWINS = "MySQL/MariaDB unique indexes ignore trailing spaces"


class ExactEqual(ColumnElement[bool]):
    """``left = right``, and on MySQL/MariaDB also ``CHAR_LENGTH(left) = CHAR_LENGTH(right)``."""

    __visit_name__ = "exact_equal"
    inherit_cache = True
    _traverse_internals = [("plain", InternalTraversal.dp_clauseelement)]  # noqa: RUF012  (as SQLAlchemy declares it)
    type = Boolean()
    _is_implicitly_boolean = True  # a comparison: no `= 1` after it where booleans are integers

    def __init__(self, plain: BinaryExpression[bool]) -> None:
        self.plain = plain


@compiles(ExactEqual)
def _compile_exact(element: ExactEqual, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.plain, **kw)


class BytesEqual(ExactEqual):
    """``left = right``, and on MySQL/MariaDB also byte for byte: for a UTF-8 column whose collation the
    database chose (Airflow 3.4 creates ``dag_run_state_store.key`` with none, so the database's default,
    often case- and accent-insensitive, applies), where equal lengths do not make two texts equal."""

    __visit_name__ = "bytes_equal"
    inherit_cache = True


@compiles(BytesEqual)
def _compile_bytes(element: BytesEqual, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.plain, **kw)


@compiles(ExactEqual, "mysql")
@compiles(ExactEqual, "mariadb")
def _compile_exact_mysql(element: ExactEqual, compiler: SQLCompiler, **kw: Any) -> str:
    # The comparison itself as usual (a join's ON links its tables for SQLAlchemy's cartesian-product
    # check, and the index finds the row), then its sides again: one bound parameter rendered twice holds
    # one value. UTF-8 text (utf8mb3 or utf8mb4, the connection's) has the same bytes on both sides.
    plain = compiler.process(element.plain, **kw)
    left, right = (compiler.process(side, **kw) for side in (element.plain.left, element.plain.right))
    if isinstance(element, BytesEqual):
        return f"({plain} AND BINARY {left} = BINARY {right})"
    return f"({plain} AND CHAR_LENGTH({left}) = CHAR_LENGTH({right}))"


@compiles(BytesEqual, "mysql")
@compiles(BytesEqual, "mariadb")
def _compile_bytes_mysql(element: BytesEqual, compiler: SQLCompiler, **kw: Any) -> str:
    return _compile_exact_mysql(element, compiler, **kw)


class ExactComparator(TypeDecorator.Comparator[str], Concatenable.Comparator[str]):
    """``column == value`` compares exactly on every engine; ``column == None`` stays ``IS NULL``."""

    def __eq__(self, other: Any) -> Any:
        plain = super().__eq__(other)
        if isinstance(plain, BinaryExpression) and plain.operator is operators.eq:
            return ExactEqual(plain)
        return plain


class BytesComparator(ExactComparator):
    """``column == value`` byte for byte on MySQL/MariaDB, whatever the column's collation (``BytesEqual``)."""

    def __eq__(self, other: Any) -> Any:
        exact = super().__eq__(other)
        return BytesEqual(exact.plain) if isinstance(exact, ExactEqual) else exact


def index_equal(column: Any, value: Any) -> ColumnElement[bool]:
    """``column = value`` as the engine's unique indexes compare: on MySQL/MariaDB trailing spaces are
    ignored. Only for finding a stored twin; lookups use ``==``, which is exact."""
    equal: ColumnElement[bool] = column.op("=", is_comparison=True)(value)
    return equal


def twins(given: Sequence[Any], stored: Sequence[Any]) -> bool:
    """Whether two identities differ, but only in trailing spaces of their texts."""
    return tuple(given) != tuple(stored) and padless(given) == padless(stored)


def padless(identity: Iterable[Any]) -> tuple[Any, ...]:
    """An identity as a PAD SPACE unique index sees it: its texts without trailing spaces."""
    return tuple(v.rstrip(" ") if isinstance(v, str) else v for v in identity)


def twin_problem(
    what: str, names: Sequence[str], given: Sequence[Any], other: Sequence[Any], whose: str = "the stored"
) -> str:
    """Why ``what`` (its texts ``names``: ``given``) cannot be written beside its twin ``other``."""
    pairs = [(n, g, o) for n, g, o in zip(names, given, other, strict=True) if g != o]
    mine = ", ".join(f"{n} {g!r}" for n, g, _ in pairs)
    theirs = ", ".join(f"{n} {o!r}" for n, _, o in pairs)
    return (
        f"cannot write {what}: {mine} and {whose} {theirs} differ only in trailing spaces ({WHY_TWINS}), "
        "so they cannot be stored apart"
    )


def outside_latin1(text: str) -> str | None:
    """The first character of ``text`` a MySQL latin1 column cannot hold, or None."""
    for char in text:
        if char < "\x80" or "\xa0" <= char <= "\xff" or char in _LATIN1_CONTROLS:
            continue
        try:
            char.encode("cp1252")
        except UnicodeEncodeError:
            return char
    return None


def check_asset_text(dialect: str, name: str | None, uri: str | None) -> None:
    """On MySQL/MariaDB, refuse an asset name or uri (to look up or write) that no asset there can have:
    bad input, before any query, rather than the server's "Illegal mix of collations"."""
    if dialect not in MYSQL_ENGINES:
        return
    for what, text in (("name", name), ("uri", uri)):
        char = None if text is None else outside_latin1(text)
        if char is not None:
            raise InvalidInputError(
                f"asset {what} {text!r} holds {char!r}, outside latin1: MySQL and MariaDB store asset names and "
                "uris as latin1, as Airflow's schema does there"
            )
