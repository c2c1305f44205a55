"""``statestore stats --largest N``: the largest values of the selected keys, sized by the database as stored,
on every engine; and the values over ``max_value_storage_bytes`` at the limit's edge in every store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from cli_running import run_cli
from expected_output import assert_expected
from seeded_stores import REALISTIC_KEY, REALISTIC_RUNS, seed_realistic
from stores import sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.cli.output.render import Output
from statestore_cli.cli.output.stats_view import plain_rows, stats_document
from statestore_cli.db.database import make_engine
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.largest import LargeValue, largest_values
from statestore_cli.ops.stats import store_stats

ALL_ENGINES = True  # every test with a store runs on SQLite, PostgreSQL and MariaDB

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def _text(n: int) -> str:
    """A JSON string value of ``n`` bytes (ASCII)."""
    return '"' + "x" * (n - 2) + '"'


def _put(
    url: str, task: list[tuple[str, str, str, int, str, str]], assets: Sequence[tuple[str, str, str]] = ()
) -> None:
    """Task keys (dag_id, run_id, task_id, map_index, key, value) and asset keys (name, key, value; uri = name)."""
    backend = MetastoreBackend(make_engine(url))
    try:
        for dag_id, run_id, task_id, map_index, key, value in task:
            backend.set(TaskScope(dag_id, run_id, task_id, map_index), key, value, expires_at=None)
        for name, key, value in assets:
            backend.set(AssetScope(name=name, uri=name), key, value)
    finally:
        backend.engine.dispose()


def _largest(url: str, count: int, filt: KeyFilter | None = None) -> list[LargeValue]:
    engine = make_engine(url)
    try:
        return largest_values(engine, filt or KeyFilter(), count)
    finally:
        engine.dispose()


def _brief(values: list[LargeValue]) -> list[tuple[object, ...]]:
    return [(v.store, v.dag_id or v.name, v.map_index, v.key, v.value_bytes) for v in values]


# Sizes chosen for ties: two task values and an asset value of 300 bytes.
MIXED_TASK = [
    ("etl", "r1", "extract", -1, "big", _text(500)),
    ("etl", "r1", "extract", -1, "tie_b", _text(300)),
    ("etl", "r1", "extract", 2, "tie_a", _text(300)),
    ("etl", "r2", "load", -1, "small", _text(20)),
    ("report", "r1", "send", -1, "mid", _text(400)),
]
MIXED_ASSETS = [("orders", "tie_c", _text(300)), ("orders", "tiny", "1")]


def test_largest_values_across_the_stores_largest_first_ties_by_store_then_scope_and_key(db_url):
    _put(db_url, MIXED_TASK, MIXED_ASSETS)
    assert _brief(_largest(db_url, 5)) == [
        ("task", "etl", -1, "big", 500),
        ("task", "report", -1, "mid", 400),
        ("task", "etl", -1, "tie_b", 300),  # map index -1 before 2: by scope, then key
        ("task", "etl", 2, "tie_a", 300),
        ("asset", "orders", None, "tie_c", 300),  # a tie: task keys first, as `list` orders the stores
    ]
    # A cut through the tie keeps the same order.
    assert _brief(_largest(db_url, 3))[2] == ("task", "etl", -1, "tie_b", 300)


def test_a_cut_through_values_of_one_size_keeps_the_oldest_rows_then_shows_them_in_scope_order(db_url):
    _put(
        db_url,
        [
            ("etl", "r1", "t", -1, "written_1st", _text(300)),
            ("etl", "r1", "t", -1, "a_written_2nd", _text(300)),
            ("etl", "r1", "t", -1, "written_3rd", _text(300)),
            ("etl", "r1", "t", -1, "largest_last", _text(301)),
        ],
    )
    assert [v.key for v in _largest(db_url, 2)] == ["largest_last", "written_1st"]
    assert [v.key for v in _largest(db_url, 3)] == ["largest_last", "a_written_2nd", "written_1st"]
    assert [v.key for v in _largest(db_url, 4)] == ["largest_last", "a_written_2nd", "written_1st", "written_3rd"]


def test_more_wanted_than_there_are_keys_lists_every_key_once(db_url):
    _put(db_url, MIXED_TASK, MIXED_ASSETS)
    every = _largest(db_url, 1000)
    assert len(every) == len(MIXED_TASK) + len(MIXED_ASSETS)
    assert [v.value_bytes for v in every] == [500, 400, 300, 300, 300, 20, 1]
    assert _largest(db_url, 3, KeyFilter(store="asset")) == [
        LargeValue("asset", "tie_c", 300, asset_id=every[4].asset_id, name="orders", uri="orders"),
        LargeValue("asset", "tiny", 1, asset_id=every[4].asset_id, name="orders", uri="orders"),
    ]


def test_an_empty_store_has_no_largest_values(db_url):
    assert _largest(db_url, 10) == []


def test_sizes_are_bytes_as_stored_not_characters(db_url):
    _put(
        db_url,
        [
            ("etl", "r1", "t", -1, "ascii_9", '"1234567"'),  # 9 characters, 9 bytes
            ("etl", "r1", "t", -1, "accent_10", '"\u00e9\u00e9\u00e9\u00e9"'),  # 6 characters, 10 bytes in UTF-8
            ("etl", "r1", "t", -1, "emoji_18", '"\U0001f600\U0001f600\U0001f600\U0001f600"'),  # 6 characters, 18 bytes
        ],
    )
    assert [(v.key, v.value_bytes) for v in _largest(db_url, 3)] == [
        ("emoji_18", 18),
        ("accent_10", 10),
        ("ascii_9", 9),
    ]


def test_filters_select_what_list_selects(db_url):
    _put(db_url, MIXED_TASK, MIXED_ASSETS)
    assert [v.key for v in _largest(db_url, 10, KeyFilter(dag_id="etl"))] == ["big", "tie_b", "tie_a", "small"]
    assert [v.key for v in _largest(db_url, 10, KeyFilter(dag_id="etl", map_index=2))] == ["tie_a"]
    assert [v.key for v in _largest(db_url, 10, KeyFilter(key="tie_c"))] == ["tie_c"]
    assert [v.key for v in _largest(db_url, 10, KeyFilter(store="task", key="tie_c"))] == []
    assert [v.key for v in _largest(db_url, 10, KeyFilter(name="orders"))] == ["tie_c", "tiny"]


@pytest.mark.parametrize("count", [0, -1, 1001])
def test_a_count_out_of_range_is_refused(db_url, count):
    with pytest.raises(InvalidInputError, match=f"--largest {count} is out of range: give a number from 1 to 1000"):
        _largest(db_url, count)


def test_stats_json_has_the_largest_values_only_when_asked(db_url):
    _put(db_url, MIXED_TASK, MIXED_ASSETS)
    result = run_cli("stats", "--largest", "2", "-o", "json", conn=db_url)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    task = {"store": "task", "run_id": "r1", "map_index": -1}
    assert doc["largest"] == [
        {**task, "dag_id": "etl", "task_id": "extract", "key": "big", "value_bytes": 500},
        {**task, "dag_id": "report", "task_id": "send", "key": "mid", "value_bytes": 400},
    ]
    assert list(doc["largest"][0]) == ["store", "dag_id", "run_id", "task_id", "map_index", "key", "value_bytes"]
    assets = json.loads(run_cli("stats", "--largest", "1", "--store", "asset", "-o", "json", conn=db_url).stdout)
    assert assets["largest"] == [
        {"store": "asset", "asset_id": assets["asset"]["top_assets"][0]["asset_id"], "name": "orders", "uri": "orders",
         "key": "tie_c", "value_bytes": 300},
    ]  # fmt: skip
    plain = json.loads(run_cli("stats", "-o", "json", conn=db_url).stdout)
    assert "largest" not in plain


def test_stats_plain_lines_of_the_largest_values(db_url):
    _put(db_url, MIXED_TASK, MIXED_ASSETS)
    result = run_cli("stats", "--largest", "5", "-o", "plain", conn=db_url)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("largest\t")]
    asset_id = json.loads(run_cli("stats", "-o", "json", conn=db_url).stdout)["asset"]["top_assets"][0]["asset_id"]
    assert lines == [
        "largest\ttask\t500\tetl\tr1\textract\t-1\tbig",
        "largest\ttask\t400\treport\tr1\tsend\t-1\tmid",
        "largest\ttask\t300\tetl\tr1\textract\t-1\ttie_b",
        "largest\ttask\t300\tetl\tr1\textract\t2\ttie_a",
        f"largest\tasset\t300\t{asset_id}\torders\torders\ttie_c",
    ]
    assert result.stdout.rstrip("\n").endswith(lines[-1])  # the last section


# -- a worker-side backend --------------------------------------------------------------------------------
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_with_a_worker_backend_the_sizes_are_the_references_and_no_object_is_read(
    cli, db_url, monkeypatch, sample_objects
):
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "sample_backends.DictWorkerBackend")
    assert cli("set", "--dag-id", "etl", "--run-id", "r1", "--task-id", "t", "big", _text(10_000)).exit_code == 0
    [(stored,)] = sql(db_url, "SELECT value FROM task_state_store")
    reference = len(stored.encode())
    assert reference < 200  # the row holds the reference, the object store the 10,000 bytes
    # A worker backend that cannot even be created: --largest never loads it, nor reads an object.
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "sample_backends.UnconstructibleWorker")
    doc = json.loads(cli("stats", "--largest", "1", "-o", "json").stdout)
    assert [(v["key"], v["value_bytes"]) for v in doc["largest"]] == [("big", reference)]
    table = cli("stats", "--largest", "1", "-o", "table")
    assert table.exit_code == 0, table.output
    assert f"│ {reference:>5} │" in table.stdout.replace(f"{reference:,}", str(reference))
    assert table.stderr == (
        "statestore: note: [workers] state_store_backend is sample_backends.UnconstructibleWorker: the rows hold "
        "its references, so --largest shows the sizes of the references, not of the values behind them\n"
    )
    assert cli("stats", "--largest", "1", "-o", "plain").stderr == ""  # scripts read the documented rule


# -- the terminal ----------------------------------------------------------------------------------------------
def _seed_sizes(url: str) -> None:
    """The realistic store, its values grown to sizes around the limit of 4,096 bytes used below."""
    seed_realistic(url)
    grown = [
        ("etl_orders_daily", REALISTIC_RUNS[0], "submit_spark_job", REALISTIC_KEY, 4097),  # one over the limit
        ("etl_orders_daily", REALISTIC_RUNS[0], "load_partition", REALISTIC_KEY, 4096),  # at it: not over
        ("ml_feature_store_refresh_with_a_rather_long_dag_id", REALISTIC_RUNS[1], "submit_spark_job", "job_id", 2048),
    ]
    for dag_id, run_id, task_id, key, size in grown:
        sql(
            url,
            "UPDATE task_state_store SET value = :v WHERE dag_id = :d AND run_id = :r AND task_id = :t AND {key} = :k",
            v=_text(size),
            d=dag_id,
            r=run_id,
            t=task_id,
            k=key,
        )


@pytest.mark.parametrize("columns", [80, 120])
def test_largest_values_on_a_terminal(db_url, columns, monkeypatch, capsys):
    _seed_sizes(db_url)
    engine = make_engine(db_url)
    try:
        stats = store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=4096, largest=4)
    finally:
        engine.dispose()
    monkeypatch.setenv("COLUMNS", str(columns))
    Output("table").stats(stats)
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) <= columns
    largest = shown[shown.index("the 4 largest values") :]  # the section after the others
    assert REALISTIC_KEY in largest and "…" not in largest
    assert_expected(f"stats_largest_{columns}.txt", largest)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_largest_values_without_a_limit_or_keys_on_a_terminal(db_url, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    engine = make_engine(db_url)
    try:
        Output("table").stats(store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=0, largest=3))
        _put(db_url, [("etl", "r1", "t", -1, "k", _text(70000))])
        Output("table").stats(store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=0, largest=3))
    finally:
        engine.dispose()
    shown = capsys.readouterr().out
    assert "the 0 largest values, bytes as stored (no size limit set): no keys\n" in shown
    assert shown[shown.index("the 1 largest value") :] == (
        "the 1 largest value, bytes as stored (no size limit set)\n"
        "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┓\n"
        "┃ key                                         ┃  bytes ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━┩\n"
        "│ task  dag_id etl  run_id r1  task_id t  map_index -1 │\n"
        "│   k                                         │ 70,000 │\n"
        "└─────────────────────────────────────────────┴────────┘\n"
    )


# -- the limit's edge ------------------------------------------------------------------------------------------
def test_values_at_the_limit_are_not_over_it_and_one_byte_more_is(db_url):
    _put(
        db_url,
        [("etl", "r1", "t", -1, "at_limit", _text(100)), ("etl", "r1", "t", -1, "over", _text(101))],
        [("orders", "at_limit", _text(100)), ("orders", "over", _text(101)), ("orders", "over_too", _text(150))],
    )
    engine = make_engine(db_url)
    try:
        at_100 = store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=100)
        at_101 = store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=101)
        no_limit = store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=0)
    finally:
        engine.dispose()
    assert (at_100.task.over_limit, at_100.asset.over_limit) == (1, 2)
    assert (at_101.task.over_limit, at_101.asset.over_limit) == (0, 1)
    assert (no_limit.task.over_limit, no_limit.asset.over_limit) == (None, None)
    assert stats_document(at_100)["asset"]["over_max_value_storage_bytes"] == 2
    assert ("task", "over_max_value_storage_bytes", 1) in list(plain_rows(at_100))
