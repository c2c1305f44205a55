"""stats --metrics-file: the store's figures as Prometheus gauges, written atomically with the labels a
clean's file has; stats' own output stays as it was."""

from __future__ import annotations

import json
import stat
import time
from datetime import UTC, datetime, timedelta

import pytest
from airflow34 import add_runs, airflow34_database
from cli_running import run_cli
from metrics_files import read_samples

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine
from statestore_cli.model.scopes import DagRunScope

P = "statestore_"
PAST = datetime(2020, 1, 1, tzinfo=UTC)
FAMILIES = [
    f"{P}keys",
    f"{P}task_keys_expired",
    f"{P}task_keys_never_expire",
    f"{P}value_bytes",
    f"{P}values_over_limit",
    f"{P}max_value_storage_bytes",
    f"{P}oldest_expired_key_age_seconds",
    f"{P}stats_timestamp_seconds",
]


def _seed(url: str) -> None:
    """Two expired task keys (the oldest at PAST), one that never expires, one that expires tomorrow."""
    backend = MetastoreBackend(make_engine(url))
    try:
        now = datetime.now(UTC)
        backend.set(TaskScope("d", "r", "t"), "old", '"abc"', expires_at=PAST)
        backend.set(TaskScope("d", "r", "t"), "recent", "12", expires_at=now - timedelta(hours=1))
        backend.set(TaskScope("d", "r", "t"), "forever", "1", expires_at=None)
        backend.set(TaskScope("e", "r", "t"), "tomorrow", "1", expires_at=now + timedelta(days=1))
    finally:
        backend.engine.dispose()


def _plain(samples: dict, family: str) -> dict[str, float]:
    """A family's samples by their store label ("" for none), the file's own labels checked."""
    found = {}
    for labels, value in samples[family].items():
        own = dict(labels)
        assert own.pop("database") == "airflow.db" and own.pop("region") == "eu-west-1", labels
        found[own.pop("store", "")] = value
        assert own == {}, labels
    return found


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_stats_writes_the_store_gauges(cli, db_url, tmp_path):
    _seed(db_url)
    folder = tmp_path / "collector"
    folder.mkdir()
    metrics = folder / "statestore_stats.prom"
    before = time.time()
    label = ["--metrics-label", "database=airflow.db", "--metrics-label", "region=eu-west-1"]
    result = cli("stats", "--metrics-file", str(metrics), *label, "-o", "json")
    assert result.exit_code == 0, result.output
    samples = read_samples(metrics)
    assert list(samples) == FAMILIES
    assert _plain(samples, f"{P}keys") == {"task": 4, "asset": 0}
    assert _plain(samples, f"{P}task_keys_expired") == {"": 2}
    assert _plain(samples, f"{P}task_keys_never_expire") == {"": 1}
    assert _plain(samples, f"{P}value_bytes") == {"task": 5 + 2 + 1 + 1, "asset": 0}
    age = _plain(samples, f"{P}oldest_expired_key_age_seconds")[""]
    assert before - PAST.timestamp() - 5 <= age <= time.time() - PAST.timestamp() + 5
    assert before - 1 <= _plain(samples, f"{P}stats_timestamp_seconds")[""] <= time.time() + 1
    assert [p.name for p in folder.iterdir()] == ["statestore_stats.prom"]  # no temporary file left
    assert stat.S_IMODE(metrics.stat().st_mode) == 0o644


def test_stats_output_is_unchanged_by_a_metrics_file(cli, db_url, tmp_path):
    _seed(db_url)
    without = json.loads(cli("stats", "-o", "json").stdout)
    metrics = tmp_path / "m.prom"
    with_file = json.loads(cli("stats", "--metrics-file", str(metrics), "-o", "json").stdout)
    assert {k: v for k, v in with_file.items() if k != "now"} == {k: v for k, v in without.items() if k != "now"}
    plain = cli("stats", "--metrics-file", str(metrics), "-o", "plain")

    def lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("stats\tnow\t")]

    assert plain.exit_code == 0 and lines(plain.stdout) == lines(cli("stats", "-o", "plain").stdout)
    assert plain.stderr == ""


