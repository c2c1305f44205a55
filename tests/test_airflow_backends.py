"""Airflow's own backend classes, used by statestore beside Airflow 3.3.2 and the common-io provider.

One deployment for the module, emptied of keys and objects for each test: a SQLite file ``airflow db
migrate`` made, and an airflow.cfg naming the provider's ``StateStoreObjectStorageBackend`` as ``[workers]
state_store_backend`` with ``[common.io] state_store_objectstorage_path`` on a ``file://`` folder.
Airflow's processes find that file through ``AIRFLOW_CONFIG``; statestore is given it as ``--config``
(``$AIRFLOW_HOME`` holds no airflow.cfg), so the provider's option reaches it only through statestore's own
config file.

Airflow's side is driven by a short script run by its interpreter (``AIRFLOW_SIDE``) and uses only
Airflow's components; none of Airflow's code is in this repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow_venv import AirflowOps, StatestoreIn, airflow_env
from sqlalchemy import create_engine, text

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
OBJECT_STORAGE = "airflow.providers.common.io.state_store.backend.StateStoreObjectStorageBackend"
REF = "__airflow_state_ref__"
DAG, RUN, TASK = "etl_orders_daily", "scheduled__2026-11-30T00:00:00+00:00", "submit spark/job"
QUOTED_RUN = "scheduled__2026-11-30T00%3A00%3A00%2B00%3A00"
SCOPE = ["--dag-id", DAG, "--run-id", RUN, "--task-id", TASK]

# Run by Airflow's interpreter: a value goes the way a task's accessor sends it. The worker side is
# the backend Airflow itself loads from [workers] state_store_backend (the accessor's own loader),
# whose serialize hook stores the object and returns the reference; the row is written by the
# backend behind Airflow's execution API (airflow.state.get_state_backend(), the metastore), holding
# the reference in the marker the accessor wraps it in. Reading reverses both steps.
AIRFLOW_SIDE = """
import json, sys
from airflow.sdk.execution_time.context import _get_worker_state_store_backend
from airflow.sdk.state import AssetScope as WorkerAssetScope, TaskScope as WorkerTaskScope
from airflow.state import AssetScope, TaskScope, get_state_backend

REF = "__airflow_state_ref__"
worker, server = _get_worker_state_store_backend(), get_state_backend()
results = []
for op, target, key, *value in json.loads(sys.argv[1]):
    if target[0] == "task":
        fields = dict(zip(("dag_id", "run_id", "task_id", "map_index"), target[1:]))
        scope, worker_scope = TaskScope(**fields), WorkerTaskScope(**fields)
        serialize = worker.serialize_task_state_store_to_ref
        deserialize = worker.deserialize_task_state_store_from_ref
    else:
        scope, worker_scope = AssetScope(asset_id=target[1]), WorkerAssetScope(name=target[2])
        serialize = worker.serialize_asset_state_store_to_ref
        deserialize = worker.deserialize_asset_state_store_from_ref
    if op in ("write", "write_object_only"):
        ref = serialize(value=value[0], key=key, scope=worker_scope)
        if op == "write":
            server.set(scope, key, json.dumps({REF: ref}))
        results.append(ref)
    else:
        stored = server.get(scope, key)
        results.append(None if stored is None else deserialize(json.loads(stored)[REF]))
