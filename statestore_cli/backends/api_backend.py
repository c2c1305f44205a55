"""``ApiBackend``: the task and asset state stores through Airflow's REST API (``--api-url``), for an Airflow
whose metadata database cannot be reached (a managed service). The routes, as Airflow 3.3 serves them:

- a task instance's keys: ``/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/state-store``
  (``GET`` a page of them, ``DELETE`` them all; ``?map_index=``, ``?all_map_indices=``), and ``.../{key}``
  (``GET``, ``PUT`` with the value and ``expires_at``, ``PATCH`` keeping the expiry, ``DELETE``);
- an asset's keys: ``/api/v2/assets/{asset_id}/state-store`` and ``.../{key}``, an asset's id looked up by
  its name or uri (``/api/v2/assets``, matched exactly here: the server's patterns match substrings).

No route lists keys across task instances: ``entries`` walks the task instances (``.../taskInstances``, a
run of ``~`` for all of a dag's runs) and reads each one's keys.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from functools import partial
from itertools import islice
from typing import Any

from statestore_cli.backends.api_client import ROLE_ASSET_WRITE, ROLE_WRITE, ApiClient, segment
from statestore_cli.backends.base import BaseStoreBackend, ThreadOffloadMixin
from statestore_cli.errors import InvalidInputError, NotFoundError
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.retention import BACKEND_DEFAULT
from statestore_cli.model.scopes import (
    AssetScope,
    DagRunScope,
    StoreScope,
    TaskScope,
    no_asset_to_write,
    no_run_to_write,
)
from statestore_cli.model.timestamps import utc_instant

NO_DAG_RUN_ROUTE = (
    "dag-run keys (Airflow 3.4) have no route in Airflow's REST API: run this with --conn on the metadata database"
)
ON_API = "on this api-server"  # where a refused write's target is missing (a database says "in this ...")
PAGE = 100  # rows per page: Airflow's default [api] maximum_page_limit


class ApiBackend(ThreadOffloadMixin, BaseStoreBackend):
    """The state stores behind the API ``client`` talks to. Dag-run keys (Airflow 3.4) have no route."""

    supports_regions = False
    can_replace = True

    def __init__(self, client: ApiClient, *, concurrency: int = 8) -> None:
        self.client = client
        self.concurrency = concurrency  # requests in flight at once while walking task instances
        self._asset_ids: dict[AssetScope, tuple[int, str, str] | None] = {}
        self.on_walk: Callable[[int, int], None] | None = None  # hears (task instances read, of how many)
        self.unknown: list[str] = []  # the dags and dag runs a walk found the API does not know, as notes
        self.dags: list[str] | None = None  # the dags a walk of every dag visits (None: all the api-server has)
        self.walked: dict[Any, Any] = {}  # a command's walks, by what they read (``ops.api_walks.keys_of_run``)
        self._pool: Any = None  # run_all's threads (a ThreadPoolExecutor), made when first needed
        self._lock = threading.Lock()

    # -- one key -------------------------------------------------------------------------------------
    def get(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        entry = self.describe(scope, key)
        return None if entry is None else str(entry.value)

    def describe(self, scope: StoreScope, key: str, *, session: Any = None) -> Entry | None:
        """The key with its timestamps, its value still JSON text (as the metastore backend's), or None."""
        path, query = self._key_route(scope, key, create=False)
        if path is None:
            return None
        try:
            found = self.client.call("GET", path, query=query)
        except NotFoundError:
            return None
        return _entry(scope, found, self._asset_names(scope))

    def set(self, scope: StoreScope, key: str, value: str, *, expires_at: Any = None, session: Any = None) -> None:
        """Write the key; ``expires_at`` is a UTC datetime, None (never) or ``BACKEND_DEFAULT`` (the server's
        ``[state_store] default_retention_days``); asset keys have no expiry."""
        path, query = self._key_route(scope, key, create=True)
        assert path is not None
        body: dict[str, Any] = {"value": json.loads(value)}
        if isinstance(scope, TaskScope):
            body["expires_at"] = _expiry(expires_at)
        role = ROLE_WRITE if isinstance(scope, TaskScope) else ROLE_ASSET_WRITE
        try:
            self.client.call("PUT", path, query=query, body=body, role=role)
        except NotFoundError:  # refused as a write into an Airflow database is: nothing there to hold it
            raise InvalidInputError(self.no_target(scope)) from None

    def has_target(self, scope: StoreScope) -> bool:
        """Whether the task instance or asset exists, that a write of its keys needs."""
        if isinstance(scope, DagRunScope):
            raise InvalidInputError(NO_DAG_RUN_ROUTE)
        if isinstance(scope, AssetScope):
            return self.has_asset(scope)
        path = f"/api/v2/dags/{segment(scope.dag_id)}/dagRuns/{segment(scope.run_id)}/taskInstances/"
        path += segment(scope.task_id) + ("" if scope.map_index < 0 else f"/{scope.map_index}")
        try:
            self.client.call("GET", path)
        except NotFoundError:
            return False
        return True

    def no_target(self, scope: StoreScope) -> str:
        """Why a write of the scope's keys is refused: the dag run, task instance or asset it needs is not there."""
        if isinstance(scope, AssetScope):
            return no_asset_to_write(scope, ON_API)
        if isinstance(scope, TaskScope) and not self.has_run(scope):
            return no_run_to_write(scope, ON_API)
        return f"{_no_scope(scope)} {ON_API}; task keys can only be written for task instances Airflow created"

    def replace(self, scope: StoreScope, key: str, value: str, *, session: Any = None) -> int:
        """Replace an existing key's value, keeping its expiry; 0 when the key is not there."""
        if not isinstance(scope, TaskScope):  # asset keys never expire: a write of an existing one keeps it
            if self.describe(scope, key) is None:
                return 0
            self.set(scope, key, value)
            return 1
        path, query = self._key_route(scope, key, create=True)
        assert path is not None
        try:
            self.client.call("PATCH", path, query=query, body={"value": json.loads(value)}, role=ROLE_WRITE)
        except NotFoundError:
            return 0
        return 1

    def delete(self, scope: StoreScope, key: str, *, session: Any = None) -> int | None:
        """Remove the key; how many went (the API says nothing of a key that was not there: it is read first)."""
        if self.describe(scope, key) is None:
            return 0
        path, query = self._key_route(scope, key, create=False)
        assert path is not None
        role = ROLE_WRITE if isinstance(scope, TaskScope) else ROLE_ASSET_WRITE
        self.client.call("DELETE", path, query=query, role=role)
        return 1

    def drop(self, scope: TaskScope | AssetScope, key: str) -> int:
        """Delete a key known to be there, in one request: 1, or 0 when its task instance (or asset) went
        meanwhile, its keys with it. The API answers a key that went meanwhile as one it deleted."""
        path, query = self._key_route(scope, key, create=False)
        if path is None:  # an asset that went since its keys were read
            return 0
        role = ROLE_WRITE if isinstance(scope, TaskScope) else ROLE_ASSET_WRITE
        try:
            self.client.call("DELETE", path, query=query, role=role)
        except NotFoundError:
            return 0
        return 1

    def drop_all(self, keys: Sequence[tuple[TaskScope, str]], on_deleted: Callable[[int], None]) -> None:
        """Delete keys known to be there, ``concurrency`` requests at a time (``run_all``); ``on_deleted`` hears
        each one deleted (``drop``), by its index in ``keys``."""
        calls = [partial(self.drop, scope, key) for scope, key in keys]
        self.run_all(calls, lambda index, dropped: on_deleted(index) if dropped else None)

    def run_all(self, calls: Sequence[Callable[[], Any]], on_done: Callable[[int, Any], None]) -> None:
        """Make ``calls`` (each a request or two) ``concurrency`` at a time; ``on_done`` hears each that returned
        (its index in ``calls`` and what it returned), in the calling thread. A failure (or a Ctrl-C) makes none
        of the calls not yet begun; a failure is raised once those begun have ended, each that returned heard."""
        if self.concurrency <= 1 or len(calls) <= 1:
            for index, call in enumerate(calls):
                on_done(index, call())
            return
        from concurrent.futures import as_completed

        self.client.authorize()  # before the threads: one token exchange, not one per thread
        pool = self._workers()
        futures = [pool.submit(call) for call in calls]
        index_of = {future: index for index, future in enumerate(futures)}
        failure: BaseException | None = None
        try:
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                if future.exception() is None:
                    on_done(index_of[future], future.result())
                    continue
                failure = failure or future.exception()
                for queued in futures:
                    queued.cancel()
        except BaseException:
            for queued in futures:
                queued.cancel()
            raise
        if failure is not None:
            raise failure

    def _workers(self) -> Any:
        """The threads that make the calls of ``run_all``, kept for the command so that each keeps its
        connection open from one request to the next."""
        with self._lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="statestore-api")
            return self._pool

    def close(self) -> None:
        """Stop the worker threads (after their requests) and close the connections."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    # -- a scope -------------------------------------------------------------------------------------
    def count(self, scope: StoreScope, *, all_map_indices: bool = False) -> int | None:
        """The scope's keys, in one request (0 for a task instance or asset the API does not know, as a
        database has no keys for it); None across map indices: no route counts them."""
        if all_map_indices:
            return None
        path, query = self._scope_route(scope)
        try:
            return 0 if path is None else self._total(path, query)
        except NotFoundError:
            return 0

    def clear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> int | None:
        """Remove the scope's keys in one request; None: the API does not say how many went (``count`` first)."""
        path, query = self._scope_route(scope)
        if path is None:
            return 0
        if all_map_indices:
            query = {"all_map_indices": "true"}
        role = ROLE_WRITE if isinstance(scope, TaskScope) else ROLE_ASSET_WRITE
        self.client.call("DELETE", path, query=query, role=role, missing=_no_scope(scope))
        return None

    def scope_rows(self, scope: StoreScope) -> Iterator[dict[str, Any]]:
        """Every key of ``scope`` as the API answers it (``key``, ``value``, timestamps), in key order, a page
        at a time."""
        path, query = self._scope_route(scope)
        if path is None:
            return
        field = "task_state_store" if isinstance(scope, TaskScope) else "asset_state_store"
        yield from self._pages(path, query, field)

    def scope_entries(self, scope: StoreScope) -> Iterator[Entry]:
        """Every key of ``scope``, in key order."""
        names = self._asset_names(scope)
        return (_entry(scope, row, names) for row in self.scope_rows(scope))

    def each_scope(self, scopes: Sequence[StoreScope]) -> Iterator[list[dict[str, Any]]]:
        """Each scope's keys as the API answers them (``scope_rows``), in the order of ``scopes``, read
        ``concurrency`` scopes at a time: a walk is one request per task instance, each a round trip."""
        if self.concurrency <= 1 or len(scopes) <= 1:
            yield from (list(self.scope_rows(scope)) for scope in scopes)
            return
        from concurrent.futures import Future, ThreadPoolExecutor

        self.client.authorize()  # before the threads: one token exchange, not one per thread
        pool = ThreadPoolExecutor(self.concurrency)
        try:
            ahead: deque[Future[list[dict[str, Any]]]] = deque()
            for scope in scopes:
                ahead.append(pool.submit(self._rows_of, scope))
                if len(ahead) >= 2 * self.concurrency:  # bounded: a slow reader holds few pages
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:  # after a failed request or a Ctrl-C, those queued behind it are never sent
            pool.shutdown(wait=True, cancel_futures=True)

    def _rows_of(self, scope: StoreScope) -> list[dict[str, Any]]:
        return list(self.scope_rows(scope))

    def task_rows(self, filt: KeyFilter) -> Iterator[tuple[TaskScope, str | None, dict[str, Any]]]:
        """Each task key ``filt`` selects as the API answers it, with its task instance and that one's state,
        in ``list``'s order."""
        instances = self.task_instances(filt)
        heard = self.on_walk or _nobody
        heard(0, len(instances))
        walked = zip(instances, self.each_scope([s for s, _ in instances]), strict=True)
        for done, ((scope, state), rows) in enumerate(walked, 1):
            yield from ((scope, state, row) for row in rows if filt.key in (None, row["key"]))
            heard(done, len(instances))

    def asset_rows(self, filt: KeyFilter) -> Iterator[tuple[tuple[int, str, str], dict[str, Any]]]:
        """Each asset key ``filt`` selects as the API answers it, with its asset's id, name and uri, ordered by
        name, uri and key."""
        for asset in self.assets(filt):
            for row in self.scope_rows(AssetScope(asset_id=asset[0])):
                if filt.key in (None, row["key"]):
                    yield asset, row

    def entries(self, filt: KeyFilter, *, limit: int | None = None, offset: int = 0) -> Iterator[Entry]:
        """The keys ``filt`` selects, task keys first, in scope and key order, as ``list`` shows them: each
        task instance's keys read in turn (no route lists keys across them), then each asset's."""
        if (limit is not None and limit < 0) or offset < 0:
            raise InvalidInputError(f"limit and offset must be 0 or more, got limit={limit} offset={offset}")
        if filt.region_id is not None:
            raise InvalidInputError("the API addresses no task region: drop --region-id")
        if filt.store == "dag_run":
            raise InvalidInputError(NO_DAG_RUN_ROUTE)
        return islice(self._entries(filt), offset, None if limit is None else offset + limit)

    def _entries(self, filt: KeyFilter) -> Iterator[Entry]:
        if wants_tasks(filt):
            yield from (_entry(scope, row, None) for scope, _state, row in self.task_rows(filt))
        if wants_assets(filt):
            yield from (_entry(AssetScope(asset_id=asset[0]), row, asset) for asset, row in self.asset_rows(filt))

    def task_instances(self, filt: KeyFilter) -> list[tuple[TaskScope, str | None]]:
        """The task instances ``filt`` names with their state (None: not set yet), sorted as ``list`` orders
        keys (dag, run, task, map index)."""
        dags = [filt.dag_id] if filt.dag_id is not None else self._dag_ids()
        run = filt.run_id if filt.run_id is not None else "~"
        found: dict[TaskScope, str | None] = {}
        for dag_id in dags:
            path = f"/api/v2/dags/{segment(dag_id)}/dagRuns/{segment(run)}/taskInstances"
            query: dict[str, Any] = {}
            if filt.task_id is not None:
                query["task_id"] = filt.task_id
            if filt.map_index is not None:
                query["map_index"] = filt.map_index
            try:
                for row in self._pages(path, query, "task_instances"):
                    scope = TaskScope(row["dag_id"], row["dag_run_id"], row["task_id"], int(row.get("map_index", -1)))
                    found[scope] = row.get("state")
            except NotFoundError:  # as on a database, no such dag or run holds no keys: a note says why
                named = f"dag_id {dag_id!r}" if run == "~" else f"dag run dag_id={dag_id} run_id={run}"
                self.unknown.append(f"the api-server has no {named}")
        return sorted(
            found.items(), key=lambda item: (item[0].dag_id, item[0].run_id, item[0].task_id, item[0].map_index)
        )

    def _dag_ids(self) -> list[str]:
        if self.dags is not None:
            return self.dags
        return sorted(row["dag_id"] for row in self._pages("/api/v2/dags", {}, "dags"))

    def assets(self, filt: KeyFilter) -> list[tuple[int, str, str]]:
        """The assets ``filt`` names (exactly), as (id, name, uri), ordered by name and uri."""
        if filt.asset_id is not None:
            found = self.asset_of(AssetScope(asset_id=filt.asset_id))
            chosen = [found] if found is not None and _names(_row(found), None, filt.name, filt.uri) else []
        else:
            query = _asset_query(AssetScope(name=filt.name, uri=filt.uri)) if filt.has_asset_fields else {}
            rows = self._pages("/api/v2/assets", query, "assets")
            chosen = [(int(r["id"]), r["name"], r["uri"]) for r in rows if _names(r, None, filt.name, filt.uri)]
        return sorted(chosen, key=lambda asset: (asset[1], asset[2]))

    def _pages(self, path: str, query: dict[str, Any], field: str, missing: str | None = None) -> Iterator[Any]:
        offset = 0
        while True:
            page = self.client.call("GET", path, query={**query, "limit": PAGE, "offset": offset}, missing=missing)
            rows = page.get(field, [])
            yield from rows
            offset += len(rows)
            if not rows or offset >= int(page.get("total_entries", 0)):
                return

    def _total(self, path: str, query: dict[str, Any]) -> int:
        page = self.client.call("GET", path, query={**query, "limit": 1, "offset": 0})
        return int(page.get("total_entries", 0))

    # -- routes --------------------------------------------------------------------------------------
    def _scope_route(self, scope: StoreScope) -> tuple[str | None, dict[str, Any]]:
        if isinstance(scope, TaskScope):
            path = (
                f"/api/v2/dags/{segment(scope.dag_id)}/dagRuns/{segment(scope.run_id)}"
                f"/taskInstances/{segment(scope.task_id)}/state-store"
            )
            return path, {"map_index": scope.map_index}
        if isinstance(scope, AssetScope):
            found = self.asset_of(scope)
            return (None, {}) if found is None else (f"/api/v2/assets/{found[0]}/state-store", {})
        raise InvalidInputError(NO_DAG_RUN_ROUTE)

    def _key_route(self, scope: StoreScope, key: str, *, create: bool) -> tuple[str | None, dict[str, Any]]:
        path, query = self._scope_route(scope)
        if path is None and create:  # as a write into an Airflow database is refused
            raise InvalidInputError(self.no_target(scope))
        return (None, query) if path is None else (f"{path}/{segment(key)}", query)

    def asset_of(self, scope: AssetScope) -> tuple[int, str, str] | None:
        """The asset's id, name and uri (None: no asset is so named), looked up once."""
        if scope not in self._asset_ids:
            if scope.asset_id is not None:
                try:
                    row = self.client.call("GET", f"/api/v2/assets/{scope.asset_id}")
                except NotFoundError:
                    row = None
                rows = [] if row is None else [row]
            else:
                rows = list(self._pages("/api/v2/assets", _asset_query(scope), "assets"))
            chosen = [r for r in rows if _names(r, scope.asset_id, scope.name, scope.uri)]
            self._asset_ids[scope] = (int(chosen[0]["id"]), chosen[0]["name"], chosen[0]["uri"]) if chosen else None
        return self._asset_ids[scope]

    def has_run(self, scope: TaskScope | DagRunScope) -> bool:
        try:
            self.client.call("GET", f"/api/v2/dags/{segment(scope.dag_id)}/dagRuns/{segment(scope.run_id)}")
        except NotFoundError:
            return False
        return True

    def has_asset(self, scope: AssetScope) -> bool:
        return self.asset_of(scope) is not None

    def asset_names(self) -> list[str]:
        return [row["name"] for row in self._pages("/api/v2/assets", {}, "assets")]

    def _asset_names(self, scope: StoreScope) -> tuple[int, str, str] | None:
        return self.asset_of(scope) if isinstance(scope, AssetScope) else None


