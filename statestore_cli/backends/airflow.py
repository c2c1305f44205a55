"""Airflow's own backend classes, used through an adapter that is one of ours.

A class configured as ``[state_store] backend`` or ``[workers] state_store_backend`` may subclass
Airflow's ``BaseStoreBackend`` (``airflow.sdk.state``, as the common-io provider's
``StateStoreObjectStorageBackend`` does, or airflow-core's ``airflow.state``) instead of ours.
``adapt`` recognises one by its bases and wraps it in an ``AirflowBackend``: its methods and hooks get
Airflow's own scope objects, and whatever they raise becomes a ``BackendError`` naming the method.

Airflow is never imported here on its own account: the user's module has already imported it (its
class subclasses Airflow's), so a configuration naming one of our classes pays nothing for this.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from statestore_cli.backends.base import BaseStoreBackend, JsonValue, StoredRef
from statestore_cli.errors import BackendError, ConfigError, InvalidInputError, StateStoreError, first_line
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope

if TYPE_CHECKING:
    from typing import Self

    from statestore_cli.config import Settings

# Where Airflow defines BaseStoreBackend with its TaskScope and AssetScope beside it: the task SDK's
# copy (what ``airflow.sdk.state`` exports, for worker-side backends) and airflow-core's (what
# ``airflow.state`` exports). In 3.3.2 they are two distinct classes with the same interface.
AIRFLOW_BASE_MODULES = ("airflow.sdk._shared.state", "airflow._shared.state", "airflow.sdk.state", "airflow.state")
OBJECT_STORAGE_CLASS = ("airflow.providers.common.io.state_store.backend", "StateStoreObjectStorageBackend")
OBJECT_STORAGE_SECTION, OBJECT_STORAGE_OPTION = "common.io", "state_store_objectstorage_path"

_ADAPTERS: dict[type, type[AirflowBackend]] = {}


def airflow_scopes(cls: type) -> ModuleType | None:
    """The module of the Airflow ``BaseStoreBackend`` that ``cls`` subclasses (it holds the scope
    classes the backend matches on), or None when ``cls`` is not an Airflow backend."""
    for klass in cls.__mro__:
        if klass.__name__ == "BaseStoreBackend" and klass.__module__ in AIRFLOW_BASE_MODULES:
            module = sys.modules.get(klass.__module__)
            if module is not None and hasattr(module, "TaskScope") and hasattr(module, "AssetScope"):
                return module
    return None


def adapt(cls: type, config_file: Path | None = None) -> type[AirflowBackend] | None:
    """Our adapter class for the Airflow backend ``cls`` (one per class), or None when ``cls`` is not
    one. ``config_file``: the file statestore read its settings from; Airflow's ``conf``, which the
    backend reads its own options through, reads it too (see ``share_config``)."""
    scopes = airflow_scopes(cls)
    if scopes is None:
        return None
    share_config(config_file)
    if cls not in _ADAPTERS:
        base = ObjectStorageBackend if _is_object_storage(cls) else AirflowBackend
        task_fields = {f.name for f in dataclasses.fields(scopes.TaskScope)}
        # Named as the wrapped class: every message about "the backend" names what the user configured.
        _ADAPTERS[cls] = type(
            cls.__name__,
            (base,),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "airflow_class": cls,
                "scopes": scopes,
                "task_scope_fields": frozenset(task_fields),
                "supports_regions": "region_id" in task_fields,
            },
        )
    return _ADAPTERS[cls]


def share_config(config_file: Path | None) -> None:
    """Make Airflow's ``conf`` read ``config_file`` as well.

    Airflow's backend reads its options (``[common.io] state_store_objectstorage_path``) through
    Airflow's ``conf``, which looks for its file on its own: ``$AIRFLOW_CONFIG``, else
    ``$AIRFLOW_HOME/airflow.cfg``, and reads ``AIRFLOW__SECTION__KEY`` variables (a dot in the section
    becomes ``_``) from the process environment. Without ``--config`` statestore finds the same file the
    same way; with it, the file given is read into Airflow's ``conf`` on top of what Airflow found, so
    the options written there reach the backend too (environment variables still win, as they do for
    statestore)."""
    if config_file is None:
        return
    import importlib

    try:
        # The task SDK's conf is created on first use; asking for it here creates it before any
        # backend method reads an option.
        confs = [importlib.import_module("airflow.sdk.configuration").conf]
        core = sys.modules.get("airflow.configuration")  # airflow-core's, only when something loaded it
        if core is not None and getattr(core, "conf", None) is not None and core.conf is not confs[0]:
            confs.append(core.conf)
        for conf in confs:
            conf.read(str(config_file))
    except Exception as exc:  # Airflow's configuration code: any failure is a configuration problem
        raise ConfigError(
            f"Airflow's configuration could not read {config_file} ({type(exc).__name__}: {first_line(exc)})"
        ) from None


def _is_object_storage(cls: type) -> bool:
    return any((k.__module__, k.__name__) == OBJECT_STORAGE_CLASS for k in cls.__mro__)


class AirflowBackend(BaseStoreBackend):
    """One of our backends around an instance of an Airflow backend class (``inner``)."""

    airflow_class: ClassVar[type[Any]]
    scopes: ClassVar[ModuleType]  # Airflow's module holding the TaskScope and AssetScope it matches on
    task_scope_fields: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        # Airflow's backends take no arguments: Airflow instantiates them as ``cls()``.
        return cls(cls.airflow_class())

    @property
    def name(self) -> str:
        return self.airflow_class.__qualname__

    # -- scopes ----------------------------------------------------------------------------------
    def airflow_scope(self, scope: StoreScope) -> Any:
        """``scope`` as Airflow's own scope class, with only the fields that class has."""
        if isinstance(scope, TaskScope):
            fields: dict[str, Any] = {
                "dag_id": scope.dag_id,
                "run_id": scope.run_id,
                "task_id": scope.task_id,
                "map_index": scope.map_index,
            }
            if "region_id" in self.task_scope_fields:
                fields["region_id"] = scope.region_id
            elif scope.region_id.int:
                raise InvalidInputError(
                    f"{self.name} cannot address region_id={scope.region_id}: the TaskScope of the installed "
                    f"Airflow ({self.scopes.__name__}) has no region_id (Airflow 3.3 has none); leave the region out"
                )
            return self.scopes.TaskScope(**{k: v for k, v in fields.items() if k in self.task_scope_fields})
        if isinstance(scope, DagRunScope):  # the accessor keeps dag-run keys on the metastore
            raise InvalidInputError(f"{self.name} (an Airflow 3.3 backend) holds no dag-run keys")
        return self.scopes.AssetScope(asset_id=scope.asset_id, name=scope.name, uri=scope.uri)

    # -- calling user code -----------------------------------------------------------------------
    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.inner, method)(*args, **kwargs)
        except StateStoreError:
            raise
        except Exception as exc:  # user code: any failure is the backend's
            raise BackendError(f"{self.name}.{method}() failed: {type(exc).__name__}: {first_line(exc)}") from None

    async def _await(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            call: Callable[..., Awaitable[Any]] = getattr(self.inner, method)
            return await call(*args, **kwargs)
        except StateStoreError:
            raise
        except Exception as exc:  # user code: any failure is the backend's
            raise BackendError(f"{self.name}.{method}() failed: {type(exc).__name__}: {first_line(exc)}") from None

    @staticmethod
    def _refuse_null(value: str) -> None:
        # Airflow's execution API and accessors refuse a null before any backend sees it; its backends
        # rely on that and would store it. Through the adapter the backend gets the same guarantee.
        if value.strip() == "null":
            raise InvalidInputError("a state value cannot be JSON null; delete the key instead")

    # -- the store -------------------------------------------------------------------------------
    # Airflow's methods return None from set, delete and clear: how many rows went is not said.
    def get(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        stored = self._call("get", self.airflow_scope(scope), key, session=session)
        if stored is not None and not isinstance(stored, str):
            raise BackendError(f"{self.name}.get() returned {type(stored).__name__}, not a JSON string")
        return stored

    def set(self, scope: StoreScope, key: str, value: str, *, expires_at: Any = None, session: Any = None) -> None:
        self._refuse_null(value)
        self._call("set", self.airflow_scope(scope), key, value, expires_at=expires_at, session=session)

    def delete(self, scope: StoreScope, key: str, *, session: Any = None) -> None:
        self._call("delete", self.airflow_scope(scope), key, session=session)

    def clear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        self._call("clear", self.airflow_scope(scope), all_map_indices=all_map_indices, session=session)

    async def aget(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        stored = await self._await("aget", self.airflow_scope(scope), key, session=session)
        if stored is not None and not isinstance(stored, str):
            raise BackendError(f"{self.name}.aget() returned {type(stored).__name__}, not a JSON string")
        return stored

    async def aset(
        self, scope: StoreScope, key: str, value: str, *, expires_at: Any = None, session: Any = None
    ) -> None:
        self._refuse_null(value)
        await self._await("aset", self.airflow_scope(scope), key, value, expires_at=expires_at, session=session)

    async def adelete(self, scope: StoreScope, key: str, *, session: Any = None) -> None:
        await self._await("adelete", self.airflow_scope(scope), key, session=session)

    async def aclear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        await self._await("aclear", self.airflow_scope(scope), all_map_indices=all_map_indices, session=session)

    def cleanup(self) -> Any:
        return self._call("cleanup")

    # -- the worker-side hooks -------------------------------------------------------------------
    def serialize_task_state_store_to_ref(self, *, value: JsonValue, key: str, scope: TaskScope) -> str:
        if value is None:
            raise InvalidInputError("a state value cannot be None (JSON null); delete the key instead")
        scoped = self.airflow_scope(scope)
        return str(self._call("serialize_task_state_store_to_ref", value=value, key=key, scope=scoped))

    def deserialize_task_state_store_from_ref(self, stored: str) -> JsonValue:
        return self._call("deserialize_task_state_store_from_ref", stored)

    def serialize_asset_state_store_to_ref(self, *, value: JsonValue, key: str, scope: AssetScope) -> str:
        if value is None:
            raise InvalidInputError("a state value cannot be None (JSON null); delete the key instead")
        scoped = self.airflow_scope(scope)
        return str(self._call("serialize_asset_state_store_to_ref", value=value, key=key, scope=scoped))

    def deserialize_asset_state_store_from_ref(self, stored: str) -> JsonValue:
        return self._call("deserialize_asset_state_store_from_ref", stored)


class ObjectStorageBackend(AirflowBackend):
    """The common-io provider's ``StateStoreObjectStorageBackend`` (or a subclass), which can also list
    and delete its objects for ``statestore orphans``.

    The provider lays its objects out under ``[common.io] state_store_objectstorage_path`` as
    ``<dag_id>/<run_id>/[region=<region_id>/]<task_id>/<map_index>/<key>[.<compression suffix>]`` and
    ``assets/<asset name, uri or id>/<key>[.<suffix>]``, each segment percent-quoted, and its serialize
    hooks return ``str()`` of that ObjectStoragePath: that is the reference a database row holds."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        # The provider only reads the option on first use; unset, it would fail there with Airflow's words.
        if not _object_storage_path():
            raise ConfigError(
                f"[{OBJECT_STORAGE_SECTION}] {OBJECT_STORAGE_OPTION} is not set: {cls.airflow_class.__qualname__} "
                "keeps values under it; set it in the Airflow config file or as "
                "AIRFLOW__COMMON_IO__STATE_STORE_OBJECTSTORAGE_PATH (e.g. s3://conn_id@bucket/state/)"
            )
        return super().from_settings(settings)

    def _base(self) -> Any:
        from airflow.sdk import ObjectStoragePath  # type: ignore[import-not-found, unused-ignore]

        return ObjectStoragePath(_object_storage_path())

    def list_refs(self) -> Iterator[StoredRef]:
        base = self._base()
        prefix = base.path.rstrip("/")
        # One listing with details (no stat per object); a base path nothing was written to yet is empty.
        found = base.fs.find(base.path, detail=True) if base.fs.exists(base.path) else {}
        for path, info in sorted(found.items()):
            if info.get("type", "file") != "file" or not path.startswith(prefix + "/"):
                continue
            parts = path[len(prefix) + 1 :].split("/")
            if not _is_state_object(parts):
                continue  # not laid out as the backend writes state: another tool's file under the same path
            ref = base
            for part in parts:  # the provider's own arithmetic: base / segment / ...
                ref = ref / part
            yield StoredRef(str(ref), _modified_at(info))

    def delete_ref(self, ref: str) -> None:
        from airflow.sdk import ObjectStoragePath  # type: ignore[import-not-found, unused-ignore]

        base, path = self._base(), ObjectStoragePath(ref)
        if not path.is_relative_to(base):
            raise ValueError(f"{ref} is not under [{OBJECT_STORAGE_SECTION}] {OBJECT_STORAGE_OPTION} {base}")
        path.unlink(missing_ok=True)


def _object_storage_path() -> str:
    # The provider reads it through this conf (the task SDK's, else airflow-core's).
    from airflow.providers.common.compat.sdk import conf  # type: ignore[import-not-found, unused-ignore]

    return str(conf.get(OBJECT_STORAGE_SECTION, OBJECT_STORAGE_OPTION, fallback="") or "")


def _is_state_object(parts: list[str]) -> bool:
    if len(parts) == 3 and parts[0] == "assets":
        return True
    return len(parts) == 5 or (len(parts) == 6 and parts[2].startswith("region="))


def _modified_at(info: dict[str, Any]) -> datetime | None:
    """When an object was last written, from an fsspec listing entry (each filesystem names it its way)."""
    for field in ("mtime", "LastModified", "last_modified", "updated", "modified", "created", "timeCreated"):
        value = info.get(field)
        if isinstance(value, datetime):
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return None
