"""statestore: a standalone tool and library for Apache Airflow's task and asset state store.

The public names below are imported on first use, so ``import statestore_cli`` (and the CLI's start
up) does not pay for SQLAlchemy until something needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "1.0.0"

_EXPORTS = {
    "NEVER_EXPIRE": "statestore_cli.model.retention",
    "AssetScope": "statestore_cli.model.scopes",
    "StoreScope": "statestore_cli.model.scopes",
    "TaskScope": "statestore_cli.model.scopes",
    "AssetStateStoreAccessor": "statestore_cli.backends.accessors",
    "StateReferenceWarning": "statestore_cli.backends.accessors",
    "StateValueTooLargeWarning": "statestore_cli.backends.accessors",
    "TaskStateStoreAccessor": "statestore_cli.backends.accessors",
    "BaseStoreBackend": "statestore_cli.backends.base",
    "FilesystemBackend": "statestore_cli.backends.filesystem",
    "StoredRef": "statestore_cli.backends.base",
    "MetastoreBackend": "statestore_cli.backends.metastore",
    "Settings": "statestore_cli.config",
    "load_settings": "statestore_cli.config",
    "BackendError": "statestore_cli.errors",
    "ConfigError": "statestore_cli.errors",
    "DatabaseError": "statestore_cli.errors",
    "InvalidInputError": "statestore_cli.errors",
    "NotFoundError": "statestore_cli.errors",
    "SchemaMissingError": "statestore_cli.errors",
    "StateStoreError": "statestore_cli.errors",
    "Store": "statestore_cli.backends.store",
    "accessor": "statestore_cli.backends.store",
    "task_instance_cleared": "statestore_cli.ops.lifecycle",
    "task_instance_succeeded": "statestore_cli.ops.lifecycle",
}

__all__ = [
    "NEVER_EXPIRE",
    "AssetScope",
    "AssetStateStoreAccessor",
    "BackendError",
    "BaseStoreBackend",
    "ConfigError",
    "DatabaseError",
    "FilesystemBackend",
    "InvalidInputError",
    "MetastoreBackend",
    "NotFoundError",
    "SchemaMissingError",
    "Settings",
    "StateReferenceWarning",
    "StateStoreError",
    "StateValueTooLargeWarning",
    "Store",
    "StoreScope",
    "StoredRef",
    "TaskScope",
    "TaskStateStoreAccessor",
    "accessor",
    "load_settings",
    "task_instance_cleared",
    "task_instance_succeeded",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'statestore_cli' has no attribute {name!r}")


if TYPE_CHECKING:
    from statestore_cli.backends.accessors import (
        AssetStateStoreAccessor,
        StateReferenceWarning,
        StateValueTooLargeWarning,
        TaskStateStoreAccessor,
    )
    from statestore_cli.backends.base import BaseStoreBackend, StoredRef
    from statestore_cli.backends.filesystem import FilesystemBackend
    from statestore_cli.backends.metastore import MetastoreBackend
    from statestore_cli.backends.store import Store, accessor
    from statestore_cli.config import Settings, load_settings
    from statestore_cli.errors import (
        BackendError,
        ConfigError,
        DatabaseError,
        InvalidInputError,
        NotFoundError,
        SchemaMissingError,
        StateStoreError,
    )
    from statestore_cli.model.retention import NEVER_EXPIRE
    from statestore_cli.model.scopes import AssetScope, StoreScope, TaskScope
    from statestore_cli.ops.lifecycle import task_instance_cleared, task_instance_succeeded
