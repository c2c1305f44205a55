"""The figures ``statestore stats`` reports, and how the grouped rows the database sends are added up
into them: per-dag totals across the parts of a split pass, the range of ``updated_at``, the top N."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.largest import LargeValue

# The expiry buckets of task keys, in order; non-overlapping, each the half-open interval
# [lower, upper) of expires_at relative to now. "never" is expires_at NULL.
EXPIRY_BUCKETS = ("expired", "within_1_day", "within_1_to_7_days", "within_7_to_30_days", "after_30_days", "never")


@dataclass(frozen=True)
class DagFigures:
    dag_id: str
    rows: int
    value_bytes: int


@dataclass(frozen=True)
class AssetFigures:
    asset_id: int
    name: str
    uri: str
    rows: int
    value_bytes: int
    active: bool  # a row in asset_active with the same name and uri


@dataclass(frozen=True)
class DayCount:
    day: date  # a UTC calendar day; the first one counts from ``now`` only
    rows: int


@dataclass(frozen=True)
class TaskStats:
    rows: int
    value_bytes: int
    dags: int
    oldest_updated_at: datetime | None
    newest_updated_at: datetime | None
    over_limit: int | None  # values over max_value_storage_bytes; None when there is no limit (0)
    expiry: dict[str, int]  # EXPIRY_BUCKETS -> rows
    top_dags_by_rows: list[DagFigures]
    top_dags_by_bytes: list[DagFigures]
    expiring_per_day: list[DayCount]  # CHART_DAYS days from today, zeros included


@dataclass(frozen=True)
class AssetStats:
    rows: int
    value_bytes: int
    assets: int  # assets holding at least one key
    inactive_assets: int  # of which not active any more
    inactive_rows: int  # keys of those inactive assets
    oldest_updated_at: datetime | None
    newest_updated_at: datetime | None
    over_limit: int | None
    top_assets: list[AssetFigures]  # by keys, then name


@dataclass(frozen=True)
class DagRunStats:
    """The keys of Airflow 3.4's dag-run state store (``dag_run_state_store``)."""

    rows: int
    value_bytes: int
    dags: int  # dags with at least one dag-run key
    runs: int  # dag runs with at least one key
    oldest_updated_at: datetime | None
    newest_updated_at: datetime | None
    over_limit: int | None
    expiry: dict[str, int]  # EXPIRY_BUCKETS -> rows, as for task keys


@dataclass(frozen=True)
class StoreStats:
    now: datetime
    max_value_storage_bytes: int  # 0 = no limit
    filter: KeyFilter
    task: TaskStats | None  # None when the filter leaves out the task store
    asset: AssetStats | None  # likewise for the asset store
    dag_run: DagRunStats | None = None  # None where the database has no dag-run store, or the filter leaves it out
    has_dag_run_store: bool = False  # whether the database has one (Airflow 3.4's layout)
    largest: list[LargeValue] | None = None  # the largest values, largest first, when asked for (``largest=N``)


class DagTotals:
    """The per-dag rows of one or more parts, added up: a dag may span parts."""

    def __init__(self, buckets: int, over: bool) -> None:
        self.buckets = buckets
        self.over = over
        self.by_dag: dict[str, list[Any]] = {}  # dag_id -> [rows, bytes, oldest, newest, *buckets, over]

    def add(self, rows: Iterable[Any]) -> None:
        for dag_id, count, nbytes, first, last, *rest in rows:
            sums = [int(count), int(nbytes), *(int(n) for n in rest)]
            first, last = as_utc(first), as_utc(last)
            seen = self.by_dag.get(dag_id)
            if seen is None:
                self.by_dag[dag_id] = [sums[0], sums[1], first, last, *sums[2:]]
                continue
            seen[2], seen[3] = min(seen[2], first), max(seen[3], last)
            for i, n in enumerate(sums):
                seen[i if i < 2 else i + 2] += n

    @property
    def rows(self) -> int:
        return sum(totals[0] for totals in self.by_dag.values())

    @property
    def expiry(self) -> list[int]:
        return [sum(totals[4 + i] for totals in self.by_dag.values()) for i in range(self.buckets)]

    def figures(self, top: int, expiry: list[int], per_day: list[DayCount]) -> TaskStats:
        by_rows: list[tuple[int, Reversed, DagFigures]] = []
        by_bytes: list[tuple[int, Reversed, DagFigures]] = []
        for dag_id, (count, nbytes, *_rest) in self.by_dag.items():
            figures = DagFigures(dag_id, count, nbytes)
            keep_top(by_rows, top, (count, Reversed(dag_id), figures))
            keep_top(by_bytes, top, (nbytes, Reversed(dag_id), figures))
        totals = self.by_dag.values()
        return TaskStats(
            rows=self.rows,
            value_bytes=sum(t[1] for t in totals),
            dags=len(self.by_dag),
            oldest_updated_at=min((t[2] for t in totals), default=None),
            newest_updated_at=max((t[3] for t in totals), default=None),
            over_limit=sum(t[-1] for t in totals) if self.over else None,
            expiry=dict(zip(EXPIRY_BUCKETS, expiry, strict=True)),
            top_dags_by_rows=top_ranked(by_rows),
            top_dags_by_bytes=top_ranked(by_bytes),
            expiring_per_day=per_day,
        )


def widen(oldest: datetime | None, newest: datetime | None, first: Any, last: Any) -> tuple[datetime, datetime]:
    """The ``updated_at`` range so far, grown to cover one group's ``min()``/``max()``. Those lose the
    column type on some engines, so they are read as the column does (``as_utc``)."""
    first, last = as_utc(first), as_utc(last)
    return (first if oldest is None or first < oldest else oldest, last if newest is None or last > newest else newest)


def as_utc(value: Any) -> datetime:
    moment: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# -- top N -----------------------------------------------------------------------------------------------
class Reversed:
    """Orders names backwards, so a min-heap of (count, Reversed(name)) drops the highest name first and
    equal counts rank by name ascending."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __lt__(self, other: Reversed) -> bool:
        return self.name > other.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reversed) and self.name == other.name


def keep_top(heap: list[Any], size: int, item: tuple[Any, ...]) -> None:
    if size == 0:
        return
    if len(heap) < size:
        heapq.heappush(heap, item)
    elif item[:2] > heap[0][:2]:
        heapq.heapreplace(heap, item)


def top_ranked(heap: Iterable[tuple[Any, Any, Any]]) -> list[Any]:
    """The kept items, largest count first, ties by name."""
    return [figures for _count, _name, figures in sorted(heap, key=lambda item: item[:2], reverse=True)]
