"""Backends written the way deployments write them, for the tests: a working dict backend (store
side and worker side) and deliberately broken ones, each wrong in one way ``backend check`` must name.

Importable as ``sample_backends`` (``tests/`` is on ``sys.path``), so the CLI loads them by dotted path
from ``AIRFLOW__STATE_STORE__BACKEND`` / ``AIRFLOW__WORKERS__STATE_STORE_BACKEND``. Every instance
shares ``OBJECTS``, as processes share an external store; the ``sample_objects`` fixture empties it.
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import UTC, datetime

from statestore_cli import BaseStoreBackend, FilesystemBackend, StoredRef, TaskScope
from statestore_cli.backends.base import ThreadOffloadMixin

OBJECTS: dict[str, tuple[str, datetime | None, datetime]] = {}  # ref -> (JSON text, expires_at, written at)
_counter = itertools.count()


class NullBackend(BaseStoreBackend):
    """Stores nothing: every get finds nothing, every delete and clear removes nothing. A valid backend, and
    the one stub the tests build theirs on (a worker's hooks, a backend that fails to load, a planted module)."""

    def get(self, scope, key, *, session=None):
        return None

    def set(self, scope, key, value, *, expires_at=None, session=None):
        pass

    def delete(self, scope, key, *, session=None):
        return 0

    def clear(self, scope, *, all_map_indices=False, session=None):
        return 0

    async def aget(self, scope, key, *, session=None):
        return None

    async def aset(self, scope, key, value, *, expires_at=None, session=None):
        pass

    async def adelete(self, scope, key, *, session=None):
        return 0

    async def aclear(self, scope, *, all_map_indices=False, session=None):
        return 0


def _folder(scope, *, all_map_indices=False):
    if isinstance(scope, TaskScope):
        region = f"region={scope.region_id}/" if scope.region_id.int else ""
        base = f"task/{scope.dag_id}/{scope.run_id}/{region}{scope.task_id}/"
        return base if all_map_indices else f"{base}{scope.map_index}/"
    return f"asset/{scope.name or scope.uri or scope.asset_id}/"


class DictBackend(ThreadOffloadMixin, BaseStoreBackend):
    """A complete, correct backend keeping values in ``OBJECTS``; task keys honour ``expires_at``
    through ``cleanup()``, which returns how many it removed."""

    PREFIX = ""

    def ref(self, scope, key):
        return self.PREFIX + _folder(scope) + key

    def get(self, scope, key, *, session=None):
        found = OBJECTS.get(self.ref(scope, key))
        return None if found is None else found[0]

    def set(self, scope, key, value, *, expires_at=None, session=None):
        if json.loads(value) is None:
            raise ValueError("a state value is never JSON null")
        OBJECTS[self.ref(scope, key)] = (value, expires_at, datetime.now(UTC))

    def delete(self, scope, key, *, session=None):
        return int(OBJECTS.pop(self.ref(scope, key), None) is not None)

    def clear(self, scope, *, all_map_indices=False, session=None):
        prefix = self.PREFIX + _folder(scope, all_map_indices=all_map_indices)
        gone = [ref for ref in OBJECTS if ref.startswith(prefix)]
        for ref in gone:
            del OBJECTS[ref]
        return len(gone)

    def cleanup(self):
        now = datetime.now(UTC)
        expired = [ref for ref, (_, expires_at, _) in OBJECTS.items() if expires_at is not None and expires_at < now]
        for ref in expired:
            del OBJECTS[ref]
        return {"expired_removed": len(expired), "remaining": len(OBJECTS)}


class DictWorkerBackend(DictBackend):
    """A worker-side backend: the hooks keep the payload in ``OBJECTS`` and return its path (under
    ``objects/``, so that a ``DictBackend`` holding the rows never overwrites a payload)."""

    PREFIX = "objects/"

    def _store(self, value, key, scope):
        if value is None:
            raise ValueError("a state value is never None")
        ref = self.ref(scope, key)
        self.set(scope, key, json.dumps(value))
        return ref

    def _load(self, stored):
        if stored not in OBJECTS:
            raise KeyError(f"no object {stored}")
        return json.loads(OBJECTS[stored][0])

    def serialize_task_state_store_to_ref(self, *, value, key, scope):
        return self._store(value, key, scope)

    def deserialize_task_state_store_from_ref(self, stored):
        return self._load(stored)

    def serialize_asset_state_store_to_ref(self, *, value, key, scope):
        return self._store(value, key, scope)

    def deserialize_asset_state_store_from_ref(self, stored):
        return self._load(stored)

    def list_refs(self):
        return [StoredRef(ref, written) for ref, (_, _, written) in list(OBJECTS.items())]

    def delete_ref(self, ref):
        OBJECTS.pop(ref, None)


class PickyWorker(DictWorkerBackend):
    """Refuses to write a payload for the key ``poison`` of a task named ``*_v2``: a failure in the middle of
    a ``copy`` to such a task."""

    def _store(self, value, key, scope):
        if key == "poison" and getattr(scope, "task_id", "").endswith("_v2"):
            raise ValueError("will not copy poison")
        return super()._store(value, key, scope)


class RacingWorker(DictWorkerBackend):
    """Writes the key ``raced`` itself, through a connection of its own, at the scope it is asked to write for
    (``$SS_TEST_RACE_URL``'s store), before it returns the reference: a writer that lands between a copy's
    check for keys the target holds and its write."""

    def _store(self, value, key, scope):
        if key == "raced":
            import os

            from statestore_cli import MetastoreBackend
            from statestore_cli.db.database import make_engine

            engine = make_engine(os.environ["SS_TEST_RACE_URL"])
            try:
                MetastoreBackend(engine).set(scope, key, '"theirs"')
            finally:
                engine.dispose()
        return super()._store(value, key, scope)


class WorkerWithoutListing(DictWorkerBackend):
    """Cannot enumerate its objects: ``orphans`` must say so."""

    list_refs = BaseStoreBackend.list_refs


# -- broken on purpose: each fails one check ----------------------------------------------------------------
class NonDeterministicWorker(DictWorkerBackend):
    """Puts a counter in every object's reference, as if it were a timestamp or a random id: delete()
    by scope and key cannot find the object again, and an orphan is never overwritten."""

    def _store(self, value, key, scope):
        if value is None:
            raise ValueError("a state value is never None")
        ref = f"{self.ref(scope, key)}@{next(_counter)}"
        OBJECTS[ref] = (json.dumps(value), None, datetime.now(UTC))
        return ref


class RegionBlindWorker(DictWorkerBackend):
    """Leaves the region out of task references: two regions overwrite each other's values."""

    def ref(self, scope, key):
        if isinstance(scope, TaskScope):
            return f"objects/task/{scope.dag_id}/{scope.run_id}/{scope.task_id}/{scope.map_index}/{key}"
        return super().ref(scope, key)


class BlockingAsyncBackend(DictBackend):
    """``aset`` calls its synchronous client inline: the event loop stops for half a second."""

    async def aset(self, scope, key, value, *, expires_at=None, session=None):
        time.sleep(0.5)
        self.set(scope, key, value, expires_at=expires_at)


class RaisingDeleteBackend(DictBackend):
    """``delete`` always fails, as an unreachable object store does."""

    def delete(self, scope, key, *, session=None):
        raise ConnectionError("object store unreachable\nsecond line")


class GreedyClearBackend(DictBackend):
    """``clear`` ignores the map index and removes the whole task."""

    def clear(self, scope, *, all_map_indices=False, session=None):
        return super().clear(scope, all_map_indices=True)


class NullAcceptingBackend(DictBackend):
    """Stores the JSON null it should refuse."""

    def set(self, scope, key, value, *, expires_at=None, session=None):
        OBJECTS[self.ref(scope, key)] = (value, expires_at, datetime.now(UTC))


class IncompleteBackend(BaseStoreBackend):
    """Implements the synchronous methods only (``NullBackend``'s): the async ones are still abstract."""

    get, set, delete, clear = NullBackend.get, NullBackend.set, NullBackend.delete, NullBackend.clear


class FailingCleanupBackend(DictBackend):
    def cleanup(self):
        raise RuntimeError("retention service down")


class FlakyFilesystemBackend(FilesystemBackend):
    """The filesystem backend with a delete and clear that fail, as a network store's can."""

    def delete(self, scope, key, *, session=None):
        raise OSError("storage unavailable")

    def clear(self, scope, *, all_map_indices=False, session=None):
        raise OSError("storage unavailable")


class UndeletableWorker(DictWorkerBackend):
    """Lists its objects but cannot delete them."""

    def delete_ref(self, ref):
        raise PermissionError(f"access denied to {ref}")


class UnconstructibleWorker(DictWorkerBackend):
    """Cannot even be created (its client cannot connect)."""

    def __init__(self):
        raise ConnectionError("vault unreachable")
