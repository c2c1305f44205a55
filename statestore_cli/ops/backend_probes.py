"""The checks ``backend check`` runs on one backend: ``StoreProbe`` for a ``[state_store] backend``,
``WorkerProbe`` for a ``[workers] state_store_backend``. Each check method returns a detail for the
report or raises ``CheckFailed`` saying what went wrong."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.errors import first_line
from statestore_cli.model.scopes import AssetScope, StoreScope, TaskScope

T = TypeVar("T")

BLOCK_LIMIT = 0.2  # seconds the event loop may go without a heartbeat during one async call
HEARTBEAT = 0.005
REGION = uuid.UUID("0b5e55ed-0000-4000-8000-000000000001")
TASK = TaskScope("statestore_backend_check", "check__2026-01-01T00:00:00+00:00", "probe", 0)
TASK_OTHER_INDEX = TaskScope(TASK.dag_id, TASK.run_id, TASK.task_id, 1)
TASK_IN_REGION = TaskScope(TASK.dag_id, TASK.run_id, TASK.task_id, 0, region_id=REGION)
ASSET = AssetScope(name="statestore_backend_check")
ASSET_BY_URI = AssetScope(uri="statestore-backend-check://probe")
OTHER_ASSET = AssetScope(name="statestore_backend_check_2")
VALUES: dict[str, Any] = {
    "nested": {"a": [1, {"b": [True, False, None, 2.5]}, "c"], "d": {"e": {"f": {"g": []}}}},
    "unicode": {"text": "héllo wörld, 日本語, 🎉", "rtl": "שלום", "controls": "tab\there\nnul\u0000"},
    "large": {"rows": [f"row-{i:07d}-" + "x" * 100 for i in range(10_000)]},  # about 1.1 MB as JSON
}


NO_REGIONS = "regions left out: the backend's TaskScope has no region_id (Airflow 3.3)"


class CheckFailed(Exception):
    """One check failed; the message says why."""


def call(label: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one backend method; whatever it raises becomes the check's failure, naming the method."""
    try:
        return fn(*args, **kwargs)
    except CheckFailed:
        raise
    except Exception as exc:  # user code: any failure is the backend's
        raise CheckFailed(f"{label} raised {type(exc).__name__}: {first_line(exc)}") from None


def same_json(got: Any, expected: Any) -> bool:
    """Equal as JSON documents (as json.dumps writes them, key order aside)."""
    return json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def kind(scope: StoreScope) -> str:
    return "task" if isinstance(scope, TaskScope) else "asset"


class _Probe:
    CHECKS: tuple[tuple[str, str], ...] = ()

    def __init__(self, backend: BaseStoreBackend) -> None:
        self.backend = backend

    def tidy(self) -> None:
        """Remove what the checks wrote; failures here are not the report's business."""
        for scope in (TASK, TASK_IN_REGION, ASSET, ASSET_BY_URI, OTHER_ASSET):
            with contextlib.suppress(Exception):  # best effort: the checks already reported what failed
                self.backend.clear(scope, all_map_indices=True)

    def async_non_blocking(self) -> str:
        """aset, aget, adelete and aclear work, and a heartbeat task keeps ticking while each runs."""
        import asyncio

        b = self.backend
        value = json.dumps(VALUES["nested"])
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("aset()", lambda: b.aset(TASK, "async_key", value)),
            ("aget()", lambda: b.aget(TASK, "async_key")),
            ("adelete()", lambda: b.adelete(TASK, "async_key")),
            ("aget() after adelete()", lambda: b.aget(TASK, "async_key")),
            ("aset()", lambda: b.aset(TASK, "async_key", value)),
            ("aclear()", lambda: b.aclear(TASK)),
            ("aget() after aclear()", lambda: b.aget(TASK, "async_key")),
        ]
        results = asyncio.run(_heartbeat_run(steps))
        worst = max(results, key=lambda r: r[2])
        if worst[2] > BLOCK_LIMIT:
            raise CheckFailed(
                f"{worst[0]} blocked the event loop for {worst[2]:.2f} s: run a synchronous client in a worker "
                "thread (asyncio.to_thread)"
            )
        got = {label: result for label, result, _ in results}
        if got["aget()"] is None or not same_json(json.loads(got["aget()"]), VALUES["nested"]):
            raise CheckFailed("aget() did not return what aset() stored")
        for label in ("aget() after adelete()", "aget() after aclear()"):
            if got[label] is not None:
                raise CheckFailed(f"{label} still found the key")
        return f"longest heartbeat gap {worst[2] * 1000:.0f} ms (limit {BLOCK_LIMIT * 1000:.0f} ms)"


