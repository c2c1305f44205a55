"""How an import looks up and writes its batches: the existence queries (a thousand keys each), the dag
runs and assets it finds or creates, and the upserts of many rows (each engine's ``EngineImpl.upsert_of``, run
with a list of rows for ``executemany``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.engine import Connection

from statestore_cli.db.engines.base import EngineImpl
from statestore_cli.db.layout import Layout
from statestore_cli.db.mysql_text import index_equal
from statestore_cli.db.schema import ASSET_WRITER_COLUMNS, asset, asset_active, asset_state_store, dag_run
from statestore_cli.ops.records import AssetRow, BadRecord

asset_kv = asset_state_store
LOOKUP = 1000  # keys per existence query of an import (SQLite allows 32,766 parameters in one statement)


def in_list(column: Any, name: str) -> Any:
    return column.in_(bindparam(name, expanding=True))


# The import's queries, built once: statements built per batch would leave their reference cycles to the
# garbage collector, and memory would grow with the input until it ran.
_FIND_RUNS = select(dag_run.c.id, dag_run.c.dag_id, dag_run.c.run_id).where(
    in_list(dag_run.c.dag_id, "dag_ids"), in_list(dag_run.c.run_id, "run_ids")
)
_FIND_ASSETS = select(asset.c.id, asset.c.name, asset.c.uri).where(
    in_list(asset.c.name, "names"), in_list(asset.c.uri, "uris")
)
_CLASH = select(asset_active.c.name, asset_active.c.uri).where(
    # As the unique indexes compare (on MySQL without trailing spaces), since those are what refuse a row.
    or_(index_equal(asset_active.c.name, bindparam("name")), index_equal(asset_active.c.uri, bindparam("uri")))
)
_ASSET_IDENTITY = (asset_kv.c.asset_id, asset_kv.c.key)
ASSETS_PRESENT = select(*_ASSET_IDENTITY).where(*(in_list(c, f"v{i}") for i, c in enumerate(_ASSET_IDENTITY)))


def find_runs(conn: Connection, runs: Iterable[tuple[str, str]]) -> Iterator[tuple[tuple[str, str], int]]:
    """Every run whose dag id is one of ``runs``' and run id one of theirs: a superset of ``runs``, with
    on MySQL the runs differing from them only in trailing spaces; the caller picks the exact ones."""
    wanted = set(runs)
    params = {"dag_ids": sorted({d for d, _ in wanted}), "run_ids": sorted({r for _, r in wanted})}
    for run_pk, dag_id, run_id in conn.execute(_FIND_RUNS, params):
        yield (dag_id, run_id), int(run_pk)


def find_assets(conn: Connection, pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[tuple[str, str], int]]:
    """As ``find_runs``, for assets by name and uri."""
    wanted = set(pairs)
    params = {"names": sorted({n for n, _ in wanted}), "uris": sorted({u for _, u in wanted})}
    for asset_pk, name, uri in conn.execute(_FIND_ASSETS, params):
        yield (name, uri), int(asset_pk)


def first_rows(rows: Sequence[Any], parent: Callable[[Any], tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """Each dag run (or asset) of ``rows`` with the first row that names it."""
    first: dict[tuple[str, str], Any] = {}
    for r in rows:
        first.setdefault(parent(r), r)
    return first


def check_no_clash(conn: Connection, name: str, uri: str, line: int) -> None:
    """A new asset may not share its name or its uri with an active asset (Airflow's rule)."""
    clash = conn.execute(_CLASH, {"name": name, "uri": uri}).first()
    if clash is not None:
        raise BadRecord(
            line,
            f"asset name={name} uri={uri} clashes with the active asset name={clash.name} uri={clash.uri}: "
            "an active asset's name and uri are each unique",
        )


def stored_identities(conn: Connection, query: Any, identities: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    """The stored rows (values of a store's unique columns, as ``query`` selects them) among which are
    those of ``identities``: the caller picks the exact matches (and on MySQL the trailing-space twins).

    One query per ``LOOKUP`` keys: each column ``IN`` the chunk's values, which every engine answers from
    the unique index (a row-value ``IN`` list makes SQLite scan the whole table)."""
    found: set[tuple[Any, ...]] = set()  # a set: the lists of two chunks may both match a row
    ordered = sorted(set(identities))
    for start in range(0, len(ordered), LOOKUP):
        chunk = ordered[start : start + LOOKUP]
        params = {f"v{i}": sorted({identity[i] for identity in chunk}) for i in range(len(chunk[0]))}
        found.update(tuple(row) for row in conn.execute(query, params))
    return found


def task_upsert(impl: EngineImpl, layout: Layout) -> Any:
    """The task rows' upsert, with the layout's table and column keys, conflicting on its whole unique key
    (the region included where it has one)."""
    return impl.upsert_of(layout.task, layout.task_identity, ("value", "updated_at", "expires_at"))


def asset_upsert(impl: EngineImpl) -> Any:
    """The asset rows' upsert: each row ``asset_row`` makes."""
    return impl.upsert_of(asset_kv, ("asset_id", "key"), ("value", "updated_at", *ASSET_WRITER_COLUMNS))


def asset_row(asset_id: int | None, row: AssetRow) -> dict[str, Any]:
    """An asset key's row to write (``updated_by`` in the order of ``ASSET_WRITER_FIELDS``, as ``AssetRow``
    holds it)."""
    return {
        "asset_id": asset_id,
        "key": row.key,
        "value": row.value,
        "updated_at": row.updated_at,
        **dict(zip(ASSET_WRITER_COLUMNS, row.updated_by, strict=True)),
    }
