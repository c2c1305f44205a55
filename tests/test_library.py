"""The library as a task or another program uses it: scopes, accessors, backends, async methods."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from stores import as_utc
from stores import sql as raw_rows

from statestore_cli import (
    NEVER_EXPIRE,
    AssetScope,
    AssetStateStoreAccessor,
    BaseStoreBackend,
    InvalidInputError,
    MetastoreBackend,
    StateValueTooLargeWarning,
    TaskScope,
    TaskStateStoreAccessor,
)
from statestore_cli.backends.base import REF_MARKER, ThreadOffloadMixin
from statestore_cli.db.database import make_engine

SCOPE = TaskScope("dag", "run", "task")


@pytest.fixture
def backend(db_url: str) -> MetastoreBackend:
    return MetastoreBackend(make_engine(db_url))


ALL_ENGINES = True  # every test here that uses a store runs on SQLite, PostgreSQL and MariaDB


# -- scopes ---------------------------------------------------------------------------------------------
def test_task_scope_defaults_and_validation():
    assert SCOPE.map_index == -1 and SCOPE.region_id.int == 0
    with pytest.raises(InvalidInputError, match="task_id must be a non-empty string"):
        TaskScope("d", "r", "")
    with pytest.raises(InvalidInputError, match="dag_id is 251 characters long; the limit is 250"):
        TaskScope("d" * 251, "r", "t")
    with pytest.raises(InvalidInputError, match="map_index must be an integer"):
        TaskScope("d", "r", "t", map_index="1")  # type: ignore[arg-type]


def test_asset_scope_needs_one_field():
    with pytest.raises(InvalidInputError, match="at least one of asset_id, name or uri"):
        AssetScope()
    assert AssetScope(uri="s3://b/k").describe() == "uri=s3://b/k"


# -- accessors: retention table -------------------------------------------------------------------------
FIXED_NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "retention, default_days, expected",
    [
        (timedelta(hours=6), 30, FIXED_NOW + timedelta(hours=6)),
        (None, 30, FIXED_NOW + timedelta(days=30)),
        (None, 0, None),
        (NEVER_EXPIRE, 30, None),
        (NEVER_EXPIRE, 0, None),
    ],
)
def test_retention_table(backend, db_url, retention, default_days, expected):
    acc = TaskStateStoreAccessor(SCOPE, backend, default_retention_days=default_days, clock=lambda: FIXED_NOW)
    assert acc.set("k", {"v": 1}, retention=retention) == expected
    [(stored,)] = raw_rows(db_url, "SELECT expires_at FROM task_state_store")
    assert as_utc(stored) == expected


def test_changing_default_retention_never_rewrites_existing_rows(backend, db_url):
    TaskStateStoreAccessor(SCOPE, backend, default_retention_days=1, clock=lambda: FIXED_NOW).set("k", 1)
    TaskStateStoreAccessor(SCOPE, backend, default_retention_days=0, clock=lambda: FIXED_NOW).set("other", 1)
    rows = raw_rows(db_url, "SELECT {key}, expires_at FROM task_state_store ORDER BY {key}")
    assert [(k, as_utc(e)) for k, e in rows] == [("k", datetime(2026, 1, 2, 12, 0, tzinfo=UTC)), ("other", None)]


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-1), 5])
def test_invalid_retention_is_refused(backend, bad):
    with pytest.raises(InvalidInputError):
        TaskStateStoreAccessor(SCOPE, backend).set("k", 1, retention=bad)


def test_accessor_get_default_and_none_refused(backend):
    acc = TaskStateStoreAccessor(SCOPE, backend)
    assert acc.get("missing") is None
    assert acc.get("missing", default={"d": 1}) == {"d": 1}
    with pytest.raises(InvalidInputError, match="cannot be None"):
        acc.set("k", None)
    with pytest.raises(InvalidInputError, match="not JSON-serialisable"):
        acc.set("k", {1, 2})
    assert acc.get("k") is None


def test_oversized_values_warn_in_the_library(backend):
    acc = AssetStateStoreAccessor(AssetScope(name="a"), backend, max_value_storage_bytes=8)
    with pytest.warns(StateValueTooLargeWarning, match="is 12 bytes, over"):
        acc.set("k", "0123456789")
    assert acc.get("k") == "0123456789"  # a warning, not a refusal


def test_delete_and_clear_through_accessors(backend):
    task = TaskStateStoreAccessor(SCOPE, backend)
    task.set("a", 1)
    task.set("b", 2)
    task.delete("a")
    assert (task.get("a"), task.get("b")) == (None, 2)
    task.clear()
    assert task.get("b") is None
    asset = AssetStateStoreAccessor(AssetScope(uri="s3://x"), backend)
    asset.set("w", [1])
    asset.clear()
    assert asset.get("w") is None


# -- worker-side backends ---------------------------------------------------------------------------
class ObjectStoreBackend(ThreadOffloadMixin, BaseStoreBackend):
    """A worker-side backend keeping payloads in a dict, as an object store would; references are paths."""

    def __init__(self, fail_delete: bool = False) -> None:
        self.objects: dict[str, str] = {}
        self.fail_delete = fail_delete
        self.calls: list[str] = []

    def _ref(self, scope, key):
        if isinstance(scope, TaskScope):
            return f"task/{scope.dag_id}/{scope.run_id}/{scope.task_id}/{scope.map_index}/{key}"
        return f"asset/{scope.name or scope.uri}/{key}"

    def serialize_task_state_store_to_ref(self, *, value, key, scope):
        ref = self._ref(scope, key)
        self.objects[ref] = json.dumps(value)
        return ref

    def deserialize_task_state_store_from_ref(self, stored):
        return json.loads(self.objects[stored])

    serialize_asset_state_store_to_ref = serialize_task_state_store_to_ref
    deserialize_asset_state_store_from_ref = deserialize_task_state_store_from_ref

    def get(self, scope, key, *, session=None):
        return self.objects.get(self._ref(scope, key))

    def set(self, scope, key, value, *, expires_at=None, session=None):
        self.objects[self._ref(scope, key)] = value

    def delete(self, scope, key, *, session=None):
        self.calls.append("delete")
        if self.fail_delete:
            raise RuntimeError("object store unavailable")
        return int(self.objects.pop(self._ref(scope, key), None) is not None)

    def clear(self, scope, *, all_map_indices=False, session=None):
        prefix = self._ref(scope, "")
        for ref in [r for r in self.objects if r.startswith(prefix)]:
            del self.objects[ref]
        return None


def test_worker_backend_stores_only_a_reference_in_the_database(backend, db_url):
    worker = ObjectStoreBackend()
    acc = TaskStateStoreAccessor(SCOPE, backend, worker_backend=worker)
    acc.set("payload", {"rows": list(range(5))})
    [(stored,)] = raw_rows(db_url, "SELECT value FROM task_state_store")
    assert json.loads(stored) == {REF_MARKER: "task/dag/run/task/-1/payload"}
    assert acc.get("payload") == {"rows": [0, 1, 2, 3, 4]}
    asset = AssetStateStoreAccessor(AssetScope(name="orders"), backend, worker_backend=worker)
    asset.set("wm", "2026")
    assert json.loads(raw_rows(db_url, "SELECT value FROM asset_state_store")[0][0]) == {REF_MARKER: "asset/orders/wm"}
    assert asset.get("wm") == "2026"


def test_delete_removes_the_database_reference_first(backend, db_url):
    worker = ObjectStoreBackend(fail_delete=True)
    acc = TaskStateStoreAccessor(SCOPE, backend, worker_backend=worker)
    acc.set("k", 1)
    with pytest.raises(RuntimeError, match="object store unavailable"):
        acc.delete("k")
    assert raw_rows(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]
    assert "task/dag/run/task/-1/k" in worker.objects  # the orphan...
    acc.set("k", 2)  # ...is overwritten by the next set of the same key: references are deterministic
    assert worker.objects["task/dag/run/task/-1/k"] == "2"
    assert acc.get("k") == 2


def test_default_hooks_are_json(backend):
    """The metastore backend keeps BaseStoreBackend's hooks: plain json.dumps / json.loads."""
    assert backend.serialize_task_state_store_to_ref(value={"a": 1}, key="k", scope=SCOPE) == '{"a": 1}'
    assert backend.serialize_asset_state_store_to_ref(value=[1], key="k", scope=AssetScope(name="a")) == "[1]"
    assert backend.deserialize_task_state_store_from_ref('{"a": 1}') == {"a": 1}
    assert backend.deserialize_asset_state_store_from_ref("[1]") == [1]


