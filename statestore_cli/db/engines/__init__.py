"""One implementation per database engine: what differs between SQLite, PostgreSQL and MySQL/MariaDB.

``impl_of(conn)`` is the engine's ``EngineImpl`` (``base.py``: what every engine does alike, or the SQL
standard's way), one subclass per engine in a module of its own (``sqlite.py``, ``postgresql.py``,
``mysql.py``). Operations call it and never ask which engine they run on.

To add an engine: write ``<engine>.py`` with a subclass of ``EngineImpl`` overriding what that engine does
differently, and name its module in ``_MODULES`` below. Each module is imported only for the engine in use,
with its SQLAlchemy dialect: they are slow to import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statestore_cli.db.engines.base import EngineImpl

# SQLAlchemy's dialect name -> the module of its implementation (MariaDB is MySQL's, with its differences inside).
_MODULES = {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}


def impl_of(bind: Any) -> EngineImpl:
    """The implementation for ``bind``'s engine: a ``Connection``, ``Engine``, ``URL`` or a dialect name.
    Implementations hold no state, so each dialect name has one instance, shared."""
    name = bind if isinstance(bind, str) else _dialect_name(bind)
    found = _IMPLS.get(name)
    if found is None:
        module = _MODULES.get(name, "base")
        found = _IMPLS[name] = import_module(f"{__name__}.{module}").IMPL_CLASS(name)
    return found


def _dialect_name(bind: Any) -> str:
    dialect = getattr(bind, "dialect", None)
    if dialect is not None:  # a Connection or an Engine
        return str(dialect.name)
    return str(bind.get_backend_name())  # a URL


_IMPLS: dict[str, EngineImpl] = {}
