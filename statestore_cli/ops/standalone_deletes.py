"""Deleting a run or an asset of a standalone store (``runs delete``, ``assets delete``): the foreign keys'
``ON DELETE CASCADE`` removes its keys, as in Airflow. Refused on an Airflow database, whose runs and assets
are Airflow's. A worker-side backend's ``clear()`` runs for what went, after it is gone.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import delete, exists, func, select

from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.backends.store import Store
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import layout_of
from statestore_cli.db.schema import asset, asset_active, asset_state_store, dag_run
from statestore_cli.db.schema_state import alembic_version_table
from statestore_cli.errors import InvalidInputError, NotFoundError
from statestore_cli.model.scopes import AssetScope
from statestore_cli.ops.run_clear import clear_worker_tasks, run_keys, tasks_of

_akv = asset_state_store


def require_standalone(store: Store, what: str) -> None:
    """Raise ``InvalidInputError`` when the database is Airflow's: ``what`` is done with Airflow there."""
    _standalone_only(store.metastore_backend(what), what)


def _standalone_only(store: MetastoreBackend, what: str) -> None:
    with store.connection() as conn:
        if alembic_version_table(conn) is not None:
            raise InvalidInputError(
                f"this is an Airflow metadata database: {what} with Airflow (its UI, REST API or CLI), "
                "which removes their keys with them; statestore deletes runs and assets of a standalone store only"
            )


def delete_run(store: Store, dag_id: str, run_id: str) -> int:
    """Delete a dag run of a standalone store; the cascade removes its task keys. Returns how many went."""
    metastore = store.metastore_backend("deleting a run")
    _standalone_only(metastore, "delete dag runs")
    worker = store.worker_backend
    with metastore.connection() as conn:
        task = layout_of(conn).task
        where = run_keys(task, dag_id, run_id)
        keys = int(conn.execute(select(func.count()).select_from(task).where(where)).scalar_one())
        tasks = tasks_of(conn, where) if worker is not None else []
        gone = conn.execute(delete(dag_run).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)).rowcount
        if gone == 0:
            raise NotFoundError(f"no dag run dag_id={dag_id} run_id={run_id}")
    clear_worker_tasks(worker, tasks)
    return keys


def count_run_keys(store: Store, dag_id: str, run_id: str) -> int | None:
    """The task keys of a run (None: no such run)."""
    with store.metastore_backend("deleting a run").connection() as conn:
        found = conn.execute(select(dag_run.c.id).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)).first()
        if found is None:
            return None
        task = layout_of(conn).task
        return int(
            conn.execute(select(func.count()).select_from(task).where(task.c.dag_run_id == found.id)).scalar_one()
        )


class FoundAsset(NamedTuple):
    """The one asset a scope names, as ``find_asset`` finds it: with its key count, active or not."""

    asset_id: int
    name: str
    uri: str
    keys: int
    active: bool


def find_asset(store: Store, scope: AssetScope) -> FoundAsset:
    """The one asset (active or not) ``scope`` names, with its key count; ``NotFoundError`` when none."""
    metastore = store.metastore_backend("deleting an asset")
    impl_of(metastore.engine).check_asset_text(scope.name, scope.uri)
    conds = [asset.c.id == scope.asset_id] if scope.asset_id is not None else []
    conds += [asset.c.name == scope.name] if scope.name else []
    conds += [asset.c.uri == scope.uri] if scope.uri else []
    keys = select(func.count()).select_from(_akv).where(_akv.c.asset_id == asset.c.id).scalar_subquery()
    is_active = exists(
        select(asset_active.c.name).where(asset_active.c.name == asset.c.name, asset_active.c.uri == asset.c.uri)
    )
    query = select(asset.c.id, asset.c.name, asset.c.uri, keys, is_active).where(*conds).limit(2)
    with metastore.connection() as conn:
        rows = conn.execute(query).all()
    if not rows:
        raise NotFoundError(f"no asset {scope.describe()}")
    if len(rows) > 1:
        raise InvalidInputError(f"several assets match {scope.describe()}; give both name and uri, or asset_id")
    asset_id, name, uri, count, active = rows[0]
    return FoundAsset(int(asset_id), name, uri, int(count), bool(active))


def delete_asset(store: Store, scope: AssetScope) -> FoundAsset:
    """Delete an asset of a standalone store (active or not); the cascade removes its keys and its
    ``asset_active`` row. Returns the asset as it was, with the number of keys that went."""
    metastore = store.metastore_backend("deleting an asset")
    _standalone_only(metastore, "delete assets")
    found = find_asset(store, scope)
    with metastore.connection() as conn:
        keys = int(
            conn.execute(select(func.count()).select_from(_akv).where(_akv.c.asset_id == found.asset_id)).scalar_one()
        )
        if conn.execute(delete(asset).where(asset.c.id == found.asset_id)).rowcount == 0:
            raise NotFoundError(f"no asset {scope.describe()}")
    worker = store.worker_backend
    if worker is not None:
        worker.clear(AssetScope(asset_id=found.asset_id, name=found.name, uri=found.uri))
    return found._replace(keys=keys)
