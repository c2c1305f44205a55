"""What an import did (or, in a dry run, would do), on a database or through the REST API."""

from __future__ import annotations

from typing import NamedTuple


class StoreCounts(NamedTuple):
    inserted: int = 0
    updated: int = 0


class ImportSummary(NamedTuple):
    dry_run: bool
    lines: int
    batches: int
    batch_size: int
    task: StoreCounts
    asset: StoreCounts
    dag_runs_created: int
    assets_created: int
    elapsed: float
    dag_run: StoreCounts = StoreCounts()  # dag-run keys (Airflow 3.4)
    api_requests: int | None = None  # through the REST API: the requests made (each key its own write)

    @property
    def keys(self) -> int:
        return sum(self.task) + sum(self.dag_run) + sum(self.asset)
