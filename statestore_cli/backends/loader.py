"""Turn a configured dotted path into a ``BaseStoreBackend`` subclass, or a one-line ``ConfigError``.

A class of Airflow's (a subclass of ``airflow.sdk.state.BaseStoreBackend``) comes back wrapped in
our adapter (``backends.airflow``); that module is only imported for a class that is not ours.
"""

from __future__ import annotations

from pathlib import Path

from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.config import Setting, describe_source
from statestore_cli.config.dotted_paths import import_named
from statestore_cli.errors import ConfigError


def load_backend_class(setting: Setting, *, config_file: Path | None = None) -> type[BaseStoreBackend]:
    """``config_file``: the file the settings came from, for Airflow's ``conf`` to read as well when
    the class is Airflow's (its options, such as ``[common.io]``, are read through that ``conf``)."""
    path = str(setting.value)
    where = f"{describe_source(setting)}: [{setting.spec.section}] {setting.spec.option} = {path!r}"
    cls = import_named(path, where, "class")
    if isinstance(cls, type) and issubclass(cls, BaseStoreBackend):
        return cls
    if isinstance(cls, type):
        from statestore_cli.backends.airflow import adapt

        try:
            adapted = adapt(cls, config_file)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if adapted is not None:
            return adapted
    raise ConfigError(
        f"{where}: {path} is not a subclass of statestore_cli.BaseStoreBackend "
        "or of Airflow's airflow.sdk.state.BaseStoreBackend"
    )