def test_nothing_expired_is_an_age_of_zero_and_a_store_left_out_has_no_samples(cli, db_url, tmp_path):
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("d", "r", "t"), "k", "1", expires_at=None)
    backend.engine.dispose()
    metrics = tmp_path / "m.prom"
    assert cli("stats", "--metrics-file", str(metrics)).exit_code == 0
    samples = read_samples(metrics)
    assert list(samples[f"{P}oldest_expired_key_age_seconds"].values()) == [0]
    assert list(samples[f"{P}task_keys_expired"].values()) == [0]
    assert cli("stats", "--store", "asset", "--metrics-file", str(metrics)).exit_code == 0
    samples = read_samples(metrics)
    assert [dict(labels)["store"] for labels in samples[f"{P}keys"]] == ["asset"]  # the task store not counted
    assert samples[f"{P}task_keys_expired"] == {} and samples[f"{P}oldest_expired_key_age_seconds"] == {}


def test_the_dag_run_store_is_counted_on_airflow_34(tmp_path):
    with airflow34_database("sqlite", tmp_path) as url:
        add_runs(url, [("d", "r")], PAST)
        backend = MetastoreBackend(make_engine(url))
        backend.set(DagRunScope("d", "r"), "run_key", '"x"', expires_at=PAST)
        backend.engine.dispose()
        metrics = tmp_path / "m.prom"
        assert run_cli("stats", "--metrics-file", str(metrics), conn=url).exit_code == 0
        samples = read_samples(metrics)
    keys = {dict(labels)["store"]: value for labels, value in samples[f"{P}keys"].items()}
    assert keys == {"task": 0, "asset": 0, "dag_run": 1}
    value_bytes = {dict(labels)["store"]: value for labels, value in samples[f"{P}value_bytes"].items()}
    assert value_bytes["dag_run"] == 3
    over = {dict(labels)["store"]: value for labels, value in samples[f"{P}values_over_limit"].items()}
    assert over == {"task": 0, "asset": 0, "dag_run": 0}


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_values_over_the_limit_per_store_at_its_edge_and_none_without_a_limit(cli, db_url, tmp_path, monkeypatch):
    _seed(db_url)  # the largest task value is '"abc"', 5 bytes
    metrics = tmp_path / "m.prom"

    def over_at(limit: int) -> tuple[dict[str, float], float]:
        monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", str(limit))
        assert cli("stats", "--metrics-file", str(metrics), "-o", "json").exit_code == 0
        samples = read_samples(metrics)
        over = {dict(labels)["store"]: value for labels, value in samples[f"{P}values_over_limit"].items()}
        [limit_sample] = samples[f"{P}max_value_storage_bytes"].values()
        return over, limit_sample

    assert over_at(4) == ({"task": 1, "asset": 0}, 4)  # one byte over the limit
    assert over_at(5) == ({"task": 0, "asset": 0}, 5)  # at the limit: not over it
    assert over_at(0) == ({}, 0)  # no limit: nothing is over it, no sample rather than a 0 that reads as checked


@pytest.mark.parametrize(
    "args",
    [
        ["--metrics-label", "bad-name=1"],
        ["--metrics-label", "database=a", "--metrics-label", "database=b"],
    ],
)
def test_a_bad_label_writes_nothing_and_counts_nothing(cli, db_url, tmp_path, args):
    metrics = tmp_path / "m.prom"
    result = cli("stats", "--metrics-file", str(metrics), *args)
    assert result.exit_code == 2
    assert result.stdout == "" and result.stderr.startswith("statestore: error: --metrics-label ")
    assert result.stderr.count("\n") == 1
    assert not metrics.exists()


def test_an_unwritable_metrics_file_fails_before_counting(cli, db_url, tmp_path):
    metrics = tmp_path / "missing" / "m.prom"
    result = cli("stats", "--metrics-file", str(metrics))
    assert result.exit_code == 2 and result.stdout == ""
    assert (
        result.stderr
        == f"statestore: error: --metrics-file {metrics} cannot be written: directory {metrics.parent} does not exist\n"
    )
