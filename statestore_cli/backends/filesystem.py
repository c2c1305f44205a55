"""``FilesystemBackend``: values as files under a root, a local folder or any fsspec URL.

It serves as a ``[state_store] backend`` (``get``/``set``/``delete``/``clear`` of JSON strings) or as a
``[workers] state_store_backend`` (the serialize hooks write the value and return its path, relative to
the root, as the reference). Configured in its own section::

    [state_store_filesystem]
    root = /var/lib/airflow/state        # or s3://bucket/prefix, gs://..., memory://... with fsspec
    gzip = false                         # true: new values are written gzip-compressed (.json.gz)

It is also the worked example for writing a backend: see docs/backends.md.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statestore_cli.backends.base import BaseStoreBackend, JsonValue, StoredRef, ThreadOffloadMixin
from statestore_cli.backends.fs_paths import SUFFIXES, TEMP_MARK, check_ref, scope_dir, value_path
from statestore_cli.backends.fs_storage import open_files
from statestore_cli.errors import BackendError, ConfigError, InvalidInputError
from statestore_cli.model.scopes import AssetScope, StoreScope, TaskScope

if TYPE_CHECKING:
    from typing import Self

    from statestore_cli.config import Settings

SECTION = "state_store_filesystem"
TEMP_FILE_MAX_AGE = 3600.0  # seconds: a temporary file this old belongs to a write that died


class FilesystemBackend(ThreadOffloadMixin, BaseStoreBackend):
    """Values as files at ``<root>/<scope folder>/<escaped key>.json`` (``fs_paths`` builds the paths)."""

    def __init__(self, root: str, *, gzip: bool = False) -> None:
        self.files = open_files(root)
        self.gzip = gzip

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        root = settings.extra_option(SECTION, "root")
        if root is None or not root[0].strip():
            raise ConfigError(
                f"the filesystem backend needs [{SECTION}] root (or AIRFLOW__{SECTION.upper()}__ROOT): "
                "a folder or an fsspec URL"
            )
        compress = settings.extra_option(SECTION, "gzip")
        return cls(root[0].strip(), gzip=_boolean(compress))

    @property
    def _suffixes(self) -> tuple[str, str]:
        """The suffix new values get first; reads also find values written under the other setting."""
        return (".json.gz", ".json") if self.gzip else SUFFIXES

    # -- files ------------------------------------------------------------------------------------
    def _write(self, rel: str, text: str) -> None:
        data = text.encode("utf-8")
        self.files.write(rel, gzip.compress(data, mtime=0) if rel.endswith(".gz") else data)

    def _read(self, rel: str) -> str | None:
        data = self.files.read(rel)
        if data is None:
            return None
        return (gzip.decompress(data) if rel.endswith(".gz") else data).decode("utf-8")

    # -- BaseStoreBackend -------------------------------------------------------------------------
    def get(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        for suffix in self._suffixes:
            text = self._read(value_path(scope, key, suffix))
            if text is not None:
                return text
        return None

    def set(self, scope: StoreScope, key: str, value: str, *, expires_at: Any = None, session: Any = None) -> None:
        # Expiry is not kept: as a [state_store] backend, files live until deleted or cleared.
        if value.strip() == "null":
            raise InvalidInputError("a state value cannot be JSON null; delete the key instead")
        first, other = self._suffixes
        self._write(value_path(scope, key, first), value)
        self.files.remove(value_path(scope, key, other))  # written before gzip was switched

    def delete(self, scope: StoreScope, key: str, *, session: Any = None) -> int:
        return sum(self.files.remove(value_path(scope, key, suffix)) for suffix in SUFFIXES)

    def clear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        self.files.remove_tree(scope_dir(scope, all_map_indices=all_map_indices))

    def cleanup(self) -> dict[str, int]:
        """Remove temporary files of writes that died more than an hour ago."""
        removed = 0
        cutoff = time.time() - TEMP_FILE_MAX_AGE
        for rel, modified in list(self.files.walk()):
            name = rel.rpartition("/")[2]
            if name.startswith(".") and TEMP_MARK in name and modified and modified.timestamp() < cutoff:
                removed += self.files.remove(rel)
        return {"temporary_files_removed": removed}

    # -- worker-side hooks: the reference is the value's path under the root -------------------------
    def _store_ref(self, scope: StoreScope, key: str, value: JsonValue) -> str:
        if value is None:
            raise InvalidInputError("a state value cannot be None (JSON null); delete the key instead")
        self.set(scope, key, json.dumps(value))
        return value_path(scope, key, self._suffixes[0])

    def _load_ref(self, stored: str) -> JsonValue:
        text = self._read(check_ref(stored))
        if text is None:
            raise BackendError(f"the filesystem backend has no object {stored} under {self.files.root}")
        return json.loads(text)

    def serialize_task_state_store_to_ref(self, *, value: JsonValue, key: str, scope: TaskScope) -> str:
        return self._store_ref(scope, key, value)

    def deserialize_task_state_store_from_ref(self, stored: str) -> JsonValue:
        return self._load_ref(stored)

    def serialize_asset_state_store_to_ref(self, *, value: JsonValue, key: str, scope: AssetScope) -> str:
        return self._store_ref(scope, key, value)

    def deserialize_asset_state_store_from_ref(self, stored: str) -> JsonValue:
        return self._load_ref(stored)

    # -- for `statestore orphans` -----------------------------------------------------------------
    def list_refs(self) -> Iterator[StoredRef]:
        for rel, modified in self.files.walk():
            if rel.startswith(("task/", "asset/")) and rel.endswith(SUFFIXES) and "/." not in rel:
                yield StoredRef(rel, modified)

    def delete_ref(self, ref: str) -> None:
        self.files.remove(check_ref(ref))


def _boolean(option: tuple[str, str] | None) -> bool:
    if option is None:
        return False
    text = option[0].strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise ConfigError(f"{option[1]}: invalid value {option[0]!r} for [{SECTION}] gzip: expected true or false")