print(json.dumps(results))
"""


class Deployment:
    def __init__(self, python: Path, tmp_path: Path, migrated_sqlite: Path) -> None:
        self.python = python
        database = tmp_path / "airflow.db"
        shutil.copyfile(migrated_sqlite, database)
        self.url = f"sqlite:///{database}"
        self.objects = tmp_path / "state-objects"
        self.base = f"file://{self.objects}"
        self.config = tmp_path / "deployment" / "airflow.cfg"
        self.config.parent.mkdir()
        self.config.write_text(
            f"[database]\nsql_alchemy_conn = {self.url}\n\n"
            f"[workers]\nstate_store_backend = {OBJECT_STORAGE}\n\n"
            f"[common.io]\nstate_store_objectstorage_path = {self.base}\n",
            encoding="utf-8",
        )
        self.env = airflow_env(tmp_path / "home", self.url)
        del self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]  # the config file says it, for both sides
        self.airflow_env = {**self.env, "AIRFLOW_CONFIG": str(self.config)}
        self.ops = AirflowOps(python, self.airflow_env, AIRFLOW_SIDE, tmp_path)
        # statestore runs on Airflow's interpreter with this checkout first on its path. PYTHONPATH leaves
        # the cached venv, which other tests share, as it is: installing the tool into it would pull in
        # our typer pin (<0.29, a start-up speed choice) over Airflow's typer 0.29.2, and a second venv
        # layered on it would need a .pth naming its site-packages for no gain. The tool runs fine on
        # Airflow's typer 0.29.2 and SQLAlchemy 2.1; what is tested is the code of this checkout.
        self.tool_env = {**self.env, "PYTHONPATH": str(REPO)}
        self.tool = StatestoreIn(python, self.tool_env, tmp_path)
        self.sql(
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES (:d, :r, 'scheduled', :t, 0, 'not_started')",
            d=DAG,
            r=RUN,
            t=datetime(2026, 11, 30),
        )
        moment = datetime(2026, 11, 1, tzinfo=UTC)
        self.sql(
            'INSERT INTO asset (name, uri, "group", extra, created_at, updated_at) '
            "VALUES ('orders', 's3://warehouse/orders', 'asset', '{}', :t, :t)",
            t=moment,
        )
        self.sql("INSERT INTO asset_active (name, uri) VALUES ('orders', 's3://warehouse/orders')")
        self.asset_id = int(self.sql("SELECT id FROM asset WHERE name = 'orders'")[0][0])

    def sql(self, statement: str, **params: object) -> list[tuple]:
        engine = create_engine(self.url)
        try:
            with engine.begin() as conn:
                result = conn.execute(text(statement), params)
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            engine.dispose()

    def airflow_side(self, *ops: list[object]) -> list[object]:
        return self.ops(ops)

    def statestore(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.tool("--config", str(self.config), *args, env=env)

    def ok(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = self.statestore(*args, env=env)
        assert done.returncode == 0, f"statestore {' '.join(args)} exited {done.returncode}: {done.stderr}"
        assert "Traceback" not in done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def shared_deployment(
    airflow_python: Path, migrated_sqlite: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """One deployment for the module's tests (on one worker, as every test marked ``airflow``), so that
    its two Airflow interpreters start once, not in every test: each costs seconds of CPU, as in a real
    worker."""
    made = Deployment(airflow_python, tmp_path_factory.mktemp("deployment"), migrated_sqlite)
    yield made
    made.ops.close()
    made.tool.close()


@pytest.fixture
def deployment(shared_deployment: Deployment) -> Deployment:
    """The module's deployment as each test finds it: no state store keys, no objects (its dag run and
    asset stay)."""
    shared_deployment.sql("DELETE FROM task_state_store")
    shared_deployment.sql("DELETE FROM asset_state_store")
    shutil.rmtree(shared_deployment.objects, ignore_errors=True)
    return shared_deployment


def task(map_index: int = -1) -> list[object]:
    return ["task", DAG, RUN, TASK, map_index]


def test_values_cross_between_airflow_and_statestore_through_object_storage(deployment: Deployment):
    d = deployment
    asset = ["asset", d.asset_id, "orders"]
    payload = {"rows": [f"row-{i}" for i in range(2000)], "text": "héllo 日本"}
    task_ref, asset_ref = d.airflow_side(
        ["write", task(2), "spark job/id", payload], ["write", asset, "watermark", {"offset": 42}]
    )
    # the provider's layout: <dag>/<run>/<task>/<map index>/<key>, assets/<name>/<key>, segments quoted
    assert task_ref == f"{d.base}/{DAG}/{QUOTED_RUN}/submit%20spark%2Fjob/2/spark%20job%2Fid"
    assert asset_ref == f"{d.base}/assets/orders/watermark"
    assert (d.objects / "assets" / "orders" / "watermark").is_file()

    # statestore reads what Airflow's worker wrote, through the same backend class
    assert json.loads(d.ok("get", *SCOPE, "--map-index", "2", "spark job/id")) == payload
    assert json.loads(d.ok("get", "--asset-name", "orders", "watermark")) == {"offset": 42}
    raw = d.ok("get", "--raw", *SCOPE, "--map-index", "2", "spark job/id")
    assert json.loads(raw) == {REF: task_ref}

    # Airflow reads what statestore wrote
    d.ok("set", *SCOPE, "from statestore", '{"n": [1, 2.5, "ü"]}')
    d.ok("set", "--asset-name", "orders", "cursor", '"2026-11-30"')
    assert (d.objects / DAG / QUOTED_RUN / "submit%20spark%2Fjob" / "-1").is_dir()
    assert d.airflow_side(["read", task(), "from statestore"], ["read", asset, "cursor"]) == [
        {"n": [1, 2.5, "ü"]},
        "2026-11-30",
    ]

    # statestore's delete removes the row and the object: Airflow finds neither
    d.ok("delete", *SCOPE, "--map-index", "2", "spark job/id")
    assert d.airflow_side(["read", task(2), "spark job/id"]) == [None]
    assert not any((d.objects / DAG).rglob("spark%20job%2Fid"))


def test_backend_check_passes_on_the_object_storage_backend_in_both_roles(deployment: Deployment):
    d = deployment
    done = d.statestore("backend", "check", "-o", "json", env={"AIRFLOW__STATE_STORE__BACKEND": OBJECT_STORAGE})
    assert done.returncode == 0, done.stdout + done.stderr
    checks = json.loads(done.stdout)["checks"]
    assert [(c["role"], c["check"], c["status"]) for c in checks if c["status"] != "pass"] == []
    assert {c["role"] for c in checks} == {"[state_store] backend", "[workers] state_store_backend"}
    assert len(checks) == 14
    assert not list(d.objects.rglob("*")) or all(p.is_dir() for p in d.objects.rglob("*")), "the checks tidy up"


def test_orphans_lists_and_deletes_an_object_no_row_points_to(deployment: Deployment):
    d = deployment
    kept, lost = d.airflow_side(
        ["write", task(0), "kept", {"v": 1}], ["write_object_only", ["asset", d.asset_id, "orders"], "lost", [1]]
    )
    old = time.time() - timedelta(days=2).total_seconds()
    os.utime(d.objects / "assets" / "orders" / "lost", (old, old))

    report = json.loads(d.ok("orphans", "-o", "json"))
    assert report["listed"] == 2
    assert [(o["ref"], o["in_grace"]) for o in report["orphans"]] == [(lost, False)]
    modified = datetime.fromisoformat(report["orphans"][0]["modified_at"])
    assert abs(modified.timestamp() - old) < 1

    deleted = json.loads(d.ok("orphans", "--delete", "--older-than", "1d", "--yes", "-o", "json"))
    assert (deleted["deleted"], deleted["failed"]) == (1, 0)
    assert not (d.objects / "assets" / "orders" / "lost").exists()
    assert json.loads(d.ok("orphans", "-o", "json"))["orphans"] == []
    assert kept.startswith(d.base) and json.loads(d.ok("get", *SCOPE, "--map-index", "0", "kept")) == {"v": 1}


def test_clean_skips_an_object_storage_store_backend(deployment: Deployment):
    d = deployment
    store = {"AIRFLOW__STATE_STORE__BACKEND": OBJECT_STORAGE}
    reason = (
        f"[state_store] backend is {OBJECT_STORAGE}, not the metastore backend: nothing to clean here; "
        "a custom backend runs its own BaseStoreBackend.cleanup()"
    )
    done = d.statestore("clean", env=store)  # piped: the plain output, the skip said on stderr
    assert (done.returncode, done.stdout, done.stderr) == (0, "", f"skipped: {reason}\n")
    done = d.statestore("clean", "--fail-on-skip", "-o", "table", env=store)
    assert (done.returncode, done.stdout, done.stderr) == (5, f"skipped: {reason}\n", "")
    done = d.statestore("clean", "--dry-run", "--fail-on-skip", "-o", "json", env=store)
    assert done.returncode == 5
    assert json.loads(done.stdout) == {"dry_run": True, "skipped": True, "reason": reason}


def test_a_region_is_refused_by_an_airflow_3_3_backend(deployment: Deployment):
    d = deployment
    script = (
        "import uuid\n"
        "from statestore_cli import InvalidInputError, TaskScope, load_settings\n"
        "from statestore_cli import Store\n"
        f"backend = Store.open(load_settings(config_path={str(d.config)!r})).worker_backend\n"
        f"scope = TaskScope({DAG!r}, {RUN!r}, 'probe', region_id=uuid.UUID(int=7))\n"
        "try:\n"
        "    backend.serialize_task_state_store_to_ref(value=1, key='k', scope=scope)\n"
        "except InvalidInputError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [str(d.python), "-c", script], env=d.tool_env, capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "StateStoreObjectStorageBackend cannot address region_id=00000000-0000-0000-0000-000000000007: the "
        "TaskScope of the installed Airflow (airflow.sdk._shared.state) has no region_id (Airflow 3.3 has none); "
        "leave the region out\n"
    )
    assert not d.objects.exists(), "nothing was written"
