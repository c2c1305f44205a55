"""What the CLI prints for a key, built in one place for the full CLI and the fast ``get`` path:
``get``'s value text and JSON document, and the JSON rows of ``list``. Free of rich and SQLAlchemy,
so the fast path can use it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.safe_text import safe_json, safe_text
from statestore_cli.model.entries import Entry


def iso(moment: datetime | None) -> str | None:
    """Timestamps for scripts: ISO 8601 in UTC with an explicit offset."""
    return None if moment is None else moment.isoformat()


def entry_json(entry: Entry, with_value: bool = False) -> dict[str, Any]:
    """A key as a JSON object: store, scope, key, timestamps and (for ``get``) the value."""
    doc: dict[str, Any] = {"store": entry.store}
    if entry.store == "task":
        doc.update(dag_id=entry.dag_id, run_id=entry.run_id, task_id=entry.task_id, map_index=entry.map_index)
        if entry.region_id is not None:  # a key in a region (Airflow 3.4); outside any, no field
            doc["region_id"] = str(entry.region_id)
    elif entry.store == "dag_run":
        doc.update(dag_id=entry.dag_id, run_id=entry.run_id)
    else:
        doc.update(asset_id=entry.asset_id, name=entry.name, uri=entry.uri)
    doc.update(key=entry.key, updated_at=iso(entry.updated_at), expires_at=iso(entry.expires_at))
    if with_value:
        doc["value"] = entry.value
    return doc


def expired(entry: Entry, now: datetime) -> bool:
    """Whether ``clean`` would take ``entry``: a task or dag-run key whose expires_at is before ``now``
    (asset keys are never cleaned)."""
    return entry.store != "asset" and entry.expires_at is not None and entry.expires_at < now


def expired_notice(entry: Entry, now: datetime) -> str | None:
    """What ``get`` says on stderr, on a terminal, about the value it prints of an expired key; None for a live one."""
    if entry.expires_at is None or not expired(entry, now):
        return None
    stamp = entry.expires_at.strftime("%Y-%m-%d %H:%M:%S")
    return f"statestore: note: key {safe_text(entry.key)} expired at {stamp} UTC; the next clean deletes it\n"


def get_output(entry: Entry, mode: str) -> str:
    """What ``get`` writes on stdout in ``mode`` (table, plain or json; ``auto`` already resolved)."""
    if mode == OutputMode.json:
        return safe_json(entry_json(entry, with_value=True)) + "\n"
    return safe_json(entry.value, indent=2 if mode == OutputMode.table else None) + "\n"
