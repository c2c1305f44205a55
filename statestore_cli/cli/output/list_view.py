"""The terminal view of ``list``: task keys in one table per dag run, asset keys in one table, streamed.

Rows arrive sorted by scope and key, so a dag run's table is finished as soon as the next run starts,
and only the rows of the table being laid out are held (``grid.CHUNK``): the first screen shows
while the rest is still being read, and memory stays flat however many keys there are.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from statestore_cli.cli.output.documents import expired
from statestore_cli.cli.output.grid import Column, Out, TableStream
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.model.entries import Entry
from statestore_cli.model.timestamps import human

if TYPE_CHECKING:
    from rich.console import Console

TIMES = (
    Column("updated_at (UTC)", min_width=19),  # a timestamp's width, kept whole when a later row has one
    Column("expires_at (UTC)", min_width=19),
)
EXPIRED = "expired"  # after an expires_at in the past: the next clean deletes the key (plain and JSON unchanged)
KEY = Column("key", long=True)
TASK_SCOPE = (Column("task_id", long=True), Column("map_index", right=True))
ASSET_SCOPE = (Column("asset_id", right=True), Column("name", long=True), Column("uri", long=True))


class ListView:
    def __init__(self, console: Console, now: datetime | None = None) -> None:
        self.out = Out(console)
        self.now = now or datetime.now(UTC)
        self.table: TableStream | None = None
        self.scope: tuple[object, ...] | None = None  # the table's: (dag_id, run_id), or ("asset",)
        self.group: object = None  # the task instance (task_id, map_index) or the asset_id of the last row

    def render(self, entries: Iterable[Entry]) -> int:
        count = 0
        for entry in entries:
            count += 1
            if entry.store in ("task", "dag_run"):
                self._task(entry)
            else:
                self._asset(entry)
        self._close()
        return count

    def _task(self, entry: Entry) -> None:
        if self.scope is None:
            self.out.add(self.out.ink("task state keys", "italic"))
        if self.scope != (entry.dag_id, entry.run_id):
            self._close()
            self.scope = (entry.dag_id, entry.run_id)
            heading = (f"dag_id {safe_text(entry.dag_id)}", f"run_id {safe_text(entry.run_id)}")
            self.table = TableStream(self.out, heading, TASK_SCOPE, (KEY, *TIMES), outer=1)
        assert self.table is not None
        group = (entry.store, entry.task_id, entry.map_index, entry.region_id)
        if group != self.group:
            self.group = group
            if entry.store == "dag_run":  # the run's own keys (Airflow 3.4's dag-run state store)
                self.table.group(("(dag run)", "-"), ("dag-run keys",))
            else:
                task_id, map_index = safe_text(entry.task_id), str(entry.map_index)
                region = f" region {entry.region_id}" if entry.region_id is not None else ""
                self.table.group(
                    (task_id + region, map_index), (f"task_id {task_id}{region}", f"map_index {map_index}")
                )
        self.table.row(self._cells(entry))

    def _asset(self, entry: Entry) -> None:
        if self.scope != ("asset",):
            self._close()
            self.scope = ("asset",)
            self.out.add(self.out.ink("asset state keys", "italic"))
            self.table = TableStream(self.out, (), ASSET_SCOPE, (KEY, *TIMES))
        assert self.table is not None
        if entry.asset_id != self.group:
            self.group = entry.asset_id
            name, uri = safe_text(entry.name), safe_text(entry.uri)
            self.table.group(
                (str(entry.asset_id), name, uri), (f"asset_id {entry.asset_id}", f"name {name}", f"uri {uri}")
            )
        self.table.row(self._cells(entry))

    def _cells(self, entry: Entry) -> tuple[str, str, str]:
        expires = human(entry.expires_at, "never", "")
        if expired(entry, self.now):
            expires += " " + EXPIRED
        return safe_text(entry.key), human(entry.updated_at, "-", ""), expires

    def _close(self) -> None:
        if self.table is not None:
            self.table.close()
            self.table = None
        self.group = None
