"""``BaseStoreBackend``: the interface every backend implements, and the hooks a worker-side backend overrides."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from statestore_cli.model.entries import Entry
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope

if TYPE_CHECKING:
    from typing import Self

    from statestore_cli.config import Settings

JsonValue = Any  # any JSON document except null
REF_MARKER = "__airflow_state_ref__"


def stored_ref(decoded: JsonValue) -> str | None:
    """The worker-side reference a decoded database value holds, or None when it is a plain value."""
    if isinstance(decoded, dict) and set(decoded) == {REF_MARKER} and isinstance(decoded[REF_MARKER], str):
        return str(decoded[REF_MARKER])
    return None


class StoredRef(NamedTuple):
    """One object a worker-side backend holds: its reference (as the serialize hook returned it) and
    when it was last written (UTC; None when the store cannot say)."""

    ref: str
    modified_at: datetime | None


class BaseStoreBackend(ABC):
    """Stores JSON-encoded values per scope and key.

    Values travel as JSON strings and are never the JSON ``null``. ``session`` lets a caller run
    the operation inside its own transaction; what it may be is the backend's business.
    """

    # False: a task scope's region_id cannot be addressed (an Airflow 3.3 backend, whose TaskScope has
    # none); `backend check` then leaves the region cases out.
    supports_regions: ClassVar[bool] = True
    # True: ``replace`` writes a key's value and keeps its expiry (``set --keep-expiry``).
    can_replace: ClassVar[bool] = False
    # True: the keys are the rows of the state store tables (``MetastoreBackend``, see ``is_metastore``).
    in_tables: ClassVar[bool] = False

    @abstractmethod
    def get(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        """The stored JSON string, or None when the key does not exist."""

    @abstractmethod
    def set(self, scope: StoreScope, key: str, value: str, *, expires_at: Any = None, session: Any = None) -> None:
        """Insert or replace the key; ``expires_at`` is an absolute UTC datetime or None (task scope only)."""

    @abstractmethod
    def delete(self, scope: StoreScope, key: str, *, session: Any = None) -> int | None:
        """Remove one key; a missing key is not an error. May return the number of rows removed."""

    @abstractmethod
    def clear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> int | None:
        """Remove every key of the scope (a task scope: only its map index unless ``all_map_indices``)."""

    @abstractmethod
    async def aget(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None: ...

    @abstractmethod
    async def aset(
        self, scope: StoreScope, key: str, value: str, *, expires_at: Any = None, session: Any = None
    ) -> None: ...

    @abstractmethod
    async def adelete(self, scope: StoreScope, key: str, *, session: Any = None) -> int | None: ...

    @abstractmethod
    async def aclear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> int | None: ...

    def describe(self, scope: StoreScope, key: str, *, session: Any = None) -> Entry | None:
        """The key as ``get`` shows it (its value still JSON text), or None when it does not exist; a backend
        that keeps when a key was written and when it expires overrides this to say so."""
        stored = self.get(scope, key, session=session)
        return None if stored is None else bare_entry(scope, key, stored)

    def replace(self, scope: StoreScope, key: str, value: str, *, session: Any = None) -> int:
        """Replace an existing key's value keeping its expiry; how many keys were written (0: not there).
        Only where ``can_replace``."""
        raise NotImplementedError(f"{type(self).__qualname__} cannot replace a value and keep its expiry")

    def has_asset(self, scope: AssetScope) -> bool:
        """Whether the asset scope names an asset that exists; a backend that keeps no assets of its own
        (every asset scope is only a name to it) says yes."""
        return True

    def has_run(self, scope: TaskScope | DagRunScope) -> bool:
        """Whether the scope's dag run exists; a backend that knows no dag runs says yes."""
        return True

    def asset_names(self) -> list[str]:
        """The names of the assets there are: the candidates of a "did you mean" (none where unknown)."""
        return []

    def get_value(self, scope: StoreScope, key: str, *, session: Any = None) -> JsonValue | None:
        """The decoded value, or None when missing; a backend storing values natively may override it."""
        stored = self.get(scope, key, session=session)
        return None if stored is None else json.loads(stored)

    async def aget_value(self, scope: StoreScope, key: str, *, session: Any = None) -> JsonValue | None:
        stored = await self.aget(scope, key, session=session)
        return None if stored is None else json.loads(stored)

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The instance the configuration asks for; a backend with options of its own reads them here
        (``settings.extra_option``). The default takes no arguments."""
        return cls()

    def cleanup(self) -> Any:
        """Hook for a custom backend's own retention, run from its own maintenance process (or by
        ``statestore clean --backend-cleanup``, which reports what it returns). The default does nothing."""
        return None

    # Optional, for `statestore orphans`: a worker-side backend that can enumerate what it stores.
    def list_refs(self) -> Iterable[StoredRef]:
        """Every reference this backend holds, in the exact form its serialize hooks return."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement list_refs()")

    def delete_ref(self, ref: str) -> None:
        """Remove the object behind ``ref``; a missing object is not an error."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement delete_ref()")

    @classmethod
    def can_list_refs(cls) -> bool:
        return cls.list_refs is not BaseStoreBackend.list_refs

    # Worker-side hooks: a worker backend stores the payload elsewhere and returns a reference.
    def serialize_task_state_store_to_ref(self, *, value: JsonValue, key: str, scope: TaskScope) -> str:
        return json.dumps(value)

    def deserialize_task_state_store_from_ref(self, stored: str) -> JsonValue:
        return json.loads(stored)

    def serialize_asset_state_store_to_ref(self, *, value: JsonValue, key: str, scope: AssetScope) -> str:
        return json.dumps(value)

    def deserialize_asset_state_store_from_ref(self, stored: str) -> JsonValue:
        return json.loads(stored)


def bare_entry(scope: StoreScope, key: str, value: Any) -> Entry:
    """``key`` of ``scope`` holding ``value``, as a backend that keeps no timestamps describes it."""
    if isinstance(scope, TaskScope):
        return Entry("task", key, None, None, scope.dag_id, scope.run_id, scope.task_id, scope.map_index, value=value)
    if isinstance(scope, DagRunScope):
        return Entry("dag_run", key, None, None, scope.dag_id, scope.run_id, value=value)
    return Entry("asset", key, None, None, asset_id=scope.asset_id, name=scope.name, uri=scope.uri, value=value)


class ThreadOffloadMixin:
    """Async methods for a backend with a synchronous client: each call runs in a worker thread."""

    # asyncio is imported where it is used: a CLI run never needs it, and it costs start-up time.

    async def aget(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        import asyncio

        return await asyncio.to_thread(self.get, scope, key, session=session)  # type: ignore[attr-defined]

    async def aset(
        self, scope: StoreScope, key: str, value: str, *, expires_at: Any = None, session: Any = None
    ) -> None:
        import asyncio

        await asyncio.to_thread(self.set, scope, key, value, expires_at=expires_at, session=session)  # type: ignore[attr-defined]

    async def adelete(self, scope: StoreScope, key: str, *, session: Any = None) -> int | None:
        import asyncio

        return await asyncio.to_thread(self.delete, scope, key, session=session)  # type: ignore[attr-defined]

    async def aclear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> int | None:
        import asyncio

        return await asyncio.to_thread(self.clear, scope, all_map_indices=all_map_indices, session=session)  # type: ignore[attr-defined]