async def _heartbeat_run(steps: list[tuple[str, Callable[[], Awaitable[Any]]]]) -> list[tuple[str, Any, float]]:
    """Run each step while a heartbeat task ticks; returns (label, result, longest gap between ticks)."""
    import asyncio

    loop = asyncio.get_running_loop()
    last = [loop.time()]
    gaps: list[float] = []

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)
            now = loop.time()
            gaps.append(now - last[0])
            last[0] = now

    ticker = asyncio.create_task(beat())
    results = []
    try:
        for label, step in steps:
            await asyncio.sleep(HEARTBEAT * 2)  # the ticker runs before the step starts
            gaps.clear()
            last[0] = loop.time()
            try:
                result = await step()
            except Exception as exc:  # user code: any failure is the backend's
                raise CheckFailed(f"{label} raised {type(exc).__name__}: {first_line(exc)}") from None
            longest = max([*gaps, loop.time() - last[0]])
            results.append((label, result, longest))
    finally:
        ticker.cancel()
    return results


class StoreProbe(_Probe):
    """A ``[state_store] backend``: values go in and out as JSON strings through get/set."""

    CHECKS = (
        ("round_trip", "nested, unicode and 1 MB values come back equal, task and asset scopes"),
        ("delete", "get() finds nothing after delete(); deleting a missing key is not an error"),
        ("clear", "clear() removes only the scope's map index; all_map_indices removes every one"),
        ("async_non_blocking", ""),
        ("refuses_null", ""),
    )

    def _put(self, scope: StoreScope, key: str, value: Any) -> None:
        call("set()", self.backend.set, scope, key, json.dumps(value))

    def _get(self, scope: StoreScope, key: str) -> Any:
        stored = call("get()", self.backend.get, scope, key)
        if stored is None:
            return None
        try:
            return json.loads(stored)
        except (TypeError, ValueError):
            raise CheckFailed(f"get() returned {type(stored).__name__} that is not a JSON string") from None

    def round_trip(self) -> None:
        for scope in (TASK, ASSET):
            for name, value in VALUES.items():
                self._put(scope, f"{name}_value", value)
                if not same_json(self._get(scope, f"{name}_value"), value):
                    raise CheckFailed(f"the {name} value of a {kind(scope)} key came back different from get()")
                if not same_json(call("get_value()", self.backend.get_value, scope, f"{name}_value"), value):
                    raise CheckFailed(f"the {name} value of a {kind(scope)} key came back different from get_value()")

    def delete(self) -> None:
        for scope in (TASK, ASSET):
            self._put(scope, "delete_me", 1)
            call("delete()", self.backend.delete, scope, "delete_me")
            if self._get(scope, "delete_me") is not None:
                raise CheckFailed(f"get() still finds a {kind(scope)} key after delete()")
            call("delete() of a missing key", self.backend.delete, scope, "delete_me")

    def clear(self) -> None:
        self._put(TASK, "clear_me", 0)
        self._put(TASK_OTHER_INDEX, "clear_me", 1)
        call("clear()", self.backend.clear, TASK)
        if self._get(TASK, "clear_me") is not None:
            raise CheckFailed("get() still finds the scope's key after clear()")
        if self._get(TASK_OTHER_INDEX, "clear_me") != 1:
            raise CheckFailed("clear() of map index 0 also removed map index 1 (only all_map_indices=True may)")
        call("clear(all_map_indices=True)", self.backend.clear, TASK, all_map_indices=True)
        if self._get(TASK_OTHER_INDEX, "clear_me") is not None:
            raise CheckFailed("clear(all_map_indices=True) left the key of map index 1")
        self._put(ASSET, "clear_me", 0)
        self._put(ASSET, "clear_me_too", 1)
        call("clear() of an asset", self.backend.clear, ASSET)
        if self._get(ASSET, "clear_me") is not None or self._get(ASSET, "clear_me_too") is not None:
            raise CheckFailed("get() still finds an asset key after clear()")

    def refuses_null(self) -> str:
        try:
            self.backend.set(TASK, "null_value", "null")
        except Exception as exc:  # any refusal will do
            if self._get(TASK, "null_value") is not None:
                raise CheckFailed("set() raised on JSON null but stored it anyway") from None
            return f"set() refused it ({type(exc).__name__})"
        raise CheckFailed("set() accepted the JSON null; values are never null (refuse it, e.g. with ValueError)")


