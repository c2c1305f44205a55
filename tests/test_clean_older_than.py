"""clean --older-than D and [state_store] state_cleanup_older_than: a grace window after expiry."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.backends.store import Store
from statestore_cli.db.database import make_engine

ALL_ENGINES = True


def seed_ages(db_url: str) -> None:
    """Keys that expired 3 days, 3 hours and 10 minutes ago, one expiring tomorrow and one that never does."""
    now = datetime.now(UTC)
    backend = MetastoreBackend(make_engine(db_url))
    for key, expires_at in (
        ("expired_3d", now - timedelta(days=3)),
        ("expired_3h", now - timedelta(hours=3)),
        ("expired_10m", now - timedelta(minutes=10)),
        ("tomorrow", now + timedelta(days=1)),
        ("never", None),
    ):
        scope = TaskScope("etl", "scheduled__2026-11-30T00:00:00+00:00", "submit", -1)
        backend.set(scope, key, "1", expires_at=expires_at)
    backend.engine.dispose()


def keys(db_url: str) -> set[str]:
    return {row[0] for row in sql(db_url, "SELECT {key} FROM task_state_store")}


@pytest.mark.parametrize(
    "older_than, gone",
    [
        ("1h", {"expired_3d", "expired_3h"}),
        ("2d", {"expired_3d"}),
        ("P1W", set()),
        ("0", {"expired_3d", "expired_3h", "expired_10m"}),
    ],
)
def test_dry_run_and_real_run_take_the_same_rows(cli, db_url, older_than, gone):
    seed_ages(db_url)
    started = datetime.now(UTC)
    dry = cli("clean", "--dry-run", "--older-than", older_than, "-o", "json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)
    assert {row["key"] for row in plan["rows"]} == gone and plan["would_delete"] == len(gone)
    assert len(keys(db_url)) == 5  # the dry run deleted nothing
    real = cli("clean", "--older-than", older_than, "-o", "json")
    assert real.exit_code == 0, real.output
    report = json.loads(real.stdout)
    assert report["deleted"] == len(gone)
    assert keys(db_url) == {"expired_3d", "expired_3h", "expired_10m", "tomorrow", "never"} - gone
    grace = {"1h": 3600, "2d": 172800, "P1W": 604800, "0": 0}[older_than]
    for doc in (plan, report):
        assert doc["older_than_seconds"] == grace and isinstance(doc["older_than_seconds"], int)
        cutoff = datetime.fromisoformat(doc["cutoff"])
        assert started - timedelta(seconds=grace) <= cutoff <= datetime.now(UTC) - timedelta(seconds=grace)


def test_the_config_option_sets_the_window_and_the_flag_overrides_it(cli, db_url, monkeypatch):
    seed_ages(db_url)
    monkeypatch.setenv("AIRFLOW__STATE_STORE__STATE_CLEANUP_OLDER_THAN", "1d")
    report = json.loads(cli("clean", "-o", "json").stdout)
    assert (report["deleted"], report["older_than_seconds"]) == (1, 86400)
    assert keys(db_url) == {"expired_3h", "expired_10m", "tomorrow", "never"}
    report = json.loads(cli("clean", "--older-than", "0", "-o", "json").stdout)
    assert (report["deleted"], report["older_than_seconds"]) == (2, 0)


def test_summaries_name_the_window(cli, db_url):
    seed_ages(db_url)
    dry = cli("clean", "--dry-run", "--older-than", "1d12h", "-o", "plain")
    assert re.fullmatch(
        r"etl\tscheduled__2026-11-30T00:00:00\+00:00\tsubmit\t-1\texpired_3d\t\S+ \S+ UTC\n", dry.stdout
    ), dry.output
    assert re.fullmatch(  # the sentence for people goes to stderr: stdout holds the records only
        r"dry run: 1 expired task key would be deleted "
        r"\(expired before \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, at least 1d12h ago\)\n",
        dry.stderr,
    ), dry.output
    table = cli("clean", "--dry-run", "--older-than", "90s", "-o", "table").stdout
    words = " ".join(table.split())  # as wrapped at the terminal's width, which never breaks the timestamp
    assert re.search(
        r"Dry run: 3 expired task keys would be deleted \(expired before "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, at least 1m30s ago\)\. Nothing was deleted\.$",
        words,
    ), table
    assert re.search(r"\d\d:\d\d:\d\d UTC, at least\n1m30s ago\)", table), table  # at 100 columns
    done = cli("clean", "--older-than", "1h", "-o", "plain")
    assert re.fullmatch(
        r"deleted 2 expired task keys in one statement \(expired before \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, "
        r"at least 1h ago\) in \d+\.\ds, [\d,]+ rows/s\n",
        done.stderr,
    ), done.output
    assert "older_than_seconds\t3600\n" in done.stdout, done.output  # the records on stdout


@pytest.mark.parametrize(
    "value, message",
    [
        ("-1d", "--older-than '-1d' is negative; use 0 or a duration such as 12h, 2d or P1D"),
        ("yesterday", "invalid --older-than 'yesterday': use a duration such as 30s, 5m or 1h"),
        ("", "invalid --older-than '': use a duration such as 30s, 5m or 1h"),
        ("1d 2h", "invalid --older-than '1d 2h': use a duration such as 30s, 5m or 1h"),
        ("99999999999999w", "--older-than '99999999999999w' is too long"),
        ("5000000w", "an age of 35000000d reaches back before the year 1"),
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_bad_window_is_a_usage_error_and_deletes_nothing(cli, db_url, value, message, dry_run):
    seed_ages(db_url)
    result = cli("clean", *(["--dry-run"] if dry_run else []), "--older-than", value)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"statestore: error: {message}\n")
    assert len(keys(db_url)) == 5


def test_a_bad_configured_window_is_a_config_error(cli, db_url, monkeypatch):
    seed_ages(db_url)
    monkeypatch.setenv("AIRFLOW__STATE_STORE__STATE_CLEANUP_OLDER_THAN", "-2h")
    result = cli("clean")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: environment variable AIRFLOW__STATE_STORE__STATE_CLEANUP_OLDER_THAN: invalid value "
        "'-2h' for [state_store] state_cleanup_older_than: expected 0 or a duration such as 12h, 2d, 1d12h or P1D\n"
    )
    assert len(keys(db_url)) == 5


def test_the_library_takes_the_window_too(db_url):
    from statestore_cli.config import load_settings
    from statestore_cli.ops import commands

    seed_ages(db_url)
    settings = load_settings(conn_override=db_url)
    now = datetime.now(UTC)
    plan = commands.plan_clean(Store.open(settings), now, older_than=timedelta(hours=1))
    assert plan.cutoff == now - timedelta(hours=1) and plan.older_than == timedelta(hours=1)
    assert sorted(row.key for row in plan.rows) == ["expired_3d", "expired_3h"]
    assert commands.count_expired_keys(Store.open(settings), now, timedelta(hours=1)) == 2
    report = commands.clean(Store.open(settings), now=now, older_than=timedelta(hours=1))
    assert not isinstance(report, commands.CleanSkipped)
    assert (report.deleted, report.cutoff, report.older_than) == (2, now - timedelta(hours=1), timedelta(hours=1))


def test_the_library_refuses_a_negative_window(db_url):
    from statestore_cli.config import load_settings
    from statestore_cli.errors import InvalidInputError
    from statestore_cli.ops import commands

    seed_ages(db_url)
    settings = load_settings(conn_override=db_url)
    with pytest.raises(InvalidInputError, match=r"^older_than must not be negative, got -3600 seconds$"):
        commands.clean(Store.open(settings), older_than=timedelta(hours=-1))
    assert len(keys(db_url)) == 5
