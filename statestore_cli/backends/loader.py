"""Turn a configured dotted path into a ``BaseStoreBackend`` subclass, or a one-line ``ConfigError``."""

from __future__ import annotations

import importlib

from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.config import Setting, describe_source
from statestore_cli.errors import ConfigError, first_line


def load_backend_class(setting: Setting) -> type[BaseStoreBackend]:
    path = str(setting.value)
    where = f"{describe_source(setting)}: [{setting.spec.section}] {setting.spec.option} = {path!r}"
    module_name, _, class_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import of user code can fail in any way
        raise ConfigError(
            f"{where}: cannot import module {module_name!r} ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"{where}: module {module_name!r} has no class {class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, BaseStoreBackend)):
        raise ConfigError(f"{where}: {path} is not a subclass of statestore_cli.BaseStoreBackend")
    return cls
