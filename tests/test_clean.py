"""clean and clean --dry-run: what goes, what stays, batching, and the dry run's promise."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from stores import sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine

PAST = datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)


def seed(db_url: str, rows: list[tuple[str, str, str, int, str, datetime | None]]) -> MetastoreBackend:
    backend = MetastoreBackend(make_engine(db_url))
    for dag_id, run_id, task_id, map_index, key, expires_at in rows:
        backend.set(TaskScope(dag_id, run_id, task_id, map_index), key, '"v"', expires_at=expires_at)
    return backend


ALL_ENGINES = True  # every test here runs on SQLite, PostgreSQL and MariaDB


def identities(db_url: str) -> set[tuple]:
    return set(sql(db_url, "SELECT dag_id, run_id, task_id, map_index, {key} FROM task_state_store"))


def mixed_rows(n_expired: int = 12) -> list[tuple]:
    now = datetime.now(UTC)
    rows = [
        (f"dag_{i % 3}", f"run_{i % 2}", f"task_{i % 4}", (i % 3) - 1, f"key_{i}", PAST + timedelta(minutes=i))
        for i in range(n_expired)
    ]
    rows += [
        ("dag_0", "run_0", "task_0", -1, "future", now + timedelta(hours=1)),
        ("dag_0", "run_0", "task_0", -1, "never", None),
        ("dag_9", "run_0", "task_0", -1, "future2", now + timedelta(days=30)),
    ]
    return rows


def test_dry_run_lists_exactly_what_the_real_run_deletes(cli, db_url):
    seed(db_url, mixed_rows())
    before = identities(db_url)
    dry = cli("clean", "--dry-run", "--output", "json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True
    assert plan["would_delete"] == len(plan["rows"]) == 12
    promised = {(r["dag_id"], r["run_id"], r["task_id"], r["map_index"], r["key"]) for r in plan["rows"]}
    assert identities(db_url) == before  # the dry run wrote nothing
    real = cli("clean", "--output", "json")
    assert real.exit_code == 0, real.output
    report = json.loads(real.stdout)
    assert report["dry_run"] is False and report["deleted"] == 12
    assert before - identities(db_url) == promised
    assert {k for *_, k in identities(db_url)} == {"future", "never", "future2"}


def test_dry_run_rows_are_sorted_and_carry_expiry(cli, db_url):
    seed(db_url, [("b", "r", "t", -1, "k", PAST), ("a", "r", "t", 1, "z", PAST), ("a", "r", "t", 0, "y", PAST)])
    rows = json.loads(cli("clean", "--dry-run", "-o", "json").stdout)["rows"]
    assert [(r["dag_id"], r["map_index"], r["key"]) for r in rows] == [("a", 0, "y"), ("a", 1, "z"), ("b", -1, "k")]
    assert rows[0] == {
        "dag_id": "a",
        "run_id": "r",
        "task_id": "t",
        "map_index": 0,
        "key": "y",
        "expires_at": "2020-01-02T03:04:05+00:00",
    }


@pytest.mark.parametrize("batch_size", [0, 1, 3, 7, 12, 1000])
def test_every_batch_size_reaches_the_same_end_state(cli, db_url, batch_size):
    seed(db_url, mixed_rows(12))
    result = cli("clean", "--batch-size", str(batch_size), "-o", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["deleted"] == 12
    assert report["batch_size"] == batch_size
    assert report["batches"] == (1 if batch_size == 0 else math.ceil(12 / batch_size))
    assert {k for *_, k in identities(db_url)} == {"future", "never", "future2"}


def test_batch_size_comes_from_config_unless_overridden(cli, db_url, monkeypatch):
    seed(db_url, mixed_rows(10))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "4")
    report = json.loads(cli("clean", "-o", "json").stdout)
    assert (report["deleted"], report["batches"], report["batch_size"]) == (10, 3, 4)
    seed(db_url, mixed_rows(10))
    report = json.loads(cli("clean", "--batch-size", "0", "-o", "json").stdout)
    assert (report["deleted"], report["batches"], report["batch_size"]) == (10, 1, 0)


def test_negative_batch_size_is_a_usage_error(cli, db_url):
    seed(db_url, mixed_rows(2))
    result = cli("clean", "--batch-size", "-1")
    assert result.exit_code == 2
    assert identities(db_url) and len(identities(db_url)) == 5


def test_asset_rows_and_never_expiring_rows_survive(cli, db_url):
    backend = seed(db_url, [("d", "r", "t", -1, "old", PAST), ("d", "r", "t", -1, "keep", None)])
    backend.set(AssetScope(name="orders"), "watermark", "1")
    result = cli("clean")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("deleted 1 expired task key in one statement (expired before ")
    assert identities(db_url) == {("d", "r", "t", -1, "keep")}
    assert backend.get(AssetScope(name="orders"), "watermark") == "1"


def test_expiry_written_in_another_time_zone_is_compared_in_utc(cli, db_url):
    plus5 = timezone(timedelta(hours=5))
    now_local = datetime.now(plus5)
    seed(
        db_url,
        [
            ("d", "r", "t", -1, "expired", now_local - timedelta(minutes=10)),
            ("d", "r", "t", -1, "alive", now_local + timedelta(minutes=10)),
        ],
    )
    plan = json.loads(cli("clean", "--dry-run", "-o", "json").stdout)
    assert [r["key"] for r in plan["rows"]] == ["expired"]


def test_empty_store(cli):
    empty = cli("clean", "--dry-run", "-o", "plain")
    assert (empty.stdout, empty.stderr.startswith("dry run: 0 expired task keys would be deleted")) == ("", True)
    assert json.loads(cli("clean", "-o", "json").stdout)["deleted"] == 0


def _fixed_cutoff(text: str) -> str:
    """The output as a person sees it: trailing padding dropped, the moving cutoff replaced."""
    text = "".join(line.rstrip() + "\n" for line in text.splitlines())
    return re.sub(r"expired before \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "expired before <now>", text)


def test_dry_run_terminal_view_groups_by_dag_run_task_and_map_index(cli, db_url):
    seed(
        db_url,
        [
            ("etl", "manual__1", "extract", -1, "job_id", PAST),
            ("etl", "manual__1", "extract", -1, "offset", PAST),
            ("etl", "manual__1", "load", 0, "batch", PAST),
            ("etl", "manual__1", "load", 1, "batch", PAST),
            ("etl", "scheduled__2", "extract", -1, "job_id", PAST),
            ("report", "r1", "send", -1, "[red]mail[/red]", PAST),
        ],
    )
    result = cli("clean", "--dry-run", "-o", "table")
    assert result.exit_code == 0, result.output
    assert _fixed_cutoff(result.stdout) == (
        "dag_id etl  run_id manual__1\n"
        "┏━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ task_id ┃ map_index ┃ keys ┃ key    ┃ expires_at              ┃\n"
        "┡━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ extract │        -1 │    2 │ job_id │ 2020-01-02 03:04:05 UTC │\n"
        "│         │           │      │ offset │ 2020-01-02 03:04:05 UTC │\n"
        "│ load    │         0 │    1 │ batch  │ 2020-01-02 03:04:05 UTC │\n"
        "│ load    │         1 │    1 │ batch  │ 2020-01-02 03:04:05 UTC │\n"
        "└─────────┴───────────┴──────┴────────┴─────────────────────────┘\n"
        "dag_id etl  run_id scheduled__2\n"
        "┏━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ task_id ┃ map_index ┃ keys ┃ key    ┃ expires_at              ┃\n"
        "┡━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ extract │        -1 │    1 │ job_id │ 2020-01-02 03:04:05 UTC │\n"
        "└─────────┴───────────┴──────┴────────┴─────────────────────────┘\n"
        "dag_id report  run_id r1\n"
        "┏━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ task_id ┃ map_index ┃ keys ┃ key             ┃ expires_at              ┃\n"
        "┡━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ send    │        -1 │    1 │ [red]mail[/red] │ 2020-01-02 03:04:05 UTC │\n"
        "└─────────┴───────────┴──────┴─────────────────┴─────────────────────────┘\n"
        "expired keys per dag\n"
        "┏━━━━━━━━┳━━━━━━┳━━━━━━━━━━━┳━━━━━━┓\n"
        "┃ dag_id ┃ runs ┃ instances ┃ keys ┃\n"
        "┡━━━━━━━━╇━━━━━━╇━━━━━━━━━━━╇━━━━━━┩\n"
        "│ etl    │    2 │         4 │    5 │\n"
        "│ report │    1 │         1 │    1 │\n"
        "└────────┴──────┴───────────┴──────┘\n"
        "Dry run: 6 expired task keys would be deleted (expired before <now>). Nothing was\n"
        "deleted.\n"
    )
    assert len(identities(db_url)) == 6


def test_dry_run_terminal_view_collapses_long_listings_visibly(cli, db_url):
    seed(db_url, [("d", "r", "t", -1, f"k{i:03}", PAST) for i in range(130)])
    short = cli("clean", "--dry-run", "-o", "table").stdout
    assert short.count(" k0") + short.count(" k1") == 100
    assert "30 more rows not listed above; --all lists every row.\n" in short
    assert "│ d      │    1 │         1 │  130 │" in short
    full = cli("clean", "--dry-run", "--all", "-o", "table").stdout
    assert all(f" k{i:03} " in full for i in range(130))
    assert "more rows not listed" not in full


def test_dry_run_plain_output_is_one_line_per_row(cli, db_url):
    seed(db_url, [("d", "r", "t", 2, "k", PAST)])
    result = cli("clean", "--dry-run")  # not a terminal: plain
    assert result.stdout == "d\tr\tt\t2\tk\t2020-01-02 03:04:05 UTC\n"  # the rows only: `wc -l` counts them
    assert _fixed_cutoff(result.stderr) == "dry run: 1 expired task key would be deleted (expired before <now>)\n"


@pytest.mark.parametrize("dry_run", [True, False])
def test_custom_backend_is_skipped_with_a_message_and_exit_0(cli, db_url, backends, monkeypatch, dry_run):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", f"{backends}.DictBackend")
    seed(db_url, [("d", "r", "t", -1, "old", PAST)])
    flags = ["--dry-run"] if dry_run else []
    result = cli("clean", *flags)
    assert (result.exit_code, result.stdout) == (0, ""), result.output
    assert result.stderr == (
        "skipped: [state_store] backend is ss_test_backends.DictBackend, not the metastore backend: nothing to clean "
        "here; a custom backend runs its own BaseStoreBackend.cleanup()\n"
    )
    doc = json.loads(cli("clean", *flags, "-o", "json").stdout)
    assert doc["skipped"] is True and doc["dry_run"] is dry_run and "ss_test_backends.DictBackend" in doc["reason"]
    assert len(identities(db_url)) == 1


@pytest.mark.parametrize(
    "text", ["plain", 'quo"te\\back', "tab\tnew\nline\x1b", "del\x7f c1\x9b", "\u00e9\u6f22\U0001f600", "bidi\u202e"]
)
def test_streamed_dry_run_rows_are_exactly_json_dumps(text):
    """The hand-built JSON line of the streamed dry run equals safe_json() of the same object."""
    from statestore_cli.cli.output.clean_view import expired_row_json
    from statestore_cli.cli.output.safe_text import safe_json
    from statestore_cli.ops.cleanup import ExpiredRow

    row = ExpiredRow(text, text, text, 3, text, "2020-01-02T03:04:05.000001+00:00")
    fields = ("dag_id", "run_id", "task_id", "map_index", "key", "expires_at")
    assert expired_row_json(row) == safe_json({name: getattr(row, name) for name in fields})
    assert json.loads(expired_row_json(row))["key"] == text


@pytest.mark.parametrize(
    "stored, iso",
    [
        ("2020-01-02 03:04:05.000000", "2020-01-02T03:04:05+00:00"),
        ("2020-01-02 03:04:05.000120", "2020-01-02T03:04:05.000120+00:00"),
        ("2020-01-02 03:04:05", "2020-01-02T03:04:05+00:00"),
        (datetime(2020, 1, 2, 3, 4, 5, 6), "2020-01-02T03:04:05.000006+00:00"),
        (datetime(2020, 1, 2, 8, 4, 5, tzinfo=timezone(timedelta(hours=5))), "2020-01-02T03:04:05+00:00"),
    ],
)
def test_stored_timestamps_become_the_same_iso_text_on_every_engine(stored, iso):
    from statestore_cli.model.timestamps import iso_utc

    assert iso_utc(stored) == iso == datetime.fromisoformat(iso).isoformat()
