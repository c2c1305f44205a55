"""``BaseStoreBackend``: the interface every backend implements, and the hooks a worker-side backend overrides."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from statestore_cli.scopes import AssetScope, StoreScope, TaskScope

JsonValue = Any  # any JSON document except null
REF_MARKER = "__airflow_state_ref__"


class BaseStoreBackend(ABC):
    """Stores JSON-encoded values per scope and key.

    Values travel as JSON strings and are never the JSON ``null``. ``session`` lets a caller run
    the operation inside its own transaction; what it may be is the backend's business.
    """

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

    def get_value(self, scope: StoreScope, key: str, *, session: Any = None) -> JsonValue | None:
        """The decoded value, or None when missing; a backend storing values natively may override it."""
        stored = self.get(scope, key, session=session)
        return None if stored is None else json.loads(stored)

    async def aget_value(self, scope: StoreScope, key: str, *, session: Any = None) -> JsonValue | None:
        stored = await self.aget(scope, key, session=session)
        return None if stored is None else json.loads(stored)

    def cleanup(self) -> None:  # noqa: B027 - an optional hook, deliberately not abstract
        """Hook for a custom backend's own retention, run from its own maintenance process."""

    # Worker-side hooks: a worker backend stores the payload elsewhere and returns a reference.
    def serialize_task_state_store_to_ref(self, *, value: JsonValue, key: str, scope: TaskScope) -> str:
        return json.dumps(value)

    def deserialize_task_state_store_from_ref(self, stored: str) -> JsonValue:
        return json.loads(stored)

    def serialize_asset_state_store_to_ref(self, *, value: JsonValue, key: str, scope: AssetScope) -> str:
        return json.dumps(value)

    def deserialize_asset_state_store_from_ref(self, stored: str) -> JsonValue:
        return json.loads(stored)


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
