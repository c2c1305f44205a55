"""The state store as the settings name it, opened once for a command or a library caller: ``Store``.

A ``Store`` owns the one engine (``Database``) on ``[database] sql_alchemy_conn``, made on first use and
disposed by ``close()``, the configured ``[state_store] backend`` and the ``[workers] state_store_backend``
(each loaded on first use), and makes accessors wired with both. Every public operation of
``statestore_cli.ops`` takes one as its first argument::

    with Store.open(load_settings()) as store:
        entries = list(list_entries(store, KeyFilter(dag_id="etl")))
        clear_scope(store, TaskScope("etl", run_id, "load"))
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeGuard

from statestore_cli.backends.accessors import AssetStateStoreAccessor, DagRunStateStoreAccessor, TaskStateStoreAccessor
from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.backends.loader import load_backend_class
from statestore_cli.config import Settings
from statestore_cli.errors import BackendError, ConfigError, InvalidInputError, StateStoreError, first_line
from statestore_cli.model.scopes import DagRunScope, StoreScope, TaskScope

if TYPE_CHECKING:  # each imported where its mode runs: API mode loads neither SQLAlchemy nor the database's modules
    from sqlalchemy.engine import Engine

    from statestore_cli.backends.api_backend import ApiBackend
    from statestore_cli.backends.metastore import MetastoreBackend
    from statestore_cli.db.database import Database, StoreOrigin

Accessor = TaskStateStoreAccessor | AssetStateStoreAccessor | DagRunStateStoreAccessor


class Store:
    """The store ``settings`` name. ``writes=False``: for a command that only reads (get, list, stats,
    export, db check): its server sessions are spared the lock timeout, which reads there never wait for,
    and a lock wait on SQLite names no --lock-timeout (see ``open_database``). ``create_file``: a missing
    SQLite file is created (``db init``) instead of refused."""

    def __init__(
        self, settings: Settings, *, writes: bool = True, create_file: bool = False, command: str = "this command"
    ) -> None:
        self.settings = settings
        self.command = command  # what the store is opened for, as a refusal in API mode names it
        self.writes = writes
        self.create_file = create_file
        self._database: Database | None = None
        self._metastore: MetastoreBackend | None = None
        self._backend: BaseStoreBackend | None = None
        self._worker: BaseStoreBackend | None = None
        self._worker_loaded = False

    @classmethod
    def open(
        cls, settings: Settings, *, writes: bool = True, create_file: bool = False, command: str = "this command"
    ) -> Store:
        """The store ``settings`` name; nothing is connected, nor any backend loaded, until an operation needs it.
        ``command``: what it is opened for, as a message names it (``statestore db check``)."""
        return cls(settings, writes=writes, create_file=create_file, command=command)

    # -- what it owns, each made on first use -------------------------------------------------------------
    @property
    def api_mode(self) -> bool:
        """True where the settings name Airflow's REST API (``--api-url``): no database is opened."""
        return bool(self.settings.api_url)

    @property
    def database(self) -> Database:
        """The one engine on ``[database] sql_alchemy_conn`` (with what its messages need)."""
        if self.api_mode:
            raise needs_database(self.command)
        if self._database is None:
            from statestore_cli.db.database import open_database

            settings = self.settings
            self._database = open_database(
                settings.sql_alchemy_conn,
                create_file=self.create_file,
                connect_timeout=settings.connect_timeout,
                lock_timeout=settings.lock_timeout,
                writes=self.writes,
                schema=settings.sql_alchemy_schema,
                connect_args=settings.connect_args(),
                engine_args=settings.engine_args,
                origin=self.origin,
            )
        return self._database

    @property
    def engine(self) -> Engine:
        return self.database.engine

    @property
    def origin(self) -> StoreOrigin:
        """Why the URL is the one it is, and the command that creates the store there."""
        from statestore_cli.db.database import StoreOrigin

        return StoreOrigin(*self.settings.conn_origin(), self.settings.init_command())

    @property
    def metastore(self) -> MetastoreBackend:
        """The built-in backend on the store's engine, whatever ``[state_store] backend`` says."""
        if self._metastore is None:
            from statestore_cli.backends.metastore import MetastoreBackend

            self._metastore = MetastoreBackend(self.database.engine)
        return self._metastore

    @property
    def backend(self) -> BaseStoreBackend:
        """The configured ``[state_store] backend``, ready to use; in API mode the REST API's."""
        if self._backend is None:
            if self.api_mode:
                self._backend = _api_backend(self.settings)
            elif self.settings.uses_builtin_backend:
                self._backend = self.metastore
            else:
                self._backend = _instantiate(self.settings, "state_store", "backend")
        return self._backend

    @property
    def worker_backend(self) -> BaseStoreBackend | None:
        """The ``[workers] state_store_backend``; None when none is configured."""
        if not self._worker_loaded:
            if self.settings.worker_backend:
                self._worker = _instantiate(self.settings, "workers", "state_store_backend")
            self._worker_loaded = True
        return self._worker

    def metastore_backend(self, what: str) -> MetastoreBackend:
        """The configured backend, which ``what`` (an operation, as its message names it) needs to be the
        metastore backend: ``BackendError`` when it is a custom one."""
        if self.api_mode:
            raise needs_database(what)
        backend = self.backend
        if not is_metastore(backend):
            raise BackendError(f"{what} needs the metastore backend; [state_store] backend is {self.settings.backend}")
        return backend

    def api_backend(self) -> ApiBackend:
        """The REST API's backend (API mode only)."""
        from statestore_cli.backends.api_backend import ApiBackend

        backend = self.backend
        assert isinstance(backend, ApiBackend), "not in API mode"
        return backend

    def api_requests(self) -> int | None:
        """The requests sent to the REST API so far (None: not in API mode)."""
        return self.api_backend().client.requests if self.api_mode else None

    def on_api_walk(self, listener: Callable[[int, int], None] | None) -> None:
        """Have ``listener`` hear (task instances read so far, of how many) as a walk of the REST API goes
        (``list``, ``export`` and ``clean`` of a run, a dag or every dag); None: no one. Off the API: nothing."""
        if self.api_mode:
            self.api_backend().on_walk = listener

    def listing_backend(self, what: str) -> MetastoreBackend | ApiBackend:
        """The backend that lists keys across scopes (``entries``): the metastore, or the REST API's."""
        if self.api_mode:
            return self.api_backend()
        return self.metastore_backend(what)

    def accessor(self, scope: StoreScope, *, oversize: str = "warn") -> Accessor:
        """An accessor for ``scope`` on the configured backend, with the worker backend for task and asset keys."""
        settings = self.settings
        common: dict[str, Any] = {"max_value_storage_bytes": settings.max_value_storage_bytes, "oversize": oversize}
        backend = self.backend
        if isinstance(scope, DagRunScope):
            if self.api_mode:
                from statestore_cli.backends.api_backend import NO_DAG_RUN_ROUTE

                raise InvalidInputError(NO_DAG_RUN_ROUTE)
            if not is_metastore(backend):  # Airflow 3.4 keeps dag-run keys in its metadata database
                raise BackendError(
                    f"dag-run keys need the metastore backend; [state_store] backend is {settings.backend}"
                )
            days = settings.dag_run_default_retention_days
            # No worker backend: its hooks are for task and asset keys, so it is not even loaded.
            return DagRunStateStoreAccessor(scope, backend, default_retention_days=days, **common)
        common["worker_backend"] = self.worker_backend
        if isinstance(scope, TaskScope):
            # Through the API a key written without a retention gets the server's own default.
            task_days = None if self.api_mode else settings.default_retention_days
            return TaskStateStoreAccessor(scope, backend, default_retention_days=task_days, **common)
        return AssetStateStoreAccessor(scope, backend, **common)

    # -- closing ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Dispose of the engine (its pooled connections close), or close the REST API's connections; a later
        operation would make new ones."""
        if self.api_mode and self._backend is not None:
            self.api_backend().close()
        if self._database is not None:
            self._database.dispose()
        self._database = None
        self._metastore = None
        if self.settings.uses_builtin_backend:
            self._backend = None

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def accessor(settings: Settings, scope: StoreScope, *, oversize: str = "warn", writes: bool = True) -> Accessor:
    """An accessor for ``scope`` on a store of its own (``Store.accessor``), for a caller that needs just one;
    its engine goes with the accessor (``writes``: see ``Store``)."""
    return Store.open(settings, writes=writes).accessor(scope, oversize=oversize)


def is_metastore(backend: BaseStoreBackend) -> TypeGuard[MetastoreBackend]:
    """Whether ``backend`` keeps its keys in the state store tables, as ``isinstance(backend,
    MetastoreBackend)`` says, without importing that module (and SQLAlchemy) where the backend is another."""
    return backend.in_tables


def needs_database(what: str) -> ConfigError:
    """The refusal of an operation the REST API cannot serve (``--api-url``), naming the way that can."""
    return ConfigError(
        f"{what} needs the metadata database, and Airflow's REST API (--api-url) has no route for it",
        hint="run it with --conn URL (or [database] sql_alchemy_conn) where the database can be reached",
    )


def _api_backend(settings: Settings) -> ApiBackend:
    from statestore_cli.backends.api_backend import ApiBackend
    from statestore_cli.backends.api_client import ApiClient, Credentials
    from statestore_cli.masking import register_secret

    token, username, password, source = settings.api_auth()
    register_secret(token or None)
    register_secret(password or None)
    renew = settings.renewal("state_store", "api_token")  # a token an api_token_cmd printed: print another
    credentials = Credentials(token, username, password, source=source, renew=renew)
    client = ApiClient(
        settings.api_url, credentials, ca_bundle=settings.api_ca_bundle, timeout=settings.connect_timeout
    )
    return ApiBackend(client, concurrency=settings.api_concurrency)


def _instantiate(settings: Settings, section: str, option: str) -> BaseStoreBackend:
    cls = load_backend_class(settings.setting(section, option), config_file=settings.config_file)
    try:
        return cls.from_settings(settings)
    except StateStoreError:
        raise  # already says what is wrong (a backend's own option, checked in from_settings)
    except Exception as exc:  # user code: any failure is the backend's
        raise BackendError(f"cannot create [{section}] {option} {cls.__qualname__}: {first_line(exc)}") from None
