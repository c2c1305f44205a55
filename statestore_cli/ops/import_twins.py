"""An import's twins: on MySQL/MariaDB, whose unique indexes ignore trailing spaces (and, for some
columns, letter case), two lines or a line and a stored row differing only there are one row. Refused,
saying which lines and what each was writing."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from statestore_cli.db.mysql_text import padless, twin_problem
from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.ops.records import AssetRow, BadRecord, DagRunRow, TaskRow


# What a refused import line was writing, for the error.
def describe_dag_run(row: TaskRow | DagRunRow) -> str:
    return f"dag run dag_id={row.dag_id!r} run_id={row.run_id!r}"


def describe_task_key(row: TaskRow) -> str:
    region = f" region_id={row.region_id}" if row.region_id != NIL_REGION else ""
    return (
        f"key {row.key!r} for dag_id={row.dag_id} run_id={row.run_id} task_id={row.task_id} map_index={row.map_index}"
        + region
    )


def describe_dag_run_key(row: DagRunRow) -> str:
    return f"key {row.key!r} for dag run dag_id={row.dag_id} run_id={row.run_id}"


def describe_asset(row: AssetRow) -> str:
    return f"asset name={row.name!r} uri={row.uri!r}"


def describe_asset_key(row: AssetRow) -> str:
    return f"key {row.key!r} for asset name={row.name} uri={row.uri}"


def refuse_twin_lines(tasks: Sequence[TaskRow], dag_runs: Sequence[DagRunRow], assets: Sequence[AssetRow]) -> None:
    """MySQL/MariaDB: refuse a batch with two lines whose runs, assets or keys differ only in trailing
    spaces, which a unique index there takes for one row (the later line would overwrite the earlier)."""
    _twin_lines([*tasks, *dag_runs], lambda r: (r.dag_id, r.run_id), ("dag_id", "run_id"), describe_dag_run)
    names = ("dag_id", "run_id", "task_id", "region_id", "map_index", "key")
    _twin_lines(
        tasks, lambda r: (r.dag_id, r.run_id, r.task_id, r.region_id, r.map_index, r.key), names, describe_task_key
    )
    _twin_lines(dag_runs, lambda r: (r.dag_id, r.run_id, r.key), ("dag_id", "run_id", "key"), describe_dag_run_key)
    _twin_lines(assets, lambda r: (r.name, r.uri), ("name", "uri"), describe_asset)
    _twin_lines(assets, lambda r: (r.name, r.uri, r.key), ("name", "uri", "key"), describe_asset_key)


def _twin_lines(
    rows: Sequence[Any], identity: Callable[[Any], tuple[Any, ...]], names: Sequence[str], what: Callable[[Any], str]
) -> None:
    seen: dict[tuple[Any, ...], Any] = {}
    for row in sorted(rows, key=lambda r: r.line):
        mine = identity(row)
        first = seen.setdefault(padless(mine), row)
        if identity(first) != mine:
            raise BadRecord(row.line, twin_problem(what(row), names, mine, identity(first), f"line {first.line}'s"))


def refuse_stored_twins(
    stored: Iterable[tuple[Any, ...]],
    wanted: dict[Any, Any],
    names: Sequence[str],
    what: Callable[[Any], str],
    fold: Callable[[tuple[Any, ...]], tuple[Any, ...]] = padless,
) -> None:
    """MySQL/MariaDB: refuse a line (``wanted``: identity -> its row) whose identity differs from a stored
    one only in trailing spaces (``fold``: or in what else the column's collation ignores); its ``IN``
    lookup, compared as the unique index compares, returned that one."""
    extra = [identity for identity in stored if identity not in wanted]
    if not extra:
        return
    by_folded = {fold(identity): (identity, row) for identity, row in wanted.items()}
    for identity in extra:
        hit = by_folded.get(fold(identity))
        if hit is not None and padless(hit[0]) == padless(identity):
            raise BadRecord(hit[1].line, twin_problem(what(hit[1]), names, hit[0], identity))
        if hit is not None:
            raise BadRecord(
                hit[1].line,
                f"cannot write {what(hit[1])}: it and the stored key {identity[-1]!r} are one in the database's "
                "unique index (its collation ignores letter case), so they cannot be stored apart",
            )


def casefold_identity(identity: tuple[Any, ...]) -> tuple[Any, ...]:
    """An identity as a case-insensitive PAD SPACE index sees it, near enough: texts folded, spaces gone
    from their ends (Airflow 3.4's ``dag_run_state_store.key`` may have such a collation on MySQL)."""
    return tuple(v.casefold() if isinstance(v, str) else v for v in padless(identity))
