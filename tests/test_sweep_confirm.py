"""`assets sweep` deletes keys that never expire: it asks on a terminal as `clear` does, with the
count and the assets, needs --yes anywhere else (exit 2, nothing deleted), and a no is an answer."""

from __future__ import annotations

import pytest
from stores import sql

WATERMARK = "last_processed_partition_watermark_eu_west_1"  # 44 characters


def _inactive_assets(cli, db_url: str, *names: str) -> None:
    """Assets with a watermark each, then no dag defines them (Airflow removes their asset_active rows)."""
    for name in names:
        uri = f"s3://data-lake-prod/curated/{name}/"
        assert cli("set", "--asset-name", name, "--asset-uri", uri, WATERMARK, '"2026-11-30"').exit_code == 0
        sql(db_url, "DELETE FROM asset_active WHERE name = :n", n=name)


def _asset_keys(db_url: str) -> int:
    return sql(db_url, "SELECT count(*) FROM asset_state_store")[0][0]


def test_sweep_without_a_terminal_needs_yes_and_deletes_nothing(cli, db_url):
    _inactive_assets(cli, db_url, "orders_curated_daily_snapshot")
    result = cli("assets", "sweep")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "statestore: error: assets sweep deletes keys and stdin is not a terminal to confirm on; pass --yes\n"
    )
    assert _asset_keys(db_url) == 1
    assert cli("assets", "sweep", "--dry-run", "-o", "json").exit_code == 0  # a dry run needs no --yes
    assert cli("assets", "sweep", "--yes").exit_code == 0
    assert _asset_keys(db_url) == 0


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sweep_asks_at_a_terminal_with_the_count_and_the_assets(cli, db_url):
    from terminals import Terminal, terminal_env

    names = ("customers_dim_scd2", "invoices_curated_hourly", "orders_curated_daily_snapshot", "payments_raw")
    _inactive_assets(cli, db_url, *names)
    term = Terminal(["--conn", db_url, "assets", "sweep"], terminal_env(columns=200))
    term.wait_for(b"[y/N] ")
    question = (
        "Delete 4 keys (they never expire) of 4 inactive assets: customers_dim_scd2, invoices_curated_hourly, "
        "orders_curated_daily_snapshot and 1 more? [y/N] "
    )
    assert question.encode() in term.seen, term.seen
    term.type(b"n\n")
    status, screen = term.finish()
    assert status == 1 and screen.endswith("? [y/N] n\nstatestore: nothing deleted (answered no)\n"), screen
    assert _asset_keys(db_url) == 4

    term = Terminal(["--conn", db_url, "assets", "sweep", "-o", "plain"], terminal_env(columns=200))
    term.wait_for(b"[y/N] ")
    term.type(b"y\n")
    status, screen = term.finish()
    assert status == 0 and "deleted 4 keys of 4 inactive assets" in screen, screen
    assert _asset_keys(db_url) == 0


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sweep_question_breaks_between_words_at_80_columns(cli, db_url):
    """The question names the assets whole: at 80 columns it goes on between words, and each line leaves the
    column the answer's first letter would wrap at."""
    from terminals import Terminal, terminal_env

    names = ("orders_daily_partitions_legacy", "invoices_curated_hourly")
    _inactive_assets(cli, db_url, *names)
    term = Terminal(["--conn", db_url, "assets", "sweep"], terminal_env(columns=80))
    term.wait_for(b"[y/N] ")
    term.type(b"n\n")
    status, screen = term.finish()
    assert status == 1, screen
    lines = screen.splitlines()
    assert lines[-3:] == [
        "Delete 2 keys (they never expire) of 2 inactive assets:",
        "invoices_curated_hourly, orders_daily_partitions_legacy? [y/N] n",
        "statestore: nothing deleted (answered no)",
    ], screen


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_yes_sweeps_only_the_assets_the_question_named(cli, db_url):
    """An asset that goes inactive while the question waits (a dag stops defining it meanwhile) was not asked
    about: it keeps its keys until the next sweep names it."""
    from terminals import Terminal, terminal_env

    _inactive_assets(cli, db_url, "orders_curated_daily_snapshot")
    uri = "s3://data-lake-prod/curated/payments_raw/"
    assert cli("set", "--asset-name", "payments_raw", "--asset-uri", uri, WATERMARK, '"2026-11-29"').exit_code == 0
    term = Terminal(["--conn", db_url, "assets", "sweep", "-o", "plain"], terminal_env(columns=200))
    term.wait_for(b"[y/N] ")
    sql(db_url, "DELETE FROM asset_active WHERE name = 'payments_raw'")
    term.type(b"y\n")
    status, screen = term.finish()
    question = "Delete 1 key (they never expire) of 1 inactive asset: orders_curated_daily_snapshot? [y/N] y\n"
    assert status == 0 and question in screen, screen
    assert screen.endswith("deleted 1 key of 1 inactive asset in 1 batch\n"), screen
    left = sql(db_url, "SELECT a.name FROM asset_state_store s JOIN asset a ON a.id = s.asset_id")
    assert left == [("payments_raw",)]
