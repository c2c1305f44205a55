"""``statestore stats`` on Airflow 3.4's dag-run state store (``dag_run_state_store``), on every engine.

The databases are the 3.4 fixtures (tests/fixtures/README.md) with runs and keys added; a 3.3 store (the
``db_url`` fixture) has no dag-run store, and its figures and documents stay as they were.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow34 import add_runs, airflow34_database
from cli_running import run_cli
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.cli.output.render import Output
from statestore_cli.cli.output.stats_view import plain_rows, stats_document
from statestore_cli.db.database import make_engine
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import DagRunScope
from statestore_cli.ops.stats import EXPIRY_BUCKETS, store_stats

ENGINES = ["sqlite", "postgresql", "mariadb"]
NOW = datetime(2026, 12, 1, 15, 30, 0, tzinfo=UTC)
UPDATED = datetime(2026, 11, 29, 10, 15, 30, tzinfo=UTC)
DAY = timedelta(days=1)
RUNS = [("etl", "r1"), ("etl", "r2"), ("report", "r1")]
# (dag_id, run_id, key, value, expires_at): one key in each expiry bucket of NOW
DAG_RUN_KEYS = [
    ("etl", "r1", "watermark", '"2026-11-30"', NOW - DAY),
    ("etl", "r1", "cursor", "42", NOW + timedelta(hours=3)),
    ("etl", "r2", "watermark", '"2026-12-01"', NOW + 3 * DAY),
    ("etl", "r2", "later", "1", NOW + 10 * DAY),
    ("report", "r1", "recipients", '["ops@example.com"]', None),
    ("report", "r1", "archive", '"s3://b/k"', NOW + 45 * DAY),
]
ONE_EACH = dict.fromkeys(EXPIRY_BUCKETS, 1)


@pytest.fixture
def airflow34(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An Airflow 3.4 database's URL; SQLite unless parametrised."""
    with airflow34_database(getattr(request, "param", "sqlite"), tmp_path) as url:
        yield url


def _moment(url: str, moment: datetime) -> object:
    if url.startswith("sqlite"):
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
    return moment.replace(tzinfo=None) if url.startswith(("mysql", "mariadb")) else moment


def _seed(url: str, expiry_from: datetime = NOW) -> None:
    """The runs, the dag-run keys (expiring relative to ``expiry_from``) and one task key of etl/r1."""
    add_runs(url, RUNS, UPDATED)
    backend = MetastoreBackend(make_engine(url))
    try:
        for dag_id, run_id, key, value, expires_at in DAG_RUN_KEYS:
            moved = None if expires_at is None else expires_at - NOW + expiry_from
            backend.set(DagRunScope(dag_id, run_id), key, value, expires_at=moved)
        backend.set(TaskScope("etl", "r1", "extract"), "offset", "7", expires_at=None)
    finally:
        backend.engine.dispose()
    sql(url, "UPDATE dag_run_state_store SET updated_at = :at", at=_moment(url, UPDATED))
    sql(url, "UPDATE dag_run_state_store SET updated_at = :at WHERE dag_id = 'report'", at=_moment(url, UPDATED + DAY))
    sql(url, "UPDATE task_state_store SET updated_at = :at", at=_moment(url, UPDATED))


def _stats(url: str, filt: KeyFilter | None = None, limit: int = 65535):  # type: ignore[no-untyped-def]
    engine = make_engine(url)
    try:
        return store_stats(engine, filt or KeyFilter(), NOW, max_value_storage_bytes=limit)
    finally:
        engine.dispose()


def _bytes(dag_id: str | None = None, run_id: str | None = None, key: str | None = None) -> int:
    """The value bytes of the dag-run keys selected as a filter does."""
    wanted = {0: dag_id, 1: run_id, 2: key}
    chosen = [row for row in DAG_RUN_KEYS if all(w is None or row[i] == w for i, w in wanted.items())]
    return sum(len(row[3]) for row in chosen)


ALL_BYTES = _bytes()


