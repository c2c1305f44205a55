"""What ``statestore stats`` prints for scripts: a JSON document or tab-separated lines, built without rich.
On a terminal it hands the figures to ``stats_terminal`` (tables and a chart)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.output.documents import iso

if TYPE_CHECKING:
    from statestore_cli.cli.output.writer import Writer
    from statestore_cli.ops.largest import LargeValue
    from statestore_cli.ops.stats import AssetStats, DagFigures, DagRunStats, StoreStats, TaskStats

NOT_APPLICABLE = "-"  # plain output's null
# The header line of plain output (--header); the top-dag and top-asset rows carry more fields after these.
PLAIN_COLUMNS = ("section", "name", "value")


def show(out: Writer, stats: StoreStats) -> None:
    if out.json:
        out.write_json(stats_document(stats))
    elif out.mode == "plain":
        out.plain_header(PLAIN_COLUMNS)
        for cells in plain_rows(stats):
            out.plain_row(*(NOT_APPLICABLE if c is None else c for c in cells))
    else:
        from statestore_cli.cli.output.stats_terminal import draw  # tables and a chart

        draw(out.console, stats)


# -- JSON ---------------------------------------------------------------------------------------------------
def stats_document(stats: StoreStats) -> dict[str, Any]:
    """The ``-o json`` document (its keys are documented in docs/usage.md and stay stable). ``dag_run`` is
    there only where the database has a dag-run store (Airflow 3.4), null when the filter leaves it out."""
    filt = stats.filter
    given = {name: value for name, value in filt._asdict().items() if value is not None}
    document: dict[str, Any] = {
        "now": iso(stats.now),
        "filter": given,
        "max_value_storage_bytes": stats.max_value_storage_bytes,
        "task": None if stats.task is None else _task_document(stats.task),
    }
    if stats.has_dag_run_store:
        document["dag_run"] = None if stats.dag_run is None else _dag_run_document(stats.dag_run)
    document["asset"] = None if stats.asset is None else _asset_document(stats.asset)
    if stats.largest is not None:  # only with --largest N: the document is otherwise as it always was
        document["largest"] = [largest_document(value) for value in stats.largest]
    return document


# The scope fields of each store's values, in the order plain lines and the JSON objects give them.
LARGEST_SCOPES = {
    "task": ("dag_id", "run_id", "task_id", "map_index"),
    "dag_run": ("dag_id", "run_id"),
    "asset": ("asset_id", "name", "uri"),
}


def largest_document(value: LargeValue) -> dict[str, Any]:
    """One of the largest values for scripts: its store, scope, key and size (``region_id`` only for a task key
    in a region, as ``list`` gives it)."""
    document: dict[str, Any] = {"store": value.store}
    document.update({name: getattr(value, name) for name in LARGEST_SCOPES[value.store]})
    if value.region_id is not None:
        document["region_id"] = str(value.region_id)
    document["key"] = value.key
    document["value_bytes"] = value.value_bytes
    return document


def _dag(dag: DagFigures) -> dict[str, Any]:
    return {"dag_id": dag.dag_id, "rows": dag.rows, "value_bytes": dag.value_bytes}


def _task_document(task: TaskStats) -> dict[str, Any]:
    return {
        "rows": task.rows,
        "value_bytes": task.value_bytes,
        "dags": task.dags,
        "oldest_updated_at": iso(task.oldest_updated_at),
        "newest_updated_at": iso(task.newest_updated_at),
        "over_max_value_storage_bytes": task.over_limit,
        "expiry": dict(task.expiry),
        "expiring_per_day": [{"date": d.day.isoformat(), "rows": d.rows} for d in task.expiring_per_day],
        "top_dags_by_rows": [_dag(d) for d in task.top_dags_by_rows],
        "top_dags_by_bytes": [_dag(d) for d in task.top_dags_by_bytes],
    }


def _dag_run_document(runs: DagRunStats) -> dict[str, Any]:
    return {
        "rows": runs.rows,
        "value_bytes": runs.value_bytes,
        "dags": runs.dags,
        "runs": runs.runs,
        "oldest_updated_at": iso(runs.oldest_updated_at),
        "newest_updated_at": iso(runs.newest_updated_at),
        "over_max_value_storage_bytes": runs.over_limit,
        "expiry": dict(runs.expiry),
    }


def _asset_document(assets: AssetStats) -> dict[str, Any]:
    return {
        "rows": assets.rows,
        "value_bytes": assets.value_bytes,
        "assets": assets.assets,
        "inactive_assets": assets.inactive_assets,
        "inactive_asset_rows": assets.inactive_rows,
        "oldest_updated_at": iso(assets.oldest_updated_at),
        "newest_updated_at": iso(assets.newest_updated_at),
        "over_max_value_storage_bytes": assets.over_limit,
        "top_assets": [
            {
                "asset_id": a.asset_id,
                "name": a.name,
                "uri": a.uri,
                "rows": a.rows,
                "value_bytes": a.value_bytes,
                "active": a.active,
            }
            for a in assets.top_assets
        ],
    }


# -- plain --------------------------------------------------------------------------------------------------
def plain_rows(stats: StoreStats) -> Iterator[tuple[object, ...]]:
    """``section, name, value[, more...]`` per line; None is written as ``-`` (not applicable)."""
    yield ("stats", "now", iso(stats.now))
    yield ("stats", "max_value_storage_bytes", stats.max_value_storage_bytes)
    task = stats.task
    if task is not None:
        yield ("task", "rows", task.rows)
        yield ("task", "value_bytes", task.value_bytes)
        yield ("task", "dags", task.dags)
        yield ("task", "oldest_updated_at", iso(task.oldest_updated_at))
        yield ("task", "newest_updated_at", iso(task.newest_updated_at))
        yield ("task", "over_max_value_storage_bytes", task.over_limit)
        for bucket, rows in task.expiry.items():
            yield ("task_expiry", bucket, rows)
        for day in task.expiring_per_day:
            yield ("task_expiring_per_day", day.day.isoformat(), day.rows)
        for dag in task.top_dags_by_rows:
            yield ("task_top_dag_by_rows", dag.dag_id, dag.rows, dag.value_bytes)
        for dag in task.top_dags_by_bytes:
            yield ("task_top_dag_by_bytes", dag.dag_id, dag.value_bytes, dag.rows)
    runs = stats.dag_run
    if runs is not None:
        yield ("dag_run", "rows", runs.rows)
        yield ("dag_run", "value_bytes", runs.value_bytes)
        yield ("dag_run", "dags", runs.dags)
        yield ("dag_run", "runs", runs.runs)
        yield ("dag_run", "oldest_updated_at", iso(runs.oldest_updated_at))
        yield ("dag_run", "newest_updated_at", iso(runs.newest_updated_at))
        yield ("dag_run", "over_max_value_storage_bytes", runs.over_limit)
        for bucket, rows in runs.expiry.items():
            yield ("dag_run_expiry", bucket, rows)
    assets = stats.asset
    if assets is not None:
        yield ("asset", "rows", assets.rows)
        yield ("asset", "value_bytes", assets.value_bytes)
        yield ("asset", "assets", assets.assets)
        yield ("asset", "inactive_assets", assets.inactive_assets)
        yield ("asset", "inactive_asset_rows", assets.inactive_rows)
        yield ("asset", "oldest_updated_at", iso(assets.oldest_updated_at))
        yield ("asset", "newest_updated_at", iso(assets.newest_updated_at))
        yield ("asset", "over_max_value_storage_bytes", assets.over_limit)
        for a in assets.top_assets:
            yield ("asset_top", a.asset_id, a.rows, a.value_bytes, "active" if a.active else "inactive", a.name, a.uri)
    for value in stats.largest or ():
        scope = (getattr(value, name) for name in LARGEST_SCOPES[value.store])
        yield ("largest", value.store, value.value_bytes, *scope, value.key)
