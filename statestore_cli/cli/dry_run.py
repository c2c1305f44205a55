"""The terminal view of ``clean --dry-run``: rich tables grouped by dag, run, task and map index.

Rows arrive sorted by dag, run, task, map index and key, so groups are finished as soon as the next
one starts and only what is on screen is held: at most ``limit`` listed rows (all with ``--all``,
flushed in chunks). Rows past the limit are still counted per dag and announced, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from statestore_cli.cli.safe_text import safe_text
from statestore_cli.timestamps import human, human_iso

if TYPE_CHECKING:
    from statestore_cli.cleanup import ExpiredRow

CHUNK = 500  # rows per printed table when everything is listed


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass
class DagCount:
    dag_id: str
    runs: int = 0
    instances: int = 0
    keys: int = 0


class DryRunView:
    def __init__(self, console: Console, limit: int | None, on_progress: Callable[[int], None] | None = None) -> None:
        self.console = console
        self.on_progress = on_progress
        self.limit = limit
        self.listed = 0
        self.dags: list[DagCount] = []
        self.group: list[ExpiredRow] = []  # listed rows of the current task instance
        self.group_size = 0
        self.table: Table | None = None
        self.table_run: str | None = None  # the run whose id the table showed last
        self.previous: ExpiredRow | None = None

    def render(self, plan) -> int:  # type: ignore[no-untyped-def]
        for count, row in enumerate(plan.rows, 1):
            self._add(row)
            if self.on_progress and count % 1000 == 0:
                self.on_progress(count)
        self._end_group()
        self._print_table()
        total = sum(d.keys for d in self.dags)
        if self.dags:
            self._print_summary()
        hidden = total - self.listed
        if hidden:
            self.console.print(
                Text(f"{_plural(hidden, 'more row')} not listed above; --all lists every row."), soft_wrap=True
            )
        self.console.print(
            Text(
                f"Dry run: {_plural(total, 'expired task key')} would be deleted "
                f"(expired before {human(plan.cutoff)}). Nothing was deleted."
            ),
            soft_wrap=True,
        )
        return total

    def _add(self, row: ExpiredRow) -> None:
        prev = self.previous
        # Most rows continue the current task instance: keep that path short (dry runs stream millions).
        if prev is not None and row[:4] == prev[:4]:
            self.dags[-1].keys += 1
        else:
            new_dag = prev is None or prev.dag_id != row.dag_id
            new_run = new_dag or prev is None or prev.run_id != row.run_id
            self._end_group()
            if new_dag:
                self._print_table()
                self.dags.append(DagCount(row.dag_id))
            dag = self.dags[-1]
            dag.runs += new_run
            dag.instances += 1
            dag.keys += 1
        self.group_size += 1
        if self.limit is None or self.listed < self.limit:
            self.group.append(row)
            self.listed += 1
        self.previous = row

    def _end_group(self) -> None:
        if not self.group:
            self.group_size = 0
            return
        if self.table is None or (self.limit is None and self.table.row_count >= CHUNK):
            self._print_table()
            self.table = self._new_table(self.group[0].dag_id)
        show_run = self.group[0].run_id != self.table_run
        self.table_run = self.group[0].run_id
        for index, row in enumerate(self.group):
            first = index == 0
            self.table.add_row(
                Text(safe_text(row.run_id) if first and show_run else ""),
                Text(safe_text(row.task_id) if first else ""),
                Text(str(row.map_index) if first else ""),
                Text(str(self.group_size) if first else ""),
                Text(safe_text(row.key)),
                Text(human_iso(row.expires_at)),
                end_section=index == len(self.group) - 1,
            )
        self.group = []
        self.group_size = 0

    def _new_table(self, dag_id: str) -> Table:
        table = Table(title=Text(f"dag {safe_text(dag_id)}"), title_justify="left", show_lines=False)
        table.add_column("run_id", overflow="fold")
        table.add_column("task_id", overflow="fold")
        table.add_column("map_index", justify="right")
        table.add_column("keys", justify="right")
        table.add_column("key", overflow="fold")
        table.add_column("expires_at", no_wrap=True)
        return table

    def _print_table(self) -> None:
        if self.table is not None and self.table.row_count:
            self.console.print(self.table)
        self.table = None
        self.table_run = None

    def _print_summary(self) -> None:
        table = Table(title="expired keys per dag", title_justify="left")
        table.add_column("dag_id", overflow="fold")
        for column in ("runs", "task instances", "keys"):
            table.add_column(column, justify="right")
        for dag in self.dags:
            table.add_row(Text(safe_text(dag.dag_id)), str(dag.runs), str(dag.instances), str(dag.keys))
        self.console.print(table)