@pytest.mark.parametrize("airflow34", ENGINES, indirect=True)
def test_stats_counts_the_dag_run_keys_apart_from_the_task_keys(airflow34):
    _seed(airflow34)
    stats = _stats(airflow34, limit=16)  # one value ('["ops@example.com"]', 19 bytes) is over 16
    doc = stats_document(stats)
    assert list(doc) == ["now", "filter", "max_value_storage_bytes", "task", "dag_run", "asset"]
    assert doc["dag_run"] == {
        "rows": 6,
        "value_bytes": ALL_BYTES,
        "dags": 2,
        "runs": 3,
        "oldest_updated_at": "2026-11-29T10:15:30+00:00",
        "newest_updated_at": "2026-11-30T10:15:30+00:00",
        "over_max_value_storage_bytes": 1,
        "expiry": ONE_EACH,
    }
    task = doc["task"]
    assert (task["rows"], task["value_bytes"], task["dags"]) == (1, 1, 1)
    assert task["expiry"] == {**dict.fromkeys(EXPIRY_BUCKETS, 0), "never": 1}
    assert doc["asset"]["rows"] == 0


@pytest.mark.parametrize("airflow34", ENGINES, indirect=True)
def test_stats_json_of_the_command_has_the_dag_run_store_and_a_33_store_has_none(airflow34, db_url):
    _seed(airflow34, expiry_from=datetime.now(UTC))
    result = run_cli("stats", "-o", "json", conn=airflow34)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {k: v for k, v in doc["dag_run"].items() if k != "expiry"} == {
        "rows": 6,
        "value_bytes": ALL_BYTES,
        "dags": 2,
        "runs": 3,
        "oldest_updated_at": "2026-11-29T10:15:30+00:00",
        "newest_updated_at": "2026-11-30T10:15:30+00:00",
        "over_max_value_storage_bytes": 0,
    }
    assert doc["dag_run"]["expiry"] == ONE_EACH
    # A store without a dag-run table (Airflow 3.3's layout): no "dag_run" key at all, as before.
    standalone = json.loads(run_cli("stats", "-o", "json", conn=db_url).stdout)
    assert set(standalone) == {"now", "filter", "max_value_storage_bytes", "task", "asset"}


@pytest.mark.parametrize("airflow34", ENGINES, indirect=True)
def test_filters_select_dag_run_keys_as_list_does(airflow34):
    _seed(airflow34)

    def figures(filt: KeyFilter) -> tuple[object, ...]:
        stats = _stats(airflow34, filt)
        runs = stats.dag_run
        shown = None if runs is None else (runs.rows, runs.dags, runs.runs, runs.value_bytes)
        return shown, None if stats.task is None else stats.task.rows, None if stats.asset is None else stats.asset.rows

    assert figures(KeyFilter(store="dag_run")) == ((6, 2, 3, ALL_BYTES), None, None)
    assert (_bytes(dag_id="etl"), _bytes(dag_id="etl", run_id="r2"), _bytes(run_id="r1")) == (27, 13, 43)
    assert figures(KeyFilter(dag_id="etl")) == ((4, 1, 2, 27), 1, None)
    assert figures(KeyFilter(dag_id="etl", run_id="r2")) == ((2, 1, 1, 13), 0, None)
    assert figures(KeyFilter(run_id="r1")) == ((4, 2, 2, 43), 1, None)
    assert figures(KeyFilter(key="watermark")) == ((2, 1, 2, 24), 0, 0)
    assert figures(KeyFilter(store="dag_run", dag_id="report", key="recipients")) == ((1, 1, 1, 19), None, None)
    # task options select task keys only; --store task and asset options leave the dag-run store out
    assert figures(KeyFilter(task_id="extract")) == (None, 1, None)
    assert figures(KeyFilter(dag_id="etl", map_index=-1)) == (None, 1, None)
    assert figures(KeyFilter(store="task")) == (None, 1, None)
    assert figures(KeyFilter(store="asset")) == (None, None, 0)
    assert figures(KeyFilter(name="orders")) == (None, None, 0)
    assert figures(KeyFilter(store="dag_run", task_id="extract")) == (None, None, None)


