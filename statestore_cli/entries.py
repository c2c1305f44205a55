"""Plain records the library hands to its callers (and the CLI renders)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One stored key with its scope. Task fields are None for an asset key and vice versa."""

    store: str  # "task" | "asset"
    key: str
    updated_at: datetime | None
    expires_at: datetime | None
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    asset_id: int | None = None
    name: str | None = None
    uri: str | None = None
    value: Any = None


@dataclass(frozen=True)
class KeyFilter:
    """Which keys ``list`` shows: every field given narrows the selection."""

    store: str | None = None  # "task", "asset" or None for both
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    asset_id: int | None = None
    name: str | None = None
    uri: str | None = None
    key: str | None = None

    @property
    def has_task_fields(self) -> bool:
        return any(v is not None for v in (self.dag_id, self.run_id, self.task_id, self.map_index))

    @property
    def has_asset_fields(self) -> bool:
        return any(v is not None for v in (self.asset_id, self.name, self.uri))


@dataclass(frozen=True)
class Timeouts:
    """Per-session limits so a clean never hangs behind another transaction; None = the server's own."""

    lock_seconds: float | None = 30.0
    statement_seconds: float | None = None
