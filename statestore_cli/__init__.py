"""statestore: a standalone tool and library for Apache Airflow's task and asset state store."""

from statestore_cli.accessors import AssetStateStoreAccessor, StateValueTooLargeWarning, TaskStateStoreAccessor
from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.backends.metastore import MetastoreBackend
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
from statestore_cli.retention import NEVER_EXPIRE
from statestore_cli.scopes import AssetScope, StoreScope, TaskScope

__version__ = "0.1.0"

__all__ = [
    "NEVER_EXPIRE",
    "AssetScope",
    "AssetStateStoreAccessor",
    "BackendError",
    "BaseStoreBackend",
    "ConfigError",
    "DatabaseError",
    "InvalidInputError",
    "MetastoreBackend",
    "NotFoundError",
    "SchemaMissingError",
    "Settings",
    "StateStoreError",
    "StateValueTooLargeWarning",
    "StoreScope",
    "TaskScope",
    "TaskStateStoreAccessor",
    "load_settings",
]