def test_the_command_s_filters_and_outputs(airflow34, db_url):
    _seed(airflow34, expiry_from=datetime.now(UTC))

    def doc(*args: str) -> dict[str, object]:
        result = run_cli("stats", *args, "-o", "json", conn=airflow34)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    only = doc("--store", "dag_run", "--dag-id", "etl", "--run-id", "r2")
    assert (only["task"], only["asset"], only["filter"]) == (
        None,
        None,
        {"store": "dag_run", "dag_id": "etl", "run_id": "r2"},
    )
    assert only["dag_run"]["rows"] == 2 and only["dag_run"]["runs"] == 1  # type: ignore[index]
    task_only = doc("--dag-id", "etl", "--run-id", "r1", "--task-id", "extract")
    assert task_only["dag_run"] is None and task_only["task"]["rows"] == 1  # type: ignore[index]
    assert doc("--map-index", "-1")["dag_run"] is None
    plain = run_cli("stats", "--store", "dag_run", "--key", "watermark", "-o", "plain", conn=airflow34)
    assert plain.exit_code == 0, plain.output
    lines = plain.stdout.splitlines()
    assert lines[2:7] == ["dag_run\trows\t2", "dag_run\tvalue_bytes\t24", "dag_run\tdags\t1", "dag_run\truns\t2",
                          "dag_run\toldest_updated_at\t2026-11-29T10:15:30+00:00"]  # fmt: skip
    assert lines[9:] == [
        "dag_run_expiry\texpired\t1",
        "dag_run_expiry\twithin_1_day\t0",
        "dag_run_expiry\twithin_1_to_7_days\t1",
        "dag_run_expiry\twithin_7_to_30_days\t0",
        "dag_run_expiry\tafter_30_days\t0",
        "dag_run_expiry\tnever\t0",
    ]
    # Asked for by name where there is none: said so, exit 2 (a 3.3 store lists no dag-run keys either).
    refused = run_cli("stats", "--store", "dag_run", conn=db_url)
    assert refused.exit_code == 2
    assert refused.stderr == (
        "statestore: error: this database has no dag-run state store (Airflow 3.3 layout): --store dag_run needs "
        "Airflow 3.4's dag_run_state_store\n"
    )
    assert not [row for row in plain_rows(_stats(db_url)) if str(row[0]).startswith("dag_run")]


VIEW_80 = """\
state store statistics as of 2026-12-01 15:30:00 UTC
keys per store
┏━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━┓
┃                         ┃ task keys ┃ asset keys ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━┩
│ keys                    │         0 │          0 │
│ dags / assets           │         0 │          0 │
│ value size              │       0 B │        0 B │
│ oldest updated_at (UTC) │         - │          - │
│ newest updated_at (UTC) │         - │          - │
│ values over 65,535 B    │         0 │          0 │
└─────────────────────────┴───────────┴────────────┘

dag-run keys (Airflow 3.4's dag_run_state_store)
┌───────────────────────────┬─────────────────────┐
│ keys                      │                   6 │
│ dags / runs               │               2 / 3 │
│ value size                │                56 B │
│ oldest updated_at (UTC)   │ 2026-11-29 10:15:30 │
│ newest updated_at (UTC)   │ 2026-11-30 10:15:30 │
│ values over 65,535 B      │                   0 │
├───────────────────────────┼─────────────────────┤
│ already expired           │                   1 │
│ expire in less than 1 day │                   1 │
│ expire in 1-7 days        │                   1 │
│ expire in 7-30 days       │                   1 │
│ expire in 30 days or more │                   1 │
│ never expire              │                   1 │
└───────────────────────────┴─────────────────────┘
"""


def _view(stats: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    Output("table").stats(stats)  # type: ignore[arg-type]
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) <= 80
    return "\n".join(line.rstrip() for line in shown.splitlines()) + "\n"  # rich pads a table's title


@pytest.mark.parametrize("airflow34", ENGINES, indirect=True)
def test_the_terminal_view_at_80_columns(airflow34, monkeypatch, capsys):
    assert ALL_BYTES == 56
    empty = _view(_stats(airflow34, KeyFilter(store="dag_run")), monkeypatch, capsys)
    assert empty == "state store statistics as of 2026-12-01 15:30:00 UTC\n\ndag-run keys: none\n"
    _seed(airflow34)
    sql(airflow34, "DELETE FROM task_state_store")
    assert _view(_stats(airflow34), monkeypatch, capsys) == VIEW_80
    alone = _view(_stats(airflow34, KeyFilter(store="dag_run")), monkeypatch, capsys)
    assert alone == VIEW_80.split("\n")[0] + "\n\n" + VIEW_80.split("\n\n", 1)[1]
