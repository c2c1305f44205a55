"""The engine implementations (``db.engines``): which one a connection gets, what each answers on its own
database, and that the operations moved onto them no longer ask which engine they run on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import literal, select, union_all

import statestore_cli
from statestore_cli.db.database import make_engine
from statestore_cli.db.engines import impl_of
from statestore_cli.db.engines.base import EngineImpl
from statestore_cli.db.engines.mysql import MySQLImpl
from statestore_cli.db.engines.postgresql import PostgreSQLImpl
from statestore_cli.db.engines.sqlite import SQLiteImpl

ALL_ENGINES = True
ROOT = Path(statestore_cli.__file__).parent

# What asking for the engine looks like: its dialect's or URL's name, or a test of one.
ASKS_THE_ENGINE = re.compile(r"\.dialect\.name|get_backend_name\(\)|\bdialect\s*(==|!=|in\b|not in\b)|MYSQL_ENGINES")


@pytest.mark.parametrize(
    ("name", "cls"),
    [("sqlite", SQLiteImpl), ("postgresql", PostgreSQLImpl), ("mysql", MySQLImpl), ("mariadb", MySQLImpl)],
)
def test_each_dialect_has_its_implementation_one_instance_per_name(name, cls):
    impl = impl_of(name)
    assert type(impl) is cls
    assert impl.name == name  # MariaDB's differences are decided inside MySQLImpl by this name
    assert impl_of(name) is impl


def test_an_engine_without_a_module_gets_the_default_behaviour():
    impl = impl_of("oracle")
    assert type(impl) is EngineImpl
    assert impl.name == "oracle"


def test_a_url_an_engine_and_a_connection_name_the_same_implementation(db_url):
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            assert impl_of(conn) is impl_of(engine) is impl_of(engine.url) is impl_of(engine.dialect.name)
    finally:
        engine.dispose()


def test_value_bytes_and_code_point_order_on_the_database(db_url):
    """Bytes of the UTF-8 text (not characters), and text sorted as Python sorts ``str``."""
    words = ["b", "B", "\u00e9", "a ", "a", "\U0001f600", "Z"]
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            impl = impl_of(conn)
            assert conn.execute(select(impl.value_bytes(literal("\u00e9\U0001f600")))).scalar_one() == 6
            rows = union_all(*(select(literal(w).label("w")) for w in words)).subquery()
            got = conn.execute(select(rows.c.w).order_by(impl.code_point_order(rows.c.w))).scalars().all()
    finally:
        engine.dispose()
    assert got == sorted(words)


def test_operations_never_ask_which_engine_they_run_on():
    asking = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("db/"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ASKS_THE_ENGINE.search(line):
                asking.append(f"{relative}:{number}: {line.strip()}")
    assert not asking, "engine differences belong in db/engines:\n" + "\n".join(asking)