def _nobody(done: int, total: int) -> None:
    """The listener of a walk no one follows."""


def _asset_query(scope: AssetScope) -> dict[str, Any]:
    return {"name_pattern": scope.name} if scope.name else {"uri_pattern": scope.uri}


def _names(row: dict[str, Any], asset_id: int | None, name: str | None, uri: str | None) -> bool:
    """Whether the asset ``row`` is the one named (exactly: the API's patterns match substrings)."""
    return asset_id in (None, row["id"]) and name in (None, row["name"]) and uri in (None, row["uri"])


def _no_scope(scope: StoreScope) -> str:
    if isinstance(scope, TaskScope):
        return (
            f"no task instance dag_id={scope.dag_id} run_id={scope.run_id} task_id={scope.task_id} "
            f"map_index={scope.map_index}"
        )
    return f"no such asset {scope.describe()}"


def _expiry(expires_at: Any) -> Any:
    if expires_at is BACKEND_DEFAULT:
        return "default"
    if expires_at is None:
        return None
    assert isinstance(expires_at, datetime)
    return expires_at.isoformat()


def moment(text: str | None) -> datetime | None:
    """A timestamp as the API writes it (ISO 8601, ``Z`` for UTC) as an aware UTC datetime."""
    return None if text is None else utc_instant(text)


def _entry(scope: StoreScope, row: dict[str, Any], asset: tuple[int, str, str] | None) -> Entry:
    value = json.dumps(row["value"], ensure_ascii=False)
    updated, expires = moment(row.get("updated_at")), moment(row.get("expires_at"))
    if isinstance(scope, TaskScope):
        where = (scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
        return Entry("task", row["key"], updated, expires, *where, value=value)
    asset_id, name, uri = asset if asset is not None else (None, None, None)
    return Entry("asset", row["key"], updated, None, asset_id=asset_id, name=name, uri=uri, value=value)


def wants_tasks(filt: KeyFilter) -> bool:
    """Whether ``filt`` selects task keys (as ``list`` reads it)."""
    return filt.store in (None, "task") and not filt.has_asset_fields


def wants_assets(filt: KeyFilter) -> bool:
    return filt.store in (None, "asset") and not filt.has_task_fields


def _row(asset: tuple[int, str, str]) -> dict[str, Any]:
    return {"id": asset[0], "name": asset[1], "uri": asset[2]}
