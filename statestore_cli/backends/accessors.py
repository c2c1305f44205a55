"""What a task sees: ``TaskStateStoreAccessor`` and ``AssetStateStoreAccessor``.

Accessors encode values to JSON, compute ``expires_at`` on the writer's side, route values through a
worker-side backend's hooks when one is configured, and enforce ``max_value_storage_bytes``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from statestore_cli.backends.base import REF_MARKER, BaseStoreBackend, JsonValue, stored_ref
from statestore_cli.errors import PARAMETER, BackendError, InvalidInputError
from statestore_cli.model.retention import BACKEND_DEFAULT, Retention, compute_expires_at, utcnow
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope, check_key, missing_key


class StateValueTooLargeWarning(UserWarning):
    """A value larger than ``[state_store] max_value_storage_bytes`` was written."""


class StateReferenceWarning(UserWarning):
    """A stored value does not match the worker-side configuration: a plain value where
    ``[workers] state_store_backend`` is set, or a reference where it is not. Returned as stored."""


def encode_value(value: JsonValue) -> str:
    if value is None:
        raise InvalidInputError("a state value cannot be None (JSON null); delete the key instead")
    try:
        # Airflow stores json.dumps(value) as is: ASCII-escaped, so the bytes match what it writes.
        return json.dumps(value, allow_nan=False)
    except ValueError as exc:
        if "Out of range float" in str(exc):  # NaN, Infinity: Python writes them, JSON has no such values
            raise InvalidInputError("the value contains NaN or Infinity, which JSON cannot hold") from None
        raise InvalidInputError(f"the value is not JSON-serialisable: {exc}") from None
    except TypeError as exc:
        raise InvalidInputError(f"the value is not JSON-serialisable: {exc}") from None


class _Accessor:
    def __init__(
        self,
        scope: StoreScope,
        backend: BaseStoreBackend,
        *,
        worker_backend: BaseStoreBackend | None = None,
        max_value_storage_bytes: int = 65535,
        oversize: str = "warn",
        session: Any = None,
    ) -> None:
        if oversize not in ("warn", "error"):
            raise ValueError("oversize must be 'warn' or 'error'")
        self.scope = scope
        self.backend = backend
        self.worker_backend = worker_backend
        self.max_value_storage_bytes = max_value_storage_bytes
        self.oversize = oversize
        self.session = session

    def _to_ref(self, value: JsonValue, key: str) -> str:
        raise NotImplementedError

    def _from_ref(self, ref: str) -> JsonValue:
        raise NotImplementedError

    def _stored_form(self, key: str, value: JsonValue) -> str:
        encode_value(value)  # reject None and non-JSON before any hook writes anywhere
        if self.worker_backend is None:
            stored = encode_value(value)
        else:
            stored = json.dumps({REF_MARKER: self._to_ref(value, key)})
        size = len(stored.encode("utf-8"))
        limit = self.max_value_storage_bytes
        if limit and size > limit:
            message = f"value of key {key!r} is {size} bytes, over [state_store] max_value_storage_bytes = {limit}"
            if self.oversize == "error":
                raise InvalidInputError(f"{message}; raise the limit or store a smaller value")
            warnings.warn(message, StateValueTooLargeWarning, stacklevel=3)
        return stored

    def stored_form(self, key: str, value: JsonValue) -> str:
        """The text a write of ``value`` to ``key`` stores in the database: the value's JSON, or with a
        worker-side backend the reference its serialize hook returns for this accessor's scope (the hook
        writes the object then)."""
        return self._stored_form(check_key(key), value)

    def replace(self, key: str, value: JsonValue) -> None:
        """Replace the value of an existing key, keeping its ``expires_at`` (a backend that can: the metastore,
        the REST API);
        a key that does not exist raises ``NotFoundError`` and nothing is written."""
        if not self.backend.can_replace:
            name = type(self.backend).__name__
            raise BackendError(f"replacing a value and keeping its expiry needs the metastore backend, not {name}")
        if (
            self.worker_backend is not None
            and self.backend.get(self.scope, check_key(key), session=self.session) is None
        ):
            raise missing_key(self.scope, key)  # before the hook writes a payload no row would refer to
        stored = self._stored_form(check_key(key), value)
        if self.backend.replace(self.scope, key, stored, session=self.session) == 0:
            raise missing_key(self.scope, key)

    def decode(self, stored: str, key: str | None = None) -> JsonValue:
        """A stored JSON string as ``get`` returns it (a worker-side reference resolved). A value that
        does not match the configuration is returned as stored, with a ``StateReferenceWarning``."""
        decoded = json.loads(stored)
        ref = stored_ref(decoded)
        named = "a key" if key is None else f"key {key!r}"
        if self.worker_backend is not None and ref is not None:
            return self._from_ref(ref)
        if self.worker_backend is not None:
            warnings.warn(
                f"{named} holds a plain value, not a reference: written before [workers] state_store_backend "
                "was set, or by a writer without it; returned as stored",
                StateReferenceWarning,
                stacklevel=2,
            )
        elif ref is not None:
            warnings.warn(
                f"{named} holds a worker-side reference but [workers] state_store_backend is not set; "
                "returned the reference itself (set the option to read the value)",
                StateReferenceWarning,
                stacklevel=2,
            )
        return decoded

    def get(self, key: str, default: JsonValue = None) -> JsonValue:
        stored = self.backend.get(self.scope, check_key(key), session=self.session)
        return default if stored is None else self.decode(stored, key)

    def delete(self, key: str) -> None:
        # The database reference goes first; a failing external delete leaves an orphan that the
        # next set of the same key overwrites (references are deterministic).
        self.backend.delete(self.scope, check_key(key), session=self.session)
        if self.worker_backend is not None:
            self.worker_backend.delete(self.scope, key)


class TaskStateStoreAccessor(_Accessor):
    """Keys of one task instance; they expire per ``retention`` or ``default_retention_days``."""

    scope: TaskScope

    def __init__(
        self,
        scope: TaskScope,
        backend: BaseStoreBackend,
        *,
        default_retention_days: int | None = 30,
        clock: Callable[[], datetime] = utcnow,
        **kwargs: Any,
    ) -> None:
        if not isinstance(scope, TaskScope):
            raise InvalidInputError("TaskStateStoreAccessor needs a TaskScope")
        super().__init__(scope, backend, **kwargs)
        self.default_retention_days = default_retention_days
        self.clock = clock

    def _to_ref(self, value: JsonValue, key: str) -> str:
        assert self.worker_backend is not None
        return self.worker_backend.serialize_task_state_store_to_ref(value=value, key=key, scope=self.scope)

    def _from_ref(self, ref: str) -> JsonValue:
        assert self.worker_backend is not None
        return self.worker_backend.deserialize_task_state_store_from_ref(ref)

    def set(self, key: str, value: JsonValue, retention: Retention = None) -> datetime | None:
        """Write the key; returns the ``expires_at`` stored (None: never expires). ``default_retention_days``
        None: a key written without ``retention`` gets the backend's own default, read back once written."""
        if retention is None and self.default_retention_days is None:
            stored = self._stored_form(check_key(key), value)
            self.backend.set(self.scope, key, stored, expires_at=BACKEND_DEFAULT, session=self.session)
            written = self.backend.describe(self.scope, key, session=self.session)
            return None if written is None else written.expires_at
        expires_at = compute_expires_at(retention, self.default_retention_days or 0, self.clock())
        stored = self._stored_form(check_key(key), value)
        self.backend.set(self.scope, key, stored, expires_at=expires_at, session=self.session)
        return expires_at

    def set_until(self, key: str, value: JsonValue, expires_at: datetime) -> None:
        """Write the key with an explicit expiry instant (timezone-aware; stored in UTC)."""
        if expires_at.tzinfo is None:
            raise InvalidInputError(
                f"{PARAMETER} {expires_at.isoformat()} has no time zone; give one, e.g. +00:00 or Z",
                parameter="expires_at",
            )
        stored = self._stored_form(check_key(key), value)
        self.backend.set(self.scope, key, stored, expires_at=expires_at.astimezone(UTC), session=self.session)

    def clear(self, all_map_indices: bool = False) -> None:
        self.backend.clear(self.scope, all_map_indices=all_map_indices, session=self.session)
        if self.worker_backend is not None:
            self.worker_backend.clear(self.scope, all_map_indices=all_map_indices)


