"""What people see of ``statestore stats`` at 80 and 120 columns, checked in as tests/expected/stats-*.txt.

The figures are computed at a fixed ``now`` on the realistic store plus keys expiring over the next weeks,
and handed to the render layer, as the command does with the current time.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from expected_output import assert_expected
from seeded_stores import OPERATOR_ASSET_URI, REALISTIC_RUNS, REALISTIC_UPDATED, seed_operator_store, seed_realistic
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.cli.output.render import Output
from statestore_cli.cli.output.stats_terminal import expiry_chart, folded, size
from statestore_cli.db.database import make_engine
from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.stats import DayCount, store_stats

ALL_ENGINES = True  # the same picture from every engine

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def _seed(url: str) -> None:
    seed_realistic(url)
    backend = MetastoreBackend(make_engine(url))
    scope = TaskScope("etl_orders_daily", REALISTIC_RUNS[0], "load_partition", 3)
    try:  # keys expiring on most days of the coming weeks, more of them in the first one
        for day in range(33):
            for n in range((day * 7) % 5 + (6 if day < 7 else 1) if day % 6 != 5 else 0):
                expires = NOW + timedelta(days=day, hours=n)
                backend.set(scope, f"partition_{day:02d}_{n}", '{"rows": 125000}', expires_at=expires)
    finally:
        backend.engine.dispose()
    moment: object = REALISTIC_UPDATED
    if url.startswith("sqlite"):
        moment = REALISTIC_UPDATED.strftime("%Y-%m-%d %H:%M:%S.%f")
    elif url.startswith(("mysql", "mariadb")):
        moment = REALISTIC_UPDATED.replace(tzinfo=None)
    sql(url, "UPDATE task_state_store SET updated_at = :moment", moment=moment)
    sql(url, "DELETE FROM asset_active WHERE name = 'watermark'")  # an asset no dag uses any more


@pytest.mark.parametrize("columns", [80, 120])
def test_stats_on_a_terminal(db_url, columns, monkeypatch, capsys):
    _seed(db_url)
    engine = make_engine(db_url)
    try:
        stats = store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=65535)
    finally:
        engine.dispose()
    monkeypatch.setenv("COLUMNS", str(columns))
    Output("table").stats(stats)
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) <= columns
    assert_expected(f"stats-{columns}.txt", shown)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("columns", [80, 120])
def test_stats_of_the_operators_store_show_ids_and_uris_whole(db_url, columns, monkeypatch, capsys):
    seed_operator_store(db_url)
    engine = make_engine(db_url)
    try:
        stats = store_stats(engine, KeyFilter(), NOW, max_value_storage_bytes=65535)
    finally:
        engine.dispose()
    monkeypatch.setenv("COLUMNS", str(columns))
    Output("table").stats(stats)
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) <= columns
    assert "…" not in shown
    asset_table = shown.split("asset keys per asset")[1].splitlines()
    rows = [line.split("│") for line in asset_table if line.startswith("│")]
    uris = "".join(cells[2].strip() for cells in rows)  # the asset table's uri cells, folded lines joined
    assert uris == OPERATOR_ASSET_URI + OPERATOR_ASSET_URI + "_legacy"
    assert_expected(f"operator_stats_{columns}.txt", shown)


def test_long_names_fold_whole():
    dag_id = "ml_feature_store_refresh_with_a_rather_long_dag_id"
    assert folded(dag_id, 50) == dag_id
    assert folded(dag_id, 21) == "ml_feature_store_refr\nesh_with_a_rather_lon\ng_dag_id"
    assert folded("漢字漢字漢字", 7) == "漢字漢\n字漢字"  # wide characters count two cells


def test_chart_fits_80_columns_and_marks_every_nonzero_day():
    days = [DayCount(date(2026, 12, 1) + timedelta(days=i), rows) for i, rows in enumerate([1_000_000, 1, 0] * 12)]
    lines = expiry_chart(days[:35], 80)
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("1.0M ┤█")  # the busiest day reaches the top
    bottom = lines[7]
    assert bottom[6:12] == "█ ▁   "  # a single key still shows, an empty day does not
    assert lines[-1].split() == ["12-01", "12-08", "12-15", "12-22", "12-29"]


def test_sizes_read_as_people_read_them():
    assert [size(n) for n in (0, 1023, 1024, 1536, 48 * 1024 * 1024)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "48.0 MiB",
    ]


def test_one_key_in_the_chart_is_one_key():
    from io import StringIO

    from rich.console import Console

    from statestore_cli.cli.output.stats_terminal import print_chart

    out = StringIO()
    days = [DayCount(date(2026, 12, 1) + timedelta(days=i), 1 if i == 3 else 0) for i in range(7)]
    print_chart(Console(file=out, width=80), days, 80)
    lines = out.getvalue().splitlines()
    assert lines[0] == "task keys expiring per day, the next 1 week (UTC days; today from now on)"
    assert lines[-1] == "1 key expires in the next 1 week; most on 2026-12-04 (1)"