class WorkerProbe(_Probe):
    """A ``[workers] state_store_backend``: values go out through the serialize hooks as references."""

    CHECKS = (
        ("deterministic_refs", "the same scope and key give the same reference (task, task in a region, asset)"),
        ("distinct_refs", "other keys, map indices, regions and assets give other references"),
        ("round_trip", "nested, unicode and 1 MB values come back equal through the hooks, task and asset"),
        ("delete", "the object behind a reference is gone after delete(); a missing key is not an error"),
        ("clear", "clear() removes only the scope's map index; all_map_indices removes every one"),
        ("async_non_blocking", ""),
        ("refuses_null", ""),
    )

    def _ref(self, scope: StoreScope, key: str, value: Any) -> str:
        b = self.backend
        if isinstance(scope, TaskScope):
            ref = call(
                "serialize_task_state_store_to_ref()",
                b.serialize_task_state_store_to_ref,
                value=value,
                key=key,
                scope=scope,
            )
        else:
            ref = call(
                "serialize_asset_state_store_to_ref()",
                b.serialize_asset_state_store_to_ref,
                value=value,
                key=key,
                scope=scope,
            )
        if not isinstance(ref, str):
            raise CheckFailed(f"the {kind(scope)} serialize hook returned {type(ref).__name__}, not a str")
        return ref

    def _value(self, scope: StoreScope, ref: str) -> Any:
        b = self.backend
        if isinstance(scope, TaskScope):
            return call("deserialize_task_state_store_from_ref()", b.deserialize_task_state_store_from_ref, ref)
        return call("deserialize_asset_state_store_from_ref()", b.deserialize_asset_state_store_from_ref, ref)

    def _gone(self, scope: StoreScope, ref: str, value: Any) -> bool:
        try:
            return not same_json(self._value(scope, ref), value)
        except CheckFailed:
            return True  # reading a removed object may raise: that is what gone looks like

    def _scopes(self, *scopes: StoreScope) -> list[StoreScope]:
        """``scopes`` without those in a region when the backend cannot address one (Airflow 3.3's)."""
        regional = [s for s in scopes if isinstance(s, TaskScope) and s.region_id.int]
        return [s for s in scopes if self.backend.supports_regions or s not in regional]

    def deterministic_refs(self) -> str | None:
        for scope in self._scopes(TASK, TASK_IN_REGION, ASSET, ASSET_BY_URI):
            first = self._ref(scope, "ref_key", {"write": 1})
            second = self._ref(scope, "ref_key", {"write": 2})
            if first != second:
                raise CheckFailed(
                    f"two writes of one {kind(scope)} key ({scope.describe()}) gave {first!r} then {second!r}: "
                    "a reference must depend on the scope and key only (no timestamps, no random ids)"
                )
        return None if self.backend.supports_regions else f"task and asset scopes; {NO_REGIONS}"

    def distinct_refs(self) -> str | None:
        cases: dict[str, tuple[StoreScope, str]] = {
            "the key": (TASK, "ref_key"),
            "another key": (TASK, "other_key"),
            "another map index": (TASK_OTHER_INDEX, "ref_key"),
            "another region": (TASK_IN_REGION, "ref_key"),
            "an asset": (ASSET, "ref_key"),
            "another asset": (OTHER_ASSET, "ref_key"),
        }
        if not self.backend.supports_regions:
            del cases["another region"]
        seen: dict[str, str] = {}
        for label, (scope, key) in cases.items():
            ref = self._ref(scope, key, {"case": label})
            if ref in seen:
                raise CheckFailed(
                    f"{seen[ref]} and {label} got the same reference {ref!r}: they would overwrite each other"
                )
            seen[ref] = label
        return None if self.backend.supports_regions else f"other keys, map indices and assets; {NO_REGIONS}"

    def round_trip(self) -> None:
        for scope in (TASK, ASSET):
            for name, value in VALUES.items():
                if not same_json(self._value(scope, self._ref(scope, f"{name}_value", value)), value):
                    raise CheckFailed(f"the {name} value of a {kind(scope)} key came back different")

    def delete(self) -> None:
        for scope in (TASK, ASSET):
            ref = self._ref(scope, "delete_me", {"delete": "me"})
            call("delete()", self.backend.delete, scope, "delete_me")
            if not self._gone(scope, ref, {"delete": "me"}):
                raise CheckFailed(f"the object behind {ref!r} is still readable after delete()")
            call("delete() of a missing key", self.backend.delete, scope, "delete_me")

    def clear(self) -> None:
        mine = self._ref(TASK, "clear_me", 0)
        other = self._ref(TASK_OTHER_INDEX, "clear_me", 1)
        call("clear()", self.backend.clear, TASK)
        if not self._gone(TASK, mine, 0):
            raise CheckFailed(f"the object behind {mine!r} is still readable after clear()")
        if self._gone(TASK_OTHER_INDEX, other, 1):
            raise CheckFailed("clear() of map index 0 also removed map index 1 (only all_map_indices=True may)")
        call("clear(all_map_indices=True)", self.backend.clear, TASK, all_map_indices=True)
        if not self._gone(TASK_OTHER_INDEX, other, 1):
            raise CheckFailed("clear(all_map_indices=True) left the object of map index 1")
        asset_ref = self._ref(ASSET, "clear_me", 2)
        call("clear() of an asset", self.backend.clear, ASSET)
        if not self._gone(ASSET, asset_ref, 2):
            raise CheckFailed(f"the object behind {asset_ref!r} is still readable after clear() of the asset")

    def refuses_null(self) -> str:
        refused = []
        for scope in (TASK, ASSET):
            try:
                self._ref(scope, "null_value", None)
            except CheckFailed as failed:
                refused.append(str(failed).rpartition(" raised ")[2].split(":")[0])
                continue
            raise CheckFailed(
                f"the {kind(scope)} serialize hook accepted None (JSON null); refuse it, e.g. with ValueError"
            )
        return f"both serialize hooks refused it ({', '.join(refused)})"
