"""``statestore stats``: figures counted by the database, on every engine, against rows placed on purpose."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from stores import sql, sql_each

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine
from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.stats import CHART_DAYS, EXPIRY_BUCKETS, store_stats

ALL_ENGINES = True  # every test with a store runs on SQLite, PostgreSQL and MariaDB

NOW = datetime(2026, 12, 1, 15, 30, 0, tzinfo=UTC)
US = timedelta(microseconds=1)
DAY = timedelta(days=1)

# (key, expires_at) of dag "etl": each bucket's edges, from both sides.
EDGES = [
    ("expired_long_ago", NOW - 400 * DAY),
    ("expired_just_now", NOW - US),
    ("expires_now", NOW),  # not expired yet: a clean at NOW keeps it (expires_at < now is expired)
    ("under_1_day", NOW + DAY - US),
    ("at_1_day", NOW + DAY),
    ("under_7_days", NOW + 7 * DAY - US),
    ("at_7_days", NOW + 7 * DAY),
    ("under_30_days", NOW + 30 * DAY - US),
    ("at_30_days", NOW + 30 * DAY),
    ("next_year", NOW + 365 * DAY),
    ("never_1", None),
    ("never_2", None),
]
EXPECTED_EXPIRY = {
    "expired": 2,
    "within_1_day": 2,
    "within_1_to_7_days": 2,
    "within_7_to_30_days": 2,
    "after_30_days": 2,
    "never": 2,
}


def _store(url: str) -> MetastoreBackend:
    return MetastoreBackend(make_engine(url))


def _put(url: str, rows: list[tuple[str, str, str, datetime | None, str]]) -> None:
    """(dag_id, run_id, key, expires_at, value) task rows, task_id "t", map index -1."""
    backend = _store(url)
    try:
        for dag_id, run_id, key, expires_at, value in rows:
            backend.set(TaskScope(dag_id, run_id, "t"), key, value, expires_at=expires_at)
    finally:
        backend.engine.dispose()


def _stored(url: str, moment: datetime) -> object:
    """``moment`` as a raw SQL parameter for an updated_at column of this engine."""
    if url.startswith("sqlite"):
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
    return moment.replace(tzinfo=None) if url.startswith(("mysql", "mariadb")) else moment


def _stats(url: str, filt: KeyFilter | None = None, **kw: object):  # type: ignore[no-untyped-def]
    engine = make_engine(url)
    try:
        return store_stats(engine, filt or KeyFilter(), NOW, **kw)  # type: ignore[arg-type]
    finally:
        engine.dispose()


# -- task keys ----------------------------------------------------------------------------------------------
def test_every_task_key_is_in_exactly_one_expiry_bucket_edges_included(db_url):
    _put(db_url, [("etl", "r1", key, expires, "1") for key, expires in EDGES])
    stats = _stats(db_url)
    assert stats.task is not None
    assert tuple(stats.task.expiry) == EXPIRY_BUCKETS
    assert stats.task.expiry == EXPECTED_EXPIRY
    assert stats.task.rows == sum(stats.task.expiry.values()) == len(EDGES)


def test_expiring_per_day_counts_utc_days_from_now_and_nothing_outside_the_window(db_url):
    midnight = datetime(2026, 12, 2, tzinfo=UTC)  # the end of NOW's day
    window_end = midnight + (CHART_DAYS - 1) * DAY
    _put(
        db_url,
        [
            ("etl", "r1", "expired", NOW - US, "1"),  # expired: not in the chart
            ("etl", "r1", "now", NOW, "1"),  # today
            ("etl", "r1", "before_midnight", midnight - US, "1"),  # today
            ("etl", "r1", "midnight", midnight, "1"),  # tomorrow
            ("etl", "r1", "day_10", midnight + 9 * DAY + timedelta(hours=5), "1"),
            ("etl", "r1", "last_day", window_end - US, "1"),  # the window's last day
            ("etl", "r1", "after_window", window_end, "1"),  # past it
            ("etl", "r1", "never", None, "1"),
        ],
    )
    days = _stats(db_url).task.expiring_per_day
    assert len(days) == CHART_DAYS
    assert days[0].day == date(2026, 12, 1) and days[-1].day == date(2027, 1, 4)
    assert [d.day for d in days] == [date(2026, 12, 1) + i * DAY for i in range(CHART_DAYS)]
    counts = {d.day: d.rows for d in days if d.rows}
    assert counts == {date(2026, 12, 1): 2, date(2026, 12, 2): 1, date(2026, 12, 11): 1, date(2027, 1, 4): 1}


def test_sizes_are_bytes_and_values_over_the_limit_are_counted(db_url):
    _put(
        db_url,
        [
            ("etl", "r1", "ten", None, '"12345678"'),  # 10 bytes: at the limit, not over it
            ("etl", "r1", "eleven", None, '"123456789"'),  # 11 bytes: over
            ("etl", "r1", "accent", None, '"\u00e9\u00e9\u00e9\u00e9"'),  # 6 characters, 10 bytes in UTF-8
            ("etl", "r1", "emoji", None, '"\U0001f600\U0001f600"'),  # 4 characters, 10 bytes
        ],
    )
    stats = _stats(db_url, max_value_storage_bytes=10)
    assert stats.task.value_bytes == 41
    assert stats.task.over_limit == 1
    assert _stats(db_url, max_value_storage_bytes=0).task.over_limit is None  # no limit: not applicable


def test_oldest_and_newest_updated_at(db_url):
    _put(db_url, [("etl", "r1", k, None, "1") for k in ("a", "b", "c")] + [("other", "r1", "d", None, "1")])
    for key, moment in (
        ("a", datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("b", datetime(2026, 6, 1, tzinfo=UTC)),
        ("c", datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC)),
        ("d", datetime(2026, 7, 1, tzinfo=UTC)),
    ):
        sql(db_url, "UPDATE task_state_store SET updated_at = :m WHERE {key} = :k", m=_stored(db_url, moment), k=key)
    task = _stats(db_url).task
    assert task.oldest_updated_at == datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert task.newest_updated_at == datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC)
    only_other = _stats(db_url, KeyFilter(dag_id="other")).task
    assert only_other.oldest_updated_at == only_other.newest_updated_at == datetime(2026, 7, 1, tzinfo=UTC)


def test_top_dags_by_rows_and_by_bytes_with_ties_by_dag_id(db_url):
    rows = []
    for i in range(3):
        rows.append(("many_small", "r1", f"k{i}", None, "1"))  # 3 rows, 3 bytes
    rows.append(("one_big", "r1", "k", None, '"' + "x" * 98 + '"'))  # 1 row, 100 bytes
    rows += [("tie_b", "r1", "k1", None, "22"), ("tie_b", "r1", "k2", None, "22")]  # 2 rows, 4 bytes
    rows += [("tie_a", "r1", "k1", None, "22"), ("tie_a", "r1", "k2", None, "22")]
    _put(db_url, rows)
    task = _stats(db_url).task
    assert task.dags == 4
    assert [(d.dag_id, d.rows, d.value_bytes) for d in task.top_dags_by_rows] == [
        ("many_small", 3, 3),
        ("tie_a", 2, 4),
        ("tie_b", 2, 4),
        ("one_big", 1, 100),
    ]
    assert [d.dag_id for d in task.top_dags_by_bytes] == ["one_big", "tie_a", "tie_b", "many_small"]
    top2 = _stats(db_url, top=2).task
    assert [d.dag_id for d in top2.top_dags_by_rows] == ["many_small", "tie_a"]
    assert [d.dag_id for d in top2.top_dags_by_bytes] == ["one_big", "tie_a"]
    assert top2.dags == 4 and top2.rows == 8  # the totals count every dag, listed or not


def _passes(url: str, **kw: object) -> tuple[object, int]:
    """The figures, and how many per-dag statements produced them."""
    from sqlalchemy import event

    engine = make_engine(url)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, stmt, *_rest: statements.append(stmt))
    try:
        stats = store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=3, **kw)  # type: ignore[arg-type]
    finally:
        engine.dispose()
    return stats.task, sum("GROUP BY task_state_store.dag_" in s for s in statements)  # dag_id, or dag_run_id on MySQL


def test_a_pass_split_over_connections_adds_up_to_the_single_pass(db_url):
    # Dags written round-robin, so on MySQL (parts are ranges of ids) every dag spans every part; values of
    # growing size and every expiry bucket, so each figure differs between dags.
    rows = []
    for i in range(60):
        expires = EDGES[i % len(EDGES)][1]
        rows.append((f"dag_{i % 7}", f"run_{i % 3}", f"k{i}", expires, '"' + "v" * (i % 11) + '"'))
    _put(db_url, rows)
    moments = [datetime(2026, 1, 1, tzinfo=UTC) + i * 3 * DAY + i * US for i in range(60)]
    sql_each(
        db_url,
        "UPDATE task_state_store SET updated_at = :m WHERE {key} = :k",
        [{"m": _stored(db_url, moment), "k": f"k{i}"} for i, moment in enumerate(moments)],
    )
    single, single_passes = _passes(db_url, parallel_min_rows=10**9)
    split, split_passes = _passes(db_url, parallel_min_rows=1, workers=3)
    assert single_passes == 1
    assert split_passes == (1 if db_url.startswith("postgresql") else 3)  # PostgreSQL splits a scan itself
    assert split == single
    assert single.rows == 60 and single.dags == 7 and single.over_limit == sum(i % 11 + 2 > 3 for i in range(60))
    assert single.oldest_updated_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert single.newest_updated_at == datetime(2026, 1, 1, tzinfo=UTC) + 59 * 3 * DAY + 59 * US


def test_an_empty_store_has_zeros_and_no_timestamps(db_url):
    stats = _stats(db_url)
    assert stats.task.rows == 0 and stats.task.dags == 0 and stats.task.value_bytes == 0
    assert stats.task.oldest_updated_at is None and stats.task.newest_updated_at is None
    assert set(stats.task.expiry.values()) == {0}
    assert stats.task.top_dags_by_rows == [] and len(stats.task.expiring_per_day) == CHART_DAYS
    assert stats.asset.rows == 0 and stats.asset.assets == 0 and stats.asset.top_assets == []


# -- asset keys and filters ---------------------------------------------------------------------------------
def _assets(url: str) -> None:
    backend = _store(url)
    try:
        for name, keys in (("orders", 3), ("customers", 1), ("retired", 2)):
            for i in range(keys):
                backend.set(AssetScope(name=name, uri=f"s3://lake/{name}"), f"k{i}", '"v"')
    finally:
        backend.engine.dispose()
    sql(url, "DELETE FROM asset_active WHERE name = 'retired'")  # the asset left every dag


def test_asset_keys_per_asset_with_whether_the_asset_is_active(db_url):
    _assets(db_url)
    assets = _stats(db_url).asset
    assert (assets.rows, assets.assets, assets.inactive_assets, assets.inactive_rows) == (6, 3, 1, 2)
    assert assets.value_bytes == 18
    assert [(a.name, a.uri, a.rows, a.active) for a in assets.top_assets] == [
        ("orders", "s3://lake/orders", 3, True),
        ("retired", "s3://lake/retired", 2, False),
        ("customers", "s3://lake/customers", 1, True),
    ]
    assert assets.oldest_updated_at is not None and assets.oldest_updated_at <= assets.newest_updated_at


@pytest.mark.parametrize(
    "filt, task_rows, asset_rows",
    [
        (KeyFilter(), 4, 6),
        (KeyFilter(store="task"), 4, None),
        (KeyFilter(store="asset"), None, 6),
        (KeyFilter(dag_id="etl"), 3, None),
        (KeyFilter(dag_id="etl", run_id="r2"), 1, None),
        (KeyFilter(map_index=-1), 4, None),
        (KeyFilter(name="orders"), None, 3),
        (KeyFilter(uri="s3://lake/retired"), None, 2),
        (KeyFilter(key="k1"), 1, 2),
        (KeyFilter(store="task", name="orders"), None, None),
    ],
)
def test_filters_select_as_list_does(db_url, filt, task_rows, asset_rows):
    _put(db_url, [("etl", "r1", "k1", None, "1"), ("etl", "r1", "k2", None, "1"), ("etl", "r2", "k3", None, "1")])
    _put(db_url, [("other", "r1", "k4", NOW + DAY, "1")])
    _assets(db_url)
    stats = _stats(db_url, filt)
    assert (stats.task and stats.task.rows) == task_rows
    assert (stats.asset and stats.asset.rows) == asset_rows


def test_asset_id_filter(db_url):
    _assets(db_url)
    (asset_id,) = sql(db_url, "SELECT id FROM asset WHERE name = 'customers'")[0]
    assets = _stats(db_url, KeyFilter(asset_id=asset_id)).asset
    assert [(a.asset_id, a.name, a.rows) for a in assets.top_assets] == [(asset_id, "customers", 1)]


# -- the command --------------------------------------------------------------------------------------------
def test_stats_json_has_the_documented_keys(cli):
    cli("set", "--dag-id", "etl", "--run-id", "r", "--task-id", "t", "k", '{"a": 1}', "--retention", "2h")
    cli("set", "--asset-name", "orders", "w", '"2026-11-30"')
    result = cli("stats", "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"now", "filter", "max_value_storage_bytes", "task", "asset"}
    assert doc["filter"] == {} and doc["max_value_storage_bytes"] == 65535
    assert datetime.fromisoformat(doc["now"]).utcoffset() == timedelta(0)
    task = doc["task"]
    assert task["rows"] == 1 and task["value_bytes"] == len('{"a": 1}') and task["dags"] == 1
    assert task["expiry"] == {**dict.fromkeys(EXPIRY_BUCKETS, 0), "within_1_day": 1}
    assert task["over_max_value_storage_bytes"] == 0
    assert datetime.fromisoformat(task["oldest_updated_at"]).utcoffset() == timedelta(0)
    assert sum(d["rows"] for d in task["expiring_per_day"]) == 1 and len(task["expiring_per_day"]) == CHART_DAYS
    assert task["top_dags_by_rows"] == task["top_dags_by_bytes"] == [{"dag_id": "etl", "rows": 1, "value_bytes": 8}]
    asset = doc["asset"]
    assert asset["top_assets"] == [
        {"asset_id": 1, "name": "orders", "uri": "orders", "rows": 1, "value_bytes": 12, "active": True}
    ]
    assert (asset["assets"], asset["inactive_assets"], asset["inactive_asset_rows"]) == (1, 0, 0)


def test_stats_json_says_null_for_what_does_not_apply(cli, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "0")
    doc = json.loads(cli("stats", "--store", "task", "-o", "json").stdout)
    assert doc["asset"] is None and doc["filter"] == {"store": "task"}
    assert doc["task"]["over_max_value_storage_bytes"] is None
    assert doc["task"]["oldest_updated_at"] is None  # an empty store


def test_stats_plain_lines_are_section_name_value(cli):
    cli("set", "--dag-id", "etl", "--run-id", "r", "--task-id", "t", "k", "1", "--retention", "never")
    cli("set", "--asset-name", "orders", "w", "2")
    result = cli("stats", "-o", "plain")
    assert result.exit_code == 0, result.output
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert all(len(cells) >= 3 for cells in lines)
    fields = {(cells[0], cells[1]): cells[2] for cells in lines}
    assert fields[("task", "rows")] == "1" and fields[("task_expiry", "never")] == "1"
    assert fields[("task_expiry", "expired")] == "0"
    assert fields[("task_top_dag_by_rows", "etl")] == "1"
    assert fields[("asset", "rows")] == "1" and fields[("asset", "inactive_assets")] == "0"
    assert ["asset_top", "1", "1", "1", "active", "orders", "orders"] in lines
    assert sum(1 for cells in lines if cells[0] == "task_expiring_per_day") == CHART_DAYS


def test_stats_plain_shows_a_dash_where_nothing_applies(cli, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "0")
    lines = cli("stats", "--store", "asset", "-o", "plain").stdout.splitlines()
    assert "asset\tover_max_value_storage_bytes\t-" in lines and "asset\toldest_updated_at\t-" in lines
    assert not any(line.startswith("task") for line in lines)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_stats_filters_and_bad_input(cli):
    cli("set", "--dag-id", "etl", "--run-id", "r", "--task-id", "t", "k", "1")
    cli("set", "--dag-id", "other", "--run-id", "r", "--task-id", "t", "k", "1")
    doc = json.loads(cli("stats", "--dag-id", "etl", "-o", "json").stdout)
    assert doc["task"]["rows"] == 1 and doc["asset"] is None and doc["filter"] == {"dag_id": "etl"}
    bad = cli("stats", "--store", "tasks")
    assert bad.exit_code == 2
    assert bad.stderr == "statestore: error: unknown --store 'tasks': use task, dag_run or asset\n"
    nothing = cli("stats", "--store", "asset", "--dag-id", "etl", "-o", "table")
    assert nothing.exit_code == 0 and "no store selected" in nothing.stdout
    both = cli("stats", "--dag-id", "etl", "--asset-name", "orders")
    assert both.exit_code == 2 and both.stderr.count("\n") == 1


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_stats_needs_the_metastore_backend(cli, backends, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", f"{backends}.DictBackend")
    result = cli("stats")
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr == (
        f"statestore: error: `stats` needs the metastore backend; [state_store] backend is {backends}.DictBackend\n"
    )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_stats_table_folds_long_ids_whole_to_fit_80_columns(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    dag_id = "team_payments_" + "x" * 60 + "_reconciliation_hourly"  # 96 characters
    for i in range(3):
        cli("set", "--dag-id", dag_id, "--run-id", "r", "--task-id", "t", f"k{i}", '"a long value"')
    big = '"' + "v" * 100 + '"'  # one key, but the largest value: first by size, last by keys
    cli("set", "--dag-id", "small\x1b[31m", "--run-id", "r", "--task-id", "t", "k", big, "--retention", "3d")
    result = cli("stats", "-o", "table")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout
    cells = ["".join(line.split("│")[1].strip() for line in lines if "team_payments_x" in line or "x_reconc" in line)]
    assert cells == [dag_id * 2]  # by keys and by value size (the order differs, so two tables): whole, folded
    assert "\x1b" not in result.stdout and "small\\x1b[31m" in result.stdout  # stored text is shown escaped
    assert "dags with the most keys" in result.stdout and "dags with the largest values" in result.stdout


@pytest.mark.parametrize("largest", range(len(EXPIRY_BUCKETS)))
def test_every_expiry_bucket_is_exact_whichever_is_largest(db_url, largest):
    # On a split MySQL/MariaDB pass the bucket most sampled rows fall in is derived from the total instead
    # of counted: make each bucket the largest in turn, with one key in every other.
    moments = [NOW - DAY, NOW + DAY / 2, NOW + 3 * DAY, NOW + 10 * DAY, NOW + 90 * DAY, None]
    rows = [(f"dag_{i % 3}", "r1", f"big{i}", moments[largest], "1") for i in range(30)]
    rows += [("dag_x", "r1", f"one{b}", moment, "1") for b, moment in enumerate(moments) if b != largest]
    _put(db_url, rows)
    expected = {bucket: 30 if b == largest else 1 for b, bucket in enumerate(EXPIRY_BUCKETS)}
    for kw in ({"parallel_min_rows": 10**9}, {"parallel_min_rows": 1, "workers": 2}):
        stats = _stats(db_url, **kw)
        assert stats.task.expiry == expected, kw
        assert stats.task.rows == 35


@pytest.mark.parametrize("kw", [{"parallel_min_rows": 10**9}, {"parallel_min_rows": 1, "workers": 2}, {"filt": "t"}])
def test_dags_differing_by_a_trailing_space_are_counted_apart(db_url, kw):
    # MySQL/MariaDB group text ignoring trailing spaces unless told otherwise; every engine keeps them apart.
    _put(db_url, [("d", "r1", "k1", None, "1"), ("d", "r1", "k2", None, "1"), ("d ", "r2", "k1", None, "22")])
    filt = KeyFilter(task_id=kw.pop("filt")) if "filt" in kw else None
    task = _stats(db_url, filt, **kw).task
    assert task.dags == 2
    assert [(d.dag_id, d.rows, d.value_bytes) for d in task.top_dags_by_rows] == [("d", 2, 2), ("d ", 1, 2)]
