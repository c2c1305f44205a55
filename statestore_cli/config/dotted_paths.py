"""Dotted-path imports: the user's object a config option names (a class, a dict of connect arguments),
imported with its files checked first, or a one-line ``ConfigError``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statestore_cli.errors import ConfigError, first_line


def import_object(path: str, where: str, home: Path) -> Any:
    """The object at dotted ``path`` (a config option at ``where``), or a one-line ``ConfigError``.
    ``$AIRFLOW_HOME/config`` is importable, as Airflow makes it (``airflow_local_settings`` lives there)."""
    import sys

    folder = str(home / "config")
    if folder not in sys.path:
        sys.path.append(folder)
    return import_named(path, where)


def import_named(path: str, where: str, what: str = "attribute") -> Any:
    """The ``what`` (an attribute, a class) at dotted ``path``, named by the option at ``where``, or a
    one-line ``ConfigError``: importing user code can fail in any way."""
    import importlib

    from statestore_cli.config.trust import check_module_files

    module_name, _, name = path.rpartition(".")
    try:
        check_module_files(module_name, where)  # before its code runs; finding it imports its packages
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import of user code can fail in any way
        raise ConfigError(
            f"{where}: cannot import module {module_name!r} ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    except SystemExit as exc:  # sys.exit() at import: left alone it would end the command as if it had succeeded
        raise ConfigError(
            f"{where}: importing module {module_name!r} raised SystemExit({exc.code!r}); a module named by a "
            "dotted path must not exit when it is imported: remove the exit (an argparse or script entry point "
            "run at import, often) or name another module"
        ) from None
    # KeyboardInterrupt goes on: whether Ctrl-C or the module raised it, the command was interrupted (130).
    if not hasattr(module, name):
        raise ConfigError(f"{where}: module {module_name!r} has no {what} {name!r}")
    return getattr(module, name)
