"""Opening stores as the settings say: the configured backend, the worker backend, and accessors
wired with both."""

from __future__ import annotations

from typing import Any

from statestore_cli.backends.accessors import AssetStateStoreAccessor, DagRunStateStoreAccessor, TaskStateStoreAccessor
from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.backends.loader import load_backend_class
from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.config import Settings
from statestore_cli.db.database import StoreOrigin, make_engine
from statestore_cli.errors import BackendError, StateStoreError, first_line
from statestore_cli.model.scopes import DagRunScope, StoreScope, TaskScope


def open_metastore(settings: Settings, *, create_file: bool = False, writes: bool = True) -> MetastoreBackend:
    """The built-in backend on ``[database] sql_alchemy_conn``. ``writes=False``: for a command that only
    reads (get, list, stats, export, db check): its server sessions are spared the lock timeout, which
    reads there never wait for, and a lock wait on SQLite names no --lock-timeout (see ``make_engine``)."""
    engine = make_engine(
        settings.sql_alchemy_conn,
        create_file=create_file,
        connect_timeout=settings.connect_timeout,
        lock_timeout=settings.lock_timeout,
        writes=writes,
        schema=settings.sql_alchemy_schema,
        connect_args=settings.connect_args(),
        engine_args=settings.engine_args,
        origin=StoreOrigin(*settings.conn_origin(), settings.init_command()),
    )
    return MetastoreBackend(engine)


def open_backend(settings: Settings, *, writes: bool = True) -> BaseStoreBackend:
    """The configured ``[state_store] backend``, ready to use (``writes``: see ``open_metastore``)."""
    if settings.uses_builtin_backend:
        return open_metastore(settings, writes=writes)
    return _instantiate(settings, "state_store", "backend")


def open_worker_backend(settings: Settings) -> BaseStoreBackend | None:
    if not settings.worker_backend:
        return None
    return _instantiate(settings, "workers", "state_store_backend")


def _instantiate(settings: Settings, section: str, option: str) -> BaseStoreBackend:
    cls = load_backend_class(settings.setting(section, option), config_file=settings.config_file)
    try:
        return cls.from_settings(settings)
    except StateStoreError:
        raise  # already says what is wrong (a backend's own option, checked in from_settings)
    except Exception as exc:  # user code: any failure is the backend's
        raise BackendError(f"cannot create [{section}] {option} {cls.__qualname__}: {first_line(exc)}") from None


def accessor(
    settings: Settings, scope: StoreScope, *, oversize: str = "warn", writes: bool = True
) -> TaskStateStoreAccessor | AssetStateStoreAccessor | DagRunStateStoreAccessor:
    """An accessor for ``scope`` wired as the settings say (``writes``: see ``open_metastore``)."""
    common: dict[str, Any] = {"max_value_storage_bytes": settings.max_value_storage_bytes, "oversize": oversize}
    backend = open_backend(settings, writes=writes)
    if isinstance(scope, DagRunScope):
        if not isinstance(backend, MetastoreBackend):  # Airflow 3.4 keeps dag-run keys in its metadata database
            raise BackendError(f"dag-run keys need the metastore backend; [state_store] backend is {settings.backend}")
        days = settings.dag_run_default_retention_days
        # No worker backend: its hooks are for task and asset keys, so it is not even loaded.
        return DagRunStateStoreAccessor(scope, backend, default_retention_days=days, **common)
    common["worker_backend"] = open_worker_backend(settings)
    if isinstance(scope, TaskScope):
        return TaskStateStoreAccessor(scope, backend, default_retention_days=settings.default_retention_days, **common)
    return AssetStateStoreAccessor(scope, backend, **common)
