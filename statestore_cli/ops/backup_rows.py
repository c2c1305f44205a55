"""What a backed-up delete deletes (``clean``, ``clear``, ``assets sweep`` with ``--backup FILE``): a ``Selection``
of one store's rows, and the ``Lines`` they become (``statestore_cli.ops.export_lines``). Values are written as
stored, as ``export`` writes them: with a worker-side backend they are its references.
``statestore_cli.ops.backup`` runs the batches that delete them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table
from sqlalchemy.sql import ColumnElement

from statestore_cli.db.engines.base import EngineImpl
from statestore_cli.db.schema import asset, asset_state_store
from statestore_cli.errors import BackendError
from statestore_cli.model.scopes import NIL_REGION
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops.export_lines import Lines, dag_run_shape, task_shape
from statestore_cli.ops.records import asset_record, dag_run_record, load_strict, task_record


@dataclass(frozen=True, eq=False)
class Selection:
    """What a backed-up delete deletes from one table, and how each row becomes a line.

    ``order`` is unique within ``where`` (a row id; an asset's key within its asset) and is walked upwards;
    ``where`` selects the rows and is re-checked by the delete; ``walk`` is the same selection written so that
    the engine walks ``order`` (see ``run_clear.run_keys``), ``where`` when None. ``make_lines`` gives the
    columns each row is read with and how they become lines, for an engine."""

    table: Table
    order: Any
    where: ColumnElement[bool]
    make_lines: Callable[[EngineImpl, bool], Lines]
    walk: ColumnElement[bool] | None = None
    lock_of: Table | None = None  # lock only this table's rows (a query that joins another)
    primary_walk: bool = False  # ``order`` is the table's primary key
    source: Any = None  # what the rows are selected from, when not ``table`` alone (a join)
    tiebreak: Any = None  # ordered by after ``order`` when that is not unique (read in one go)
    _made: dict[tuple[str, bool], Lines] = field(default_factory=dict, repr=False)

    @property
    def walked(self) -> ColumnElement[bool]:
        """The selection as the engine walks ``order``: ``walk``, or ``where`` where none is given."""
        return self.walk if self.walk is not None else self.where

    def lines(self, impl: EngineImpl, engine_checks: bool = True) -> Lines:
        """The selection's ``Lines`` on ``impl``'s engine, made once (every batch asks); ``engine_checks``:
        with the engine's JSON check of each value where it has one (``EngineImpl.json_value``), else
        each value checked in this process."""
        made = self._made.get((impl.name, engine_checks))
        if made is None:
            made = self._made[(impl.name, engine_checks)] = self.make_lines(impl, engine_checks)
        return made


def decoded(value: str, key: str, scope: Callable[[], str]) -> Any:
    """A stored value as the export writes it (the JSON it holds); a value that is not JSON stops the batch
    (rolled back: nothing of it deleted), since no import could read its line back."""
    try:
        return load_strict(value)
    except ValueError as exc:
        raise BackendError(
            f"the value of key {key!r} for {scope()} is not valid JSON ({getattr(exc, 'msg', exc)}), so it cannot "
            "be backed up; the batch was rolled back: fix or delete that key, or run without --backup"
        ) from None


def instant(moment: Any, key: str, scope: Callable[[], str]) -> str:
    """A timestamp as read (``EngineImpl.stored_moment``) as the export writes it, ISO 8601 UTC; one that no
    line can hold (before year 1, after 9999) stops the batch, as a value that is not JSON does."""
    try:
        return iso_utc(moment)
    except (TypeError, ValueError) as exc:
        why = "timestamp too small (before year 1)" if str(moment).endswith(" BC") else str(exc)
        raise BackendError(
            f"key {key!r} for {scope()} has a timestamp an export line cannot hold ({moment}: {why}), so it cannot "
            "be backed up; the batch was rolled back: fix or delete that key, or run without --backup"
        ) from None


def _expiry(moment: Any, key: str, scope: Callable[[], str]) -> str | None:
    return None if moment is None else instant(moment, key, scope)


def _stored(impl: EngineImpl, table: Table, fields: Sequence[Any], engine_checks: bool) -> tuple[list[Any], bool]:
    """``fields``, then the timestamps and the value as a backup reads them (and, with ``engine_checks``, the
    engine's JSON check of the value where it has one); whether that check is there."""
    value, valid = impl.json_value(table.c.value) if engine_checks else (table.c.value, None)
    columns = [*fields, impl.stored_moment(table.c.updated_at), impl.stored_moment(table.c.expires_at), value]
    return columns + ([valid] if valid is not None else []), valid is not None


def task_rows(table: Table, where: ColumnElement[bool], walk: ColumnElement[bool] | None = None) -> Selection:
    """Task keys (``table``: the layout's task table) that ``where`` selects, as export lines."""
    c = table.c
    regions = "region_id" in c
    fields = [c.dag_id, c.run_id, c.task_id, *([c.region_id] if regions else []), c.map_index, c.key]

    def record(row: Any) -> dict[str, Any]:
        _, dag_id, run_id, task_id, *rest = row
        in_region = rest.pop(0) if regions else None
        map_index, key, updated_at, expires_at, value = rest[:5]
        scope = lambda: f"dag_id={dag_id} run_id={run_id} task_id={task_id} map_index={map_index}"  # noqa: E731
        value = decoded(value, key, scope)
        region = str(in_region) if in_region is not None and in_region != NIL_REGION else None  # outside any: none
        updated, expiry = instant(updated_at, key, scope), _expiry(expires_at, key, scope)
        return task_record(dag_id, run_id, task_id, region, map_index, key, updated, expiry, value)

    def make(impl: EngineImpl, engine_checks: bool) -> Lines:
        columns, checked = _stored(impl, table, fields, engine_checks)
        return Lines(columns, record, task_shape(regions, checked))

    return Selection(table, c.id, where, make, walk, primary_walk=True)


def dag_run_rows(table: Table, where: ColumnElement[bool], walk: ColumnElement[bool] | None = None) -> Selection:
    """Dag-run keys (Airflow 3.4's ``dag_run_state_store``) that ``where`` selects, as export lines."""
    c = table.c

    def record(row: Any) -> dict[str, Any]:
        _, dag_id, run_id, key, updated_at, expires_at, value = row[:7]
        scope = lambda: f"dag run dag_id={dag_id} run_id={run_id}"  # noqa: E731
        value = decoded(value, key, scope)
        updated, expiry = instant(updated_at, key, scope), _expiry(expires_at, key, scope)
        return dag_run_record(dag_id, run_id, key, updated, expiry, value)

    def make(impl: EngineImpl, engine_checks: bool) -> Lines:
        columns, checked = _stored(impl, table, [c.dag_id, c.run_id, c.key], engine_checks)
        return Lines(columns, record, dag_run_shape(checked))

    return Selection(table, c.id, where, make, walk, primary_walk=True)


_WRITER = (
    asset_state_store.c.last_updated_by_kind,
    asset_state_store.c.last_updated_by_dag_id,
    asset_state_store.c.last_updated_by_run_id,
    asset_state_store.c.last_updated_by_task_id,
    asset_state_store.c.last_updated_by_map_index,
)


def asset_rows(where: ColumnElement[bool], name: str, uri: str) -> Selection:
    """The keys of one asset (named ``name`` and ``uri``) that ``where`` selects, walked by key, as export lines
    (an asset's keys are few: each row's line is made from its record)."""
    kv = asset_state_store

    def record(row: Any) -> dict[str, Any]:
        key, updated_at, value, *writer = row
        scope = lambda: f"asset name={name} uri={uri}"  # noqa: E731
        value = decoded(value, key, scope)
        return asset_record(name, uri, key, instant(updated_at, key, scope), tuple(writer), value)

    def make(impl: EngineImpl, engine_checks: bool) -> Lines:
        return Lines([impl.stored_moment(kv.c.updated_at), kv.c.value, *_WRITER], record)

    return Selection(kv, kv.c.key, where, make)


def assets_rows(where: ColumnElement[bool], record: Callable[[Any], None] | None = None) -> Selection:
    """The asset keys ``where`` selects, of any assets (their names joined in), as export lines: for a
    one-statement delete, read in one go (``order``, the asset id, is not unique). ``record``, where given,
    hears each row (its asset's id, name and uri first) before its line is made."""
    kv = asset_state_store
    joined = kv.join(asset, asset.c.id == kv.c.asset_id)

    def line(row: Any) -> dict[str, Any]:
        if record is not None:
            record(row)
        _, name, uri, key, updated_at, value, *writer = row
        scope = lambda: f"asset name={name} uri={uri}"  # noqa: E731
        value = decoded(value, key, scope)
        return asset_record(name, uri, key, instant(updated_at, key, scope), tuple(writer), value)

    def make(impl: EngineImpl, engine_checks: bool) -> Lines:
        columns = [asset.c.name, asset.c.uri, kv.c.key, impl.stored_moment(kv.c.updated_at), kv.c.value, *_WRITER]
        return Lines(columns, line)

    return Selection(kv, kv.c.asset_id, where, make, lock_of=kv, source=joined, tiebreak=kv.c.key)