# -- BaseStoreBackend -----------------------------------------------------------------------------
def test_base_store_backend_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        BaseStoreBackend()  # type: ignore[abstract]


def test_get_value_decodes_and_cleanup_is_a_no_op(backend):
    backend.set(SCOPE, "k", '{"a": [1]}', expires_at=None)
    assert backend.get_value(SCOPE, "k") == {"a": [1]}
    assert backend.get_value(SCOPE, "missing") is None
    assert backend.cleanup() is None


def test_async_methods_run_off_the_event_loop_thread(backend):
    seen: list[int] = []

    class Recording(MetastoreBackend):
        def get(self, scope, key, *, session=None):
            seen.append(threading.get_ident())
            return super().get(scope, key, session=session)

    recording = Recording(backend.engine)

    async def scenario():
        loop_thread = threading.get_ident()
        await recording.aset(SCOPE, "k", '"v"', expires_at=None)
        assert await recording.aget(SCOPE, "k") == '"v"'
        assert await recording.aget_value(SCOPE, "k") == "v"
        assert await recording.adelete(SCOPE, "k") == 1
        await recording.aset(SCOPE, "k2", "1")
        assert await recording.aclear(SCOPE) == 1
        return loop_thread

    loop_thread = asyncio.run(scenario())
    assert seen and all(ident != loop_thread for ident in seen)


