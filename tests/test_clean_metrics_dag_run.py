"""clean --metrics-file on Airflow 3.4's layout: the rows deleted per store, dag-run keys among them.

The families of a 3.3 database's file are tests/test_clean_metrics.py's, unchanged; a database with a
dag-run state store also gets ``statestore_clean_rows_deleted_by_store{store="task"|"dag_run"}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow34 import add_runs, airflow34_database
from cli_running import run_cli
from metrics_files import read_metrics, read_samples
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine
from statestore_cli.model.scopes import DagRunScope
from statestore_cli.ops.metrics import CleanMetrics, CleanRecorder

P = "statestore_clean_"
BY_STORE = f"{P}rows_deleted_by_store"
PAST = datetime(2020, 1, 1, tzinfo=UTC)
ENGINES = ["sqlite", "postgresql", "mariadb"]


@pytest.fixture
def airflow34(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An Airflow 3.4 database's URL; SQLite unless parametrised."""
    with airflow34_database(getattr(request, "param", "sqlite"), tmp_path) as url:
        yield url


def _seed(url: str, task_keys: int, run_keys: int) -> None:
    """Expired task keys and expired dag-run keys, and one live key of each store."""
    add_runs(url, [("d", "r0"), ("d", "r1")], PAST)
    backend = MetastoreBackend(make_engine(url))
    alive = datetime.now(UTC) + timedelta(days=1)
    try:
        for i in range(task_keys):
            backend.set(TaskScope("d", f"r{i % 2}", "t"), f"k{i}", "1", expires_at=PAST)
        for i in range(run_keys):
            backend.set(DagRunScope("d", f"r{i % 2}"), f"run_k{i}", "1", expires_at=PAST)
        backend.set(TaskScope("d", "r0", "t"), "alive", "1", expires_at=alive)
        backend.set(DagRunScope("d", "r0"), "alive", "1", expires_at=alive)
    finally:
        backend.engine.dispose()


def _samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the file, by name and its labels but ``database``, checked by ``read_samples``
    (one database on every sample, the families gauges, ``store`` the only other label)."""
    found = read_samples(path)
    samples = {}
    databases = set()
    for name, by_labels in found.items():
        for labels, value in by_labels.items():
            own = dict(labels)
            databases.add(own.pop("database"))
            assert set(own) <= {"store"} and own.get("store", "task") in ("task", "dag_run"), (name, labels)
            samples[(name, tuple(sorted(own.items())))] = value
    assert len(databases) == 1, databases
    assert {line.split(" ")[3] for line in path.read_text().splitlines() if line.startswith("# TYPE ")} == {"gauge"}
    return samples


def _by_store(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {dict(labels)["store"]: value for (name, labels), value in samples.items() if name == BY_STORE}


@pytest.mark.parametrize("airflow34", ENGINES, indirect=True)
def test_a_clean_records_the_dag_run_rows_it_deleted(airflow34, tmp_path):
    _seed(airflow34, task_keys=3, run_keys=2)
    metrics = tmp_path / "statestore_clean.prom"
    result = run_cli("clean", "--batch-size", "2", "--metrics-file", str(metrics), "-o", "json", conn=airflow34)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == 5
    samples = _samples(metrics)
    assert _by_store(samples) == {"task": 3, "dag_run": 2}
    assert samples[(f"{P}rows_deleted", ())] == 5  # the total, as on every database
    assert samples[(f"{P}batches", ())] == 3  # two of the task store, one of the dag-run store
    assert samples[(f"{P}expired_rows_remaining", ())] == 0
    names = [line.split(" ")[2] for line in metrics.read_text().splitlines() if line.startswith("# HELP ")]
    assert names[:3] == [f"{P}rows_deleted", BY_STORE, f"{P}expired_rows_remaining"]
    assert sql(airflow34, "SELECT count(*) FROM dag_run_state_store")[0][0] == 1


def test_a_clean_stopped_before_the_dag_run_store_records_none_deleted_there(airflow34, db_url, tmp_path):
    _seed(airflow34, task_keys=5, run_keys=2)
    metrics = tmp_path / "m.prom"
    args = ("clean", "--batch-size", "2", "--max-runtime", "0s", "--metrics-file", str(metrics))
    assert run_cli(*args, conn=airflow34).exit_code == 4
    samples = _samples(metrics)
    assert _by_store(samples) == {"task": 2, "dag_run": 0}
    assert samples[(f"{P}expired_rows_remaining", ())] == 5
    # A store without a dag-run table writes the families it always wrote, and no other.
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("d", "r", "t"), "k", "1", expires_at=PAST)
    backend.engine.dispose()
    assert run_cli("clean", "--metrics-file", str(metrics), conn=db_url).exit_code == 0
    assert BY_STORE not in metrics.read_text() and read_metrics(metrics)[f"{P}rows_deleted"] == 1


def test_render_of_the_rows_per_store_is_exact():
    metrics = CleanMetrics(
        exit_status=0,
        duration_seconds=1.5,
        finished_at=1764460800.0,
        rows_deleted=12,
        batches=2,
        expired_rows_remaining=0,
        last_success_timestamp_seconds=1764460800.0,
        rows_deleted_by_store={"task": 10, "dag_run": 2},
        labels={"database": "db.internal/airflow"},
    )
    lines = metrics.render().splitlines()
    at = lines.index(f'{P}rows_deleted{{database="db.internal/airflow"}} 12')
    assert lines[at + 1 : at + 5] == [
        f"# HELP {BY_STORE} Expired keys the last clean deleted per store (task, dag_run), which rows_deleted "
        "adds up; only where the database has a dag-run state store.",
        f"# TYPE {BY_STORE} gauge",
        f'{BY_STORE}{{database="db.internal/airflow",store="task"}} 10',
        f'{BY_STORE}{{database="db.internal/airflow",store="dag_run"}} 2',
    ]
    assert lines[at + 5].startswith(f"# HELP {P}expired_rows_remaining ")


def test_a_clean_that_fails_in_the_dag_run_store_reports_what_each_store_lost(tmp_path):
    recorder = CleanRecorder(tmp_path / "m.prom", {"database": "airflow.db"})
    recorder.on_store("task")
    for done in (100, 150, 150):
        recorder.on_progress(done)
    recorder.on_store("dag_run")
    recorder.on_progress(160)
    written = recorder.finish(3)
    assert (written.rows_deleted, written.rows_deleted_by_store) == (160, {"task": 150, "dag_run": 10})
    assert _by_store(_samples(tmp_path / "m.prom")) == {"task": 150, "dag_run": 10}
    # Failed before the dag-run store was reached: whether the database has one is not known, so no family.
    early = CleanRecorder(tmp_path / "early.prom", {"database": "airflow.db"})
    early.on_store("task")
    early.on_progress(5)
    assert early.finish(3).rows_deleted_by_store is None
    assert BY_STORE not in (tmp_path / "early.prom").read_text()
