"""Plain records the library hands to its callers (and the CLI renders).

They are ``NamedTuple``s, immutable like frozen dataclasses: creating the classes costs a tenth of what
a frozen dataclass costs at every command's start, and ``list`` builds an ``Entry`` per row.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple


class Entry(NamedTuple):
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
    region_id: uuid.UUID | None = None  # a task key's region, where the table has regions and it is not the nil one


class KeyFilter(NamedTuple):
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
    region_id: uuid.UUID | None = None  # a task's region (the nil UUID: outside any region); None: any region

    @property
    def has_task_fields(self) -> bool:
        return any(v is not None for v in (self.dag_id, self.run_id, self.task_id, self.map_index))

    @property
    def has_asset_fields(self) -> bool:
        return any(v is not None for v in (self.asset_id, self.name, self.uri))


class Timeouts(NamedTuple):
    """Per-session limits of a clean beside the lock timeout every writing engine has
    (``open_database``); None = the server's own."""

    statement_seconds: float | None = None
