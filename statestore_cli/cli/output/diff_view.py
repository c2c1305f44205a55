"""What ``diff`` shows: a table per store at a terminal, one tab-separated line per difference, or JSON.

Differences arrive in key order and are drawn as they come (``grid.TableStream``), so memory stays flat
however many there are. Values are never shown, only which fields differ: a diff's output goes into CI
logs and tickets, and ``get`` shows a key's value to whoever may read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.output.grid import Column, Out, TableStream
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.cli.output.writer import write_json_array

if TYPE_CHECKING:
    from statestore_cli.cli.output.writer import Writer
    from statestore_cli.ops.diff import Difference, DiffSummary

MARK = {"added": "+", "removed": "-", "changed": "~"}
# The columns of each store's plain lines, for --header: the change, then the key's export fields (a task
# key in a region has region_id after task_id, as in the export), then what differs (changed keys only).
PLAIN_COLUMNS = {
    "task": ("change", "store", "dag_id", "run_id", "task_id", "map_index", "key", "differs"),
    "dag_run": ("change", "store", "dag_id", "run_id", "key", "differs"),
    "asset": ("change", "store", "name", "uri", "key", "differs"),
}
KEY = Column("key", long=True)
BODY = (KEY, Column("change"), Column("differs"))
_TITLES = {"task": "task state keys", "dag_run": "dag-run state keys", "asset": "asset state keys"}


def difference_document(difference: Difference) -> dict[str, Any]:
    """One difference for scripts: ``change``, the key's identity as the export names it, and for a
    changed key ``differs``, the fields that are not the same."""
    document: dict[str, Any] = {"change": difference.change, **difference.identity}
    if difference.fields:
        document["differs"] = list(difference.fields)
    return document


def show(out: Writer, differences: Iterable[Difference]) -> int:
    """Write the differences in ``out``'s mode; how many there were."""
    if out.json:
        return write_json_array(difference_document(d) for d in differences)
    if out.mode == "plain":
        return _plain(out, differences)
    return DiffTable(out).render(differences)


def _plain(out: Writer, differences: Iterable[Difference]) -> int:
    count = 0
    store = None
    for difference in differences:
        count += 1
        identity = difference.identity
        if identity["store"] != store:  # each store's lines after their own header line (with --header)
            store = identity["store"]
            out.plain_header(PLAIN_COLUMNS[store])
        fields = (",".join(difference.fields),) if difference.fields else ()
        out.plain_row(MARK[difference.change], *identity.values(), *fields)
    return count


class DiffTable:
    """One table per store, a group line per task instance, dag run or asset, a row per key."""

    def __init__(self, out: Writer) -> None:
        self.out = Out(out.console)
        self.store: str | None = None
        self.table: TableStream | None = None
        self.group: tuple[Any, ...] | None = None

    def render(self, differences: Iterable[Difference]) -> int:
        count = 0
        for difference in differences:
            count += 1
            identity = difference.identity
            if identity["store"] != self.store:
                self._close()
                self.store = identity["store"]
                self.out.add(self.out.ink(_TITLES[identity["store"]], "italic"))
                self.table = TableStream(self.out, (), (Column("scope", long=True),), BODY)
            assert self.table is not None
            scope = tuple((name, value) for name, value in identity.items() if name not in ("store", "key"))
            if scope != self.group:
                self.group = scope
                line = "  ".join(f"{name} {safe_text(str(value))}" for name, value in scope)
                self.table.group((line,), (line,))
            change = f"{MARK[difference.change]} {difference.change}"
            self.table.row((safe_text(identity["key"]), change, ", ".join(difference.fields)))
        self._close()
        return count

    def _close(self) -> None:
        if self.table is not None:
            self.table.close()
            self.table = None
        self.group = None


def summary_line(summary: DiffSummary) -> str:
    if not summary.differences:
        return f"no differences ({summary.same:,} key{'s' if summary.same != 1 else ''} the same)"
    return (
        f"{summary.added:,} added, {summary.removed:,} removed, {summary.changed:,} changed, {summary.same:,} the same"
    )