class AssetStateStoreAccessor(_Accessor):
    """Keys of one asset; they never expire."""

    scope: AssetScope

    def __init__(self, scope: AssetScope, backend: BaseStoreBackend, **kwargs: Any) -> None:
        if not isinstance(scope, AssetScope):
            raise InvalidInputError("AssetStateStoreAccessor needs an AssetScope")
        super().__init__(scope, backend, **kwargs)

    def _to_ref(self, value: JsonValue, key: str) -> str:
        assert self.worker_backend is not None
        return self.worker_backend.serialize_asset_state_store_to_ref(value=value, key=key, scope=self.scope)

    def _from_ref(self, ref: str) -> JsonValue:
        assert self.worker_backend is not None
        return self.worker_backend.deserialize_asset_state_store_from_ref(ref)

    def set(self, key: str, value: JsonValue) -> None:
        stored = self._stored_form(check_key(key), value)
        self.backend.set(self.scope, key, stored, expires_at=None, session=self.session)

    def clear(self) -> None:
        self.backend.clear(self.scope, session=self.session)
        if self.worker_backend is not None:
            self.worker_backend.clear(self.scope)


class DagRunStateStoreAccessor(TaskStateStoreAccessor):
    """Keys of one dag run (Airflow 3.4's dag-run state store); they expire as task keys do, by default
    after ``[state_store] dag_run_default_retention_days``. Their values are stored as they are: the
    worker-side hooks are defined for task and asset keys only."""

    scope: DagRunScope  # type: ignore[assignment]

    def __init__(
        self,
        scope: DagRunScope,
        backend: BaseStoreBackend,
        *,
        default_retention_days: int = 30,
        clock: Callable[[], datetime] = utcnow,
        **kwargs: Any,
    ) -> None:
        if not isinstance(scope, DagRunScope):
            raise InvalidInputError("DagRunStateStoreAccessor needs a DagRunScope")
        kwargs["worker_backend"] = None  # values stored as they are, whatever the caller passed
        _Accessor.__init__(self, scope, backend, **kwargs)
        self.default_retention_days = default_retention_days
        self.clock = clock

    def clear(self, all_map_indices: bool = False) -> None:
        self.backend.clear(self.scope, session=self.session)