# -- metastore specifics ---------------------------------------------------------------------------
def test_set_registers_an_unknown_run_and_asset_in_a_standalone_store(backend, db_url):
    backend.set(SCOPE, "k", "1")
    backend.set(AssetScope(name="n", uri="u"), "k", "1")
    assert raw_rows(db_url, "SELECT dag_id, run_id FROM dag_run") == [("dag", "run")]
    assert raw_rows(db_url, "SELECT name, uri FROM asset") == [("n", "u")]
    assert raw_rows(db_url, "SELECT name, uri FROM asset_active") == [("n", "u")]


def test_deleting_parents_cascades(backend, db_url):
    backend.set(SCOPE, "k", "1")
    backend.set(AssetScope(name="a"), "k", "1")
    with backend.engine.begin() as conn:
        conn.execute(text("DELETE FROM dag_run"))
        conn.execute(text("DELETE FROM asset"))
    assert raw_rows(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]
    assert raw_rows(db_url, "SELECT count(*) FROM asset_state_store") == [(0,)]


def test_session_joins_the_callers_transaction(backend):
    with pytest.raises(RuntimeError), backend.engine.begin() as conn:
        backend.set(SCOPE, "k", "1", session=conn)
        assert backend.get(SCOPE, "k", session=conn) == "1"
        raise RuntimeError("roll back")
    assert backend.get(SCOPE, "k") is None


def test_asset_keys_reject_expiry(backend):
    with pytest.raises(InvalidInputError, match="asset keys never expire"):
        backend.set(AssetScope(name="a"), "k", "1", expires_at=datetime.now(UTC))


def test_values_are_stored_as_airflow_writes_them(backend, db_url):
    """json.dumps defaults: ASCII-escaped, ", " and ": " separators - the bytes Airflow 3.3.2 writes."""
    TaskStateStoreAccessor(SCOPE, backend).set("k", {"word": "h\u00e9llo", "n": [1, 2]})
    assert raw_rows(db_url, "SELECT value FROM task_state_store") == [('{"word": "h\\u00e9llo", "n": [1, 2]}',)]


def test_names_and_uris_resolve_to_active_assets_only(backend, db_url):
    backend.set(AssetScope(name="orders", uri="s3://lake/orders"), "k", "1")
    [(asset_id,)] = raw_rows(db_url, "SELECT id FROM asset")
    raw_rows(db_url, "DELETE FROM asset_active")  # the asset became inactive
    assert backend.get(AssetScope(name="orders"), "k") is None
    assert backend.get(AssetScope(uri="s3://lake/orders"), "k") is None
    assert backend.get(AssetScope(asset_id=asset_id), "k") == "1"  # by id, as the REST API addresses it


def test_registering_an_asset_whose_name_or_uri_is_taken_is_refused(backend, db_url):
    backend.set(AssetScope(name="orders", uri="s3://a"), "k", "1")
    with pytest.raises(InvalidInputError, match="clashes with the active asset name=orders uri=s3://a"):
        backend.set(AssetScope(name="orders", uri="s3://b"), "k", "1")
    assert raw_rows(db_url, "SELECT name, uri FROM asset") == [("orders", "s3://a")]
