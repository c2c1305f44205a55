"""The terminal view of ``clean --dry-run``: one table per dag run, grouped by task instance.

Rows arrive sorted by dag, run, task, map index and key, so groups are finished as soon as the next
one starts and only what is on screen is held: at most ``limit`` listed rows (all with ``--all``,
streamed as they come). Rows past the limit are still counted per dag and announced, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from statestore_cli.cli.output.clean_sentences import expired_keys, plural, spared_sentence
from statestore_cli.cli.output.grid import Column, Out, TableStream, draw
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.model.timestamps import format_duration, human, human_iso

if TYPE_CHECKING:
    from rich.console import Console

    from statestore_cli.ops.cleanup import ExpiredRow

SCOPE = (Column("task_id", long=True), Column("map_index", right=True), Column("keys", right=True))
BODY = (Column("key", long=True), Column("expires_at", min_width=23))
SUMMARY = (
    Column("dag_id", long=True),
    Column("runs", right=True),
    Column("instances", right=True),
    Column("keys", right=True),
)


@dataclass
class DagCount:
    dag_id: str
    runs: int = 0
    instances: int = 0
    keys: int = 0


class DryRunView:
    def __init__(self, console: Console, limit: int | None, on_progress: Callable[[int], None] | None = None) -> None:
        self.out = Out(console)
        self.on_progress = on_progress
        self.limit = limit
        self.listed = 0
        self._dag_run_keys = 0  # dag-run keys (Airflow 3.4) of the groups ended so far
        self._group_of_run = False  # whether the current group is a run's own keys
        self.dags: list[DagCount] = []
        self.group: list[ExpiredRow] = []  # listed rows of the current task instance
        self.group_size = 0
        self.table: TableStream | None = None  # the current dag run's
        self.previous: ExpiredRow | None = None

    @property
    def read(self) -> int:
        """Expired rows read so far (listed or only counted)."""
        return sum(d.keys for d in self.dags)

    def render(self, plan) -> int:  # type: ignore[no-untyped-def]
        count = 0
        for count, row in enumerate(plan.rows, 1):
            self._add(row)
            if self.on_progress and count % 1000 == 0:
                self.on_progress(count)
        if self.on_progress:
            self.on_progress(count)  # the bar ends at the final count, not at the last thousand
        self._end_group()
        self._close_table()
        total = self.read
        if self.dags:
            self._print_summary()
        hidden = total - self.listed
        if hidden:
            self.out.message(f"{plural(hidden, 'more row')} not listed above; --all lists every row.".split())
        self.out.message(
            [
                *f"Dry run: {expired_keys(total, self.dag_run_keys)} would be deleted (expired before".split(),
                *_cutoff_words(plan.cutoff, plan.older_than),
                "Nothing",
                "was",
                "deleted.",
            ]
        )
        kept = spared_sentence(plan.spared, dry_run=True)
        if kept:
            self.out.message(kept.split())
        self.out.flush()
        return total

    @property
    def dag_run_keys(self) -> int:
        """Of the rows read so far, the dag-run keys (Airflow 3.4)."""
        return self._dag_run_keys + (self.group_size if self._group_of_run else 0)

    def _add(self, row: ExpiredRow) -> None:
        prev = self.previous
        # Most rows continue the current task instance: keep that path short (dry runs stream millions).
        if prev is not None and row[:4] == prev[:4] and row.region_id == prev.region_id:
            self.dags[-1].keys += 1
        else:
            new_dag = prev is None or prev.dag_id != row.dag_id
            new_run = new_dag or prev is None or prev.run_id != row.run_id
            self._end_group()
            if new_run:
                self._close_table()
            if new_dag:
                self.dags.append(DagCount(row.dag_id))
            dag = self.dags[-1]
            dag.runs += new_run
            self._group_of_run = row.task_id is None
            dag.instances += not self._group_of_run  # a run's own keys belong to no task instance
            dag.keys += 1
        self.group_size += 1
        if self.limit is None or self.listed < self.limit:
            self.group.append(row)
            self.listed += 1
        self.previous = row

    def _end_group(self) -> None:
        self._dag_run_keys = self.dag_run_keys
        self._group_of_run = False
        if not self.group:
            self.group_size = 0
            return
        first = self.group[0]
        if self.table is None:
            heading = (f"dag_id {safe_text(first.dag_id)}", f"run_id {safe_text(first.run_id)}")
            self.table = TableStream(self.out, heading, SCOPE, BODY, outer=1)
        keys = f"{self.group_size:,}"
        if first.task_id is None:  # the run's own keys (Airflow 3.4's dag-run state store)
            task_id, map_index = "(dag run)", "-"
            parts: tuple[str, ...] = ("dag-run keys", plural(self.group_size, "key"))
        else:
            task_id, map_index = safe_text(first.task_id), str(first.map_index)
            if first.region_id is not None:  # the same task id and map index in a region (Airflow 3.4)
                task_id += f" region {first.region_id}"
            parts = (f"task_id {task_id}", f"map_index {map_index}", plural(self.group_size, "key"))
        self.table.group((task_id, map_index, keys), parts)
        for row in self.group:
            self.table.row((safe_text(row.key), human_iso(row.expires_at)))
        self.group = []
        self.group_size = 0

    def stop(self) -> None:
        """End the table being drawn (a dry run interrupted midway): no half-drawn box is left open."""
        self._close_table()
        self.out.flush()

    def _close_table(self) -> None:
        if self.table is not None:
            self.table.close()
        self.table = None

    def _print_summary(self) -> None:
        # Dag-run keys come after every task key: a dag seen again there adds to its first line.
        merged: dict[str, DagCount] = {}
        for d in self.dags:
            seen = merged.setdefault(d.dag_id, DagCount(d.dag_id))
            seen.runs, seen.instances, seen.keys = seen.runs + d.runs, seen.instances + d.instances, seen.keys + d.keys
        rows = [(safe_text(d.dag_id), f"{d.runs:,}", f"{d.instances:,}", f"{d.keys:,}") for d in merged.values()]
        draw(self.out, "expired keys per dag", SUMMARY, rows)


def _cutoff_words(cutoff: datetime, older_than: timedelta) -> list[str]:
    """The end of ``(expired before <cutoff>[, at least <D> ago]).``; the timestamp is one unbreakable word."""
    if not older_than:
        return [human(cutoff) + ")."]
    return [human(cutoff) + ",", "at", "least", format_duration(older_than), "ago)."]
