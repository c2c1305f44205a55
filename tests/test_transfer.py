"""`export` and `import`: the JSON Lines format, round trips between SQLite, PostgreSQL and MariaDB,
batches and their transactions, dry runs, and the line-numbered errors of bad input."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_running import run_cli, run_statestore_process
from expected_output import assert_expected
from seeded_stores import REALISTIC_KEY, realistic_keys, seed_realistic
from servers import engine_of
from stores import as_utc, isolated_database, sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.backends.metastore import UpdatedBy
from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine
from statestore_cli.errors import InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.commands import db_init
from statestore_cli.ops.transfer import StoreCounts, export_records, import_records

ALL_ENGINES = True  # every test with a store runs on SQLite, PostgreSQL and MariaDB

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = "scheduled__2026-11-30T00:00:00+00:00"


def task_line(key: str = "k", value: object = 1, **changes: object) -> str:
    record: dict[str, object] = {
        "store": "task",
        "dag_id": "etl",
        "run_id": RUN,
        "task_id": "submit",
        "map_index": -1,
        "key": key,
        "updated_at": "2026-11-29T10:15:30+00:00",
        "expires_at": "2026-12-29T10:15:30.250000+00:00",
        "value": value,
    }
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v != "<absent>"})


def asset_line(key: str = "watermark", value: object = "2026-11-29", **changes: object) -> str:
    record: dict[str, object] = {
        "store": "asset",
        "name": "orders",
        "uri": "s3://warehouse/orders",
        "key": key,
        "updated_at": "2026-11-29T10:15:30+00:00",
        "expires_at": None,
        "updated_by": {"kind": "task", "dag_id": "etl", "run_id": RUN, "task_id": "load", "map_index": 3},
        "value": value,
    }
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v != "<absent>"})


def count(url: str, table: str) -> int:
    return sql(url, f"SELECT count(*) FROM {table}")[0][0]


# -- the format --------------------------------------------------------------------------------------------
def test_export_of_the_realistic_store_is_exactly_this(cli, db_url):
    seed_realistic(db_url)
    result = cli("export")
    assert result.exit_code == 0, result.output
    assert_expected("export_realistic.jsonl", result.stdout)
    assert result.stderr == "exported 18 keys (16 task, 2 asset) to stdout in " + result.stderr.split(" in ")[-1]


def test_export_is_in_lists_order_and_takes_lists_filters(cli, db_url):
    seed_realistic(db_url)

    def identities(stdout: str) -> list[tuple]:
        docs = [json.loads(line) for line in stdout.splitlines()] if not stdout.startswith("[") else json.loads(stdout)
        return [(d["store"], d.get("dag_id"), d.get("run_id"), d.get("task_id"), d.get("name"), d["key"]) for d in docs]

    for filters in ([], ["--dag-id", "etl_orders_daily"], ["--store", "asset"], ["--key", REALISTIC_KEY]):
        exported = cli("export", *filters)
        assert exported.exit_code == 0, exported.output
        assert identities(exported.stdout) == identities(cli("list", *filters, "-o", "json").stdout)
    assert len(cli("export", "--dag-id", "etl_orders_daily").stdout.splitlines()) == 8
    both = cli("export", "--dag-id", "etl", "--asset-name", "orders")
    assert both.exit_code == 2 and "not both" in both.stderr


def test_export_records_are_the_library_view(db_url):
    seed_realistic(db_url)
    records = list(export_records(Store.open(load_settings(conn_override=db_url)), KeyFilter(store="asset")))
    assert [r["name"] for r in records] == ["s3://warehouse/orders/daily_partitions", "watermark"]
    assert records[0] == {
        "store": "asset",
        "name": "s3://warehouse/orders/daily_partitions",
        "uri": "s3://warehouse/orders/daily_partitions",
        "key": "last_processed_partition",
        "updated_at": "2026-11-29T10:15:30+00:00",
        "expires_at": None,
        "updated_by": {"kind": "api", "dag_id": None, "run_id": None, "task_id": None, "map_index": None},
        "value": "2026-11-29",
    }


def test_export_file_is_replaced_only_by_a_complete_export(cli, db_url, tmp_path):
    seed_realistic(db_url)
    target = tmp_path / "backup.jsonl"
    target.write_text("the previous backup\n")
    target.chmod(0o640)
    result = cli("export", "--file", str(target))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"exported 18 keys (16 task, 2 asset) to {target} in ")
    assert target.read_text() == cli("export").stdout
    assert target.stat().st_mode & 0o777 == 0o640

    # A value that is not JSON stops the export: the old file stays whole and no temporary file is left.
    sql(db_url, "UPDATE task_state_store SET value = '{broken' WHERE task_id = 'load_partition'")
    complete = target.read_text()
    failed = cli("export", "--file", str(target))
    assert failed.exit_code == 3
    assert failed.stderr.startswith("statestore: error: the value of key ")
    assert "is not valid JSON" in failed.stderr and "task_id=load_partition" in failed.stderr
    assert target.read_text() == complete
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    missing = cli("export", "--file", str(tmp_path / "no" / "such" / "dir" / "x.jsonl"))
    assert missing.exit_code == 2
    assert "cannot write" in missing.stderr and "No such file or directory" in missing.stderr


# -- the round trip ----------------------------------------------------------------------------------------
UNICODE_DAG = "données_日本_🚀"
NESTED = {"jobs": [{"id": "j-1", "tags": ["a", "é"], "ok": True}, {"id": "j-2", "retries": None}], "ratio": 0.1}


def seed_everything(url: str) -> None:
    """Realistic rows plus unicode ids, nested JSON, control and bidi characters, microseconds, and asset
    keys written by a task, a watcher, the API and nobody recorded."""
    seed_realistic(url)
    backend = MetastoreBackend(make_engine(url))
    try:
        scope = TaskScope(UNICODE_DAG, RUN, "émettre", 12)
        backend.set(scope, "clé 🔑", json.dumps(NESTED), expires_at=datetime(2027, 1, 2, 3, 4, 5, 123456, UTC))
        backend.set(scope, "controls", json.dumps("tab\there, DEL\x7f, bidi\u202e, nul\x00"), expires_at=None)
        backend.set(scope, "expired", "[1, 2.5, -3e-07]", expires_at=datetime(2026, 1, 1, tzinfo=UTC))
        writer = UpdatedBy("task", TaskScope(UNICODE_DAG, RUN, "émettre", 12))
        backend.set(AssetScope(name="café", uri="s3://café/x"), "by task", '{"n": 1}', updated_by=writer)
        backend.set(AssetScope(name="café", uri="s3://café/x"), "by watcher", "true", updated_by=UpdatedBy("watcher"))
        backend.set(AssetScope(name="café", uri="s3://café/x"), "nobody", '"x"')
    finally:
        backend.engine.dispose()
    sql(url, "UPDATE asset_state_store SET last_updated_by_kind = NULL WHERE {key} = 'nobody'")


def raw_rows(url: str) -> dict[str, list[tuple]]:
    """Every stored row that an import writes, in engine-neutral form (timestamps as UTC instants)."""
    task = sql(
        url,
        "SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t.{key}, t.value, t.updated_at, t.expires_at, dr.dag_id, "
        "dr.run_id "
        "FROM task_state_store t JOIN dag_run dr ON dr.id = t.dag_run_id",
    )
    assets = sql(
        url,
        "SELECT a.name, a.uri, s.{key}, s.value, s.updated_at, s.last_updated_by_kind, s.last_updated_by_dag_id, "
        "s.last_updated_by_run_id, s.last_updated_by_task_id, s.last_updated_by_map_index "
        "FROM asset_state_store s JOIN asset a ON a.id = s.asset_id",
    )
    return {
        "task": sorted((*r[:6], as_utc(r[6]), as_utc(r[7]), *r[8:]) for r in task),
        "asset": sorted((*r[:4], as_utc(r[4]), *r[5:]) for r in assets),
        "dag_run": sorted(sql(url, "SELECT dag_id, run_id FROM dag_run")),
        "asset_active": sorted(sql(url, "SELECT name, uri FROM asset_active")),
    }


@pytest.mark.slow  # on the database servers
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_round_trip_through_every_engine_gives_identical_rows_and_files(db_url, tmp_path):
    """SQLite -> PostgreSQL -> MariaDB -> a new SQLite store: every export byte for byte the same, every
    store's rows the same."""
    seed_everything(db_url)
    first = run_cli("export", conn=db_url)
    assert first.exit_code == 0, first.output
    assert "\x7f" not in first.stdout and "\u202e" not in first.stdout and "\\u202e" in first.stdout
    assert "données_日本_🚀" in first.stdout  # readable UTF-8, not \u escapes
    expected_rows = raw_rows(db_url)
    assert len(expected_rows["task"]) == 19 and len(expected_rows["asset"]) == 5
    exported, previous = first.stdout, db_url
    for position, engine in enumerate(("postgresql", "mariadb", "sqlite")):
        with isolated_database(engine, tmp_path / f"hop{position}") as url:
            (tmp_path / f"hop{position}").mkdir(exist_ok=True)
            db_init(Store.open(load_settings(conn_override=url), create_file=True))
            imported = run_cli("import", "-", "-o", "json", conn=url, input=exported)
            assert imported.exit_code == 0, f"{engine}: {imported.output}"
            summary = json.loads(imported.stdout)
            assert (summary["task"], summary["asset"]) == (
                {"inserted": 19, "updated": 0},
                {"inserted": 5, "updated": 0},
            )
            assert summary["created"] == {"dag_runs": 5, "assets": 3}
            again = run_cli("export", conn=url)
            assert again.stdout == exported, f"the export from {engine} differs from the one from {previous}"
            assert raw_rows(url) == expected_rows, engine
            previous = url


def test_import_over_the_same_rows_updates_them_and_changes_nothing(cli, db_url):
    seed_everything(db_url)
    exported = cli("export").stdout
    before = raw_rows(db_url)
    result = cli("import", "-", "-o", "json", input=exported)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["task"] == {"inserted": 0, "updated": 19} and doc["asset"] == {"inserted": 0, "updated": 5}
    assert doc["created"] == {"dag_runs": 0, "assets": 0}
    assert raw_rows(db_url) == before


def test_import_keeps_the_exported_timestamps_and_overwrites_newer_ones(cli, db_url):
    cli("set", "--dag-id", "etl", "--run-id", RUN, "--task-id", "submit", "k", '"new"', "--retention", "never")
    result = cli("import", "-", input=task_line(value="old") + "\n")
    assert result.exit_code == 0, result.output
    row = sql(db_url, "SELECT value, updated_at, expires_at FROM task_state_store")[0]
    assert (row[0], as_utc(row[1]), as_utc(row[2])) == (
        '"old"',
        datetime(2026, 11, 29, 10, 15, 30, tzinfo=UTC),
        datetime(2026, 12, 29, 10, 15, 30, 250000, tzinfo=UTC),
    )


def test_timestamps_in_other_offsets_are_stored_in_utc(cli, db_url):
    line = task_line(updated_at="2026-11-29T12:15:30+02:00", expires_at="2026-12-29T05:15:30.25-05:00")
    assert cli("import", "-", input=line).exit_code == 0
    doc = json.loads(cli("export").stdout)
    assert (doc["updated_at"], doc["expires_at"]) == ("2026-11-29T10:15:30+00:00", "2026-12-29T10:15:30.250000+00:00")


# -- summaries, dry runs, batches --------------------------------------------------------------------------
def test_plain_summary_on_stderr(cli, tmp_path):
    source = tmp_path / "keys.jsonl"
    source.write_text("\n".join([task_line("a"), task_line("b", map_index=2), "", asset_line()]) + "\n")
    dry = cli("import", "--dry-run", str(source))
    assert dry.exit_code == 0, dry.output
    assert dry.stdout == ""
    assert dry.stderr == (
        f"dry run: 3 keys from {source} checked in 1 batch of up to 1,000; nothing written\n"
        "  task keys: 2 to insert, 0 to update\n"
        "  asset keys: 1 to insert, 0 to update\n"
        "  would create 1 dag run and 1 asset\n"
    )
    assert cli("list", "-o", "json").stdout == "[]\n"
    done = cli("import", "--batch-size", "2", str(source))
    assert done.exit_code == 0, done.output
    first, *rest = done.stderr.splitlines()
    assert first.startswith(f"imported 3 keys from {source} in 2 batches of up to 2 (")
    assert rest == [
        "  task keys: 2 inserted, 0 updated",
        "  asset keys: 1 inserted, 0 updated",
        "  created 1 dag run and 1 asset",
    ]
    again = cli("import", "--dry-run", str(source), "-o", "json")
    doc = json.loads(again.stdout)
    assert doc == {
        "dry_run": True,
        "source": str(source),
        "lines": 4,
        "keys": 3,
        "batches": 1,
        "batch_size": 1000,
        "task": {"inserted": 0, "updated": 2},
        "dag_run": {"inserted": 0, "updated": 0},
        "asset": {"inserted": 0, "updated": 1},
        "created": {"dag_runs": 0, "assets": 0},
        "elapsed_seconds": doc["elapsed_seconds"],
    }
    assert again.stderr == ""


def test_dry_run_counts_a_new_run_once_across_batches(db_url):
    lines = [task_line(f"k{i}") for i in range(5)]
    summary = import_records(Store.open(load_settings(conn_override=db_url)), lines, batch_size=2, dry_run=True)
    assert (summary.batches, summary.task, summary.dag_runs_created) == (3, StoreCounts(5, 0), 1)
    assert count(db_url, "dag_run") == 0


def test_a_key_given_twice_in_one_batch_is_written_once_as_the_later_line_says(db_url):
    lines = [task_line(value="first"), task_line(value="second")]
    summary = import_records(Store.open(load_settings(conn_override=db_url)), lines)
    assert summary.task == StoreCounts(1, 0)
    assert sql(db_url, "SELECT value FROM task_state_store") == [('"second"',)]


def test_bad_line_stops_the_import_and_keeps_the_committed_batches(cli, db_url, tmp_path):
    lines = [task_line(f"k{i}") for i in range(1, 5)] + [task_line("k5", map_index="3"), task_line("k6")]
    source = tmp_path / "keys.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = cli("import", "--batch-size", "2", str(source))
    assert result.exit_code == 2
    assert result.stderr == (
        'statestore: error: line 5: map_index must be an integer, -1 or more, got "3"; '
        "lines 1-4 were imported, nothing after\n"
    )
    assert sorted(r[0] for r in sql(db_url, "SELECT {key} FROM task_state_store")) == ["k1", "k2", "k3", "k4"]


def test_a_failing_batch_writes_nothing_of_itself(cli, db_url):
    # Line 3 is valid on its own but names an asset that clashes with line 1's: its batch (lines 3-4) is
    # rolled back whole, the first batch stays.
    lines = [asset_line("a"), asset_line("b"), task_line("c"), asset_line("d", uri="s3://elsewhere")]
    result = cli("import", "--batch-size", "2", "-", input="\n".join(lines))
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: line 4: asset name=orders uri=s3://elsewhere clashes with the active asset "
        "name=orders uri=s3://warehouse/orders: an active asset's name and uri are each unique; "
        "lines 1-2 were imported, nothing after\n"
    )
    assert count(db_url, "asset_state_store") == 2
    assert count(db_url, "task_state_store") == 0 and count(db_url, "dag_run") == 0


def test_the_first_bad_line_says_nothing_was_imported(cli, db_url):
    result = cli("import", "-", input="not json\n")
    assert result.exit_code == 2
    assert result.stderr == ("statestore: error: line 1: not valid JSON (Expecting value); nothing was imported\n")
    dry = cli("import", "--dry-run", "-", input=task_line() + "\n[1]\n")
    assert dry.stderr == (
        "statestore: error: line 2: expected a JSON object, got an array; nothing was written (dry run)\n"
    )


BAD_LINES = [
    ("{", "not valid JSON (Expecting property name enclosed in double quotes)"),
    ('{"value": NaN}', "not valid JSON (NaN is not a JSON number)"),
    ("42", "expected a JSON object, got a number"),
    (json.dumps({"key": "k"}), 'a key needs store ("task", "dag_run" or "asset"): missing'),
    (task_line(store="tasks"), 'store must be "task", "dag_run" or "asset", got "tasks"'),
    (task_line(run_id="<absent>", expires_at="<absent>"), "a task key needs run_id, expires_at: missing"),
    (
        task_line(expire_at=None),
        "unknown field 'expire_at' in a task key (its fields: store, dag_id, run_id, "
        "task_id, region_id (optional), map_index, key, updated_at, expires_at, value)",
    ),
    (task_line(dag_id=""), 'dag_id must be a non-empty string, got ""'),
    (task_line(task_id=7), "task_id must be a non-empty string, got 7"),
    (task_line(key="k" * 513), "key is 513 characters long; the limit is 512"),
    (task_line(map_index=True), "map_index must be an integer, -1 or more, got true"),
    (task_line(map_index=-2), "map_index must be an integer, -1 or more, got -2"),
    (task_line(value=None), "value is JSON null, which cannot be stored; leave the key out instead"),
    (
        task_line(updated_at="2026-11-29T10:15:30"),
        "updated_at '2026-11-29T10:15:30' has no UTC offset; add one, e.g. 2026-11-29T10:15:30+00:00",
    ),
    (task_line(expires_at="tomorrow"), "expires_at 'tomorrow' is not an ISO 8601 timestamp"),
    (
        task_line(expires_at="0001-01-01T00:00:00+14:00"),
        "expires_at '0001-01-01T00:00:00+14:00' is outside the years 1 to 9999 in UTC",
    ),
    (
        task_line(updated_at="9999-12-31T23:59:59-14:00"),
        "updated_at '9999-12-31T23:59:59-14:00' is outside the years 1 to 9999 in UTC",
    ),
    (
        task_line(value="<deep>").replace('"<deep>"', "[" * 100_000 + "]" * 100_000),
        "its value nests arrays or objects more than 512 levels deep; store a flatter value",
    ),
    (
        task_line(value="<deep>").replace('"<deep>"', '{"a": ' * 513 + "1" + "}" * 513),
        "its value nests arrays or objects more than 512 levels deep; store a flatter value",
    ),
    (task_line(updated_at=1764410130), "updated_at must be an ISO 8601 timestamp string, got 1764410130"),
    (task_line(key="a\x00b"), "key holds a NUL character, which PostgreSQL cannot store"),
    (task_line(key="\ud800"), "key holds a lone surrogate escape, which no database stores"),
    (
        asset_line(expires_at="2027-01-01T00:00:00+00:00"),
        'asset keys never expire: expires_at must be null, got "2027-01-01T00:00:00+00:00"',
    ),
    (asset_line(updated_by="task"), "updated_by must be an object or null, got a string"),
    (
        asset_line(updated_by={"kind": "cron", "dag_id": None, "run_id": None, "task_id": None, "map_index": None}),
        'updated_by.kind must be one of task, watcher, api or null, got "cron"',
    ),
    (asset_line(updated_by={"kind": "api"}), "updated_by needs dag_id, run_id, task_id, map_index: missing"),
]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("line", "problem"), BAD_LINES, ids=range(len(BAD_LINES)))
def test_each_bad_record_is_named_by_its_line(cli, db_url, line, problem):
    result = cli("import", "-", input=task_line("fine") + "\n" + line + "\n")
    assert result.exit_code == 2
    assert result.stderr == f"statestore: error: line 2: {problem}; nothing was imported\n"
    assert count(db_url, "task_state_store") == 0


def test_oversized_value_is_refused(cli, db_url, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "20")
    result = cli("import", "-", input=task_line(value="x" * 18) + "\n" + task_line(value="x" * 19) + "\n")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: line 2: value is 21 bytes, over [state_store] max_value_storage_bytes = 20; "
        "raise the limit or leave the key out; nothing was imported\n"
    )


def test_a_value_nested_as_deep_as_set_takes_it_round_trips(cli, db_url):
    # 512 levels, the most `set` takes; brackets inside strings do not count.
    deep = "[" * 511 + '"[[[{{{"' + "]" * 511
    assert cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k", deep).exit_code == 0
    exported = cli("export").stdout
    assert cli("clear", "--dag-id", "d", "--yes").exit_code == 0
    result = cli("import", "-", input=exported)
    assert result.exit_code == 0, result.output
    assert (
        cli("get", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k").stdout
        == json.dumps(json.loads(deep)) + "\n"
    )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_stored_value_nested_too_deep_is_one_line_for_export_and_get(cli, db_url):
    # Written by something else than statestore: 2,000 levels, past Python's recursion limit.
    task = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")
    assert cli("set", *task, "k", "1").exit_code == 0
    with engine_of(db_url).begin() as conn:
        conn.exec_driver_sql("UPDATE task_state_store SET value = ?", ("[" * 2000 + "]" * 2000,))
    result = cli("export")
    assert result.exit_code == 3
    assert result.stderr == (
        "statestore: error: the value of key 'k' for dag_id=d run_id=r task_id=t is not valid JSON (it nests "
        "arrays or objects more than 512 levels deep, more than an import reads); fix or delete that key, or "
        "leave it out with the export's filters\n"
    )
    got = run_statestore_process("--conn", db_url, "get", *task, "k")  # the fast path, as a user runs it
    assert got.exit_code == 3 and got.stderr.count("\n") == 1 and "Traceback" not in got.stderr, got.output


LIMIT_10 = 10 + (1 << 20)  # the line limit with max_value_storage_bytes = 10: the value, and 1 MiB for the rest


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_line_longer_than_the_limit_is_refused_by_its_number(cli, db_url, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "10")
    at_limit = task_line(value="<v>").replace('"<v>"', " " * (LIMIT_10 - len(task_line(value=1))) + "1")
    assert len(at_limit) == LIMIT_10
    result = cli("import", "-", input=task_line("fine") + "\n" + at_limit + "\n")
    assert result.exit_code == 0, result.output  # as long as a line may be, line feed not counted
    over = at_limit.replace(" 1}", "  1}")
    result = cli("import", "-", input=task_line("fine") + "\n" + over + "\n" + task_line("after") + "\n")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: line 2: longer than 1,048,586 bytes, the most a line may hold (a value of "
        "[state_store] max_value_storage_bytes = 10, and 1 MiB for the other fields); raise "
        "max_value_storage_bytes to import larger values; nothing was imported\n"
    )
    assert sorted(sql(db_url, "SELECT {key} FROM task_state_store")) == [("fine",), ("k",)]  # the first import's


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_line_too_long_is_refused_before_it_is_read_whole(db_url, tmp_path):
    # 8 MiB without a line feed: the import reads no more of it than the limit and one byte.
    source = tmp_path / "long.jsonl"
    source.write_bytes(task_line("fine").encode() + b"\n" + b'{"store": "task", "value": "' + b"x" * (8 << 20))
    settings = load_settings(conn_override=db_url, environ={"AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES": "10"})
    with source.open("rb") as stream:
        with pytest.raises(InvalidInputError, match=r"^line 2: longer than 1,048,586 bytes"):
            import_records(Store.open(settings), stream)
        assert stream.tell() == len(task_line("fine")) + 1 + LIMIT_10 + 1
    assert count(db_url, "task_state_store") == 0


@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_what_only_mysql_cannot_hold_is_refused_by_line(cli, db_url):
    late = cli("import", "-", input=task_line(expires_at="2040-01-01T00:00:00+00:00"))
    assert late.exit_code == 2
    assert late.stderr == (
        "statestore: error: line 1: expires_at 2040-01-01T00:00:00+00:00 is outside what a MySQL TIMESTAMP holds "
        "(1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC); nothing was imported\n"
    )
    wide = cli("import", "-", input=asset_line(name="注文"))
    assert wide.exit_code == 2
    assert "line 1: asset name has characters MySQL's latin1 asset columns cannot hold" in wide.stderr


def test_unreadable_file_and_bad_batch_size(cli, tmp_path):
    missing = cli("import", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 2
    assert missing.stderr == f"statestore: error: cannot read {tmp_path / 'nope.jsonl'}: No such file or directory\n"
    zero = cli("import", "--batch-size", "0", "-", input="")
    assert zero.exit_code == 2 and "--batch-size" in zero.stderr


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_library_checks_batch_size(db_url):
    from statestore_cli.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="batch_size must be 1 to 100,000, got 0"):
        import_records(Store.open(load_settings(conn_override=db_url)), [], batch_size=0)


def test_empty_input_imports_nothing(cli):
    result = cli("import", "-", "-o", "json", input="")
    doc = json.loads(result.stdout)
    assert (doc["lines"], doc["keys"], doc["batches"]) == (0, 0, 0)


# -- an Airflow database ------------------------------------------------------------------------------------
@pytest.fixture
def airflow_db(tmp_path: Path) -> tuple[str, Callable[[str, str], None]]:
    path = tmp_path / "airflow.db"
    shutil.copyfile(FIXTURES / "airflow-3.3.2.sqlite", path)
    path.chmod(0o644)

    def add_run(dag_id: str, run_id: str) -> None:
        with sqlite3.connect(path) as conn:
            conn.execute(
                "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
                "VALUES (?, ?, 'manual', '2026-11-01 00:00:00.000000', 0, 'not_started')",
                (dag_id, run_id),
            )

    return f"sqlite:///{path}", add_run


def test_airflow_database_needs_the_runs_and_assets_to_exist(airflow_db):
    url, add_run = airflow_db
    lines = "\n".join([task_line("a"), task_line("b", dag_id="other")]) + "\n"
    refused = run_cli("import", "-", conn=url, input=lines)
    assert refused.exit_code == 2
    assert refused.stderr == (
        f"statestore: error: line 1: no dag run dag_id=etl run_id={RUN} in this Airflow database; "
        "task keys can only be imported for runs Airflow created; nothing was imported\n"
    )
    add_run("etl", RUN)
    refused = run_cli("import", "--dry-run", "-", conn=url, input=lines)
    assert refused.exit_code == 2 and "line 2: no dag run dag_id=other" in refused.stderr
    add_run("other", RUN)
    assert run_cli("import", "-", conn=url, input=lines).exit_code == 0
    assert count(url, "task_state_store") == 2 and count(url, "dag_run") == 2
    refused = run_cli("import", "-", conn=url, input=asset_line())
    assert refused.exit_code == 2
    assert "line 1: no asset name=orders uri=s3://warehouse/orders in this Airflow database" in refused.stderr
    assert count(url, "asset") == 0


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_realistic_keys_helper_matches_the_export(cli, db_url):
    seed_realistic(db_url)
    exported = [json.loads(line) for line in cli("export", "--store", "task").stdout.splitlines()]
    expected = sorted((d, r, t, m, k) for d, r, t, m, k, _ in realistic_keys())
    assert [(e["dag_id"], e["run_id"], e["task_id"], e["map_index"], e["key"]) for e in exported] == expected


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_ctrl_c_says_which_lines_were_imported(db_url):
    from statestore_cli.errors import InterruptedByUser

    def lines():
        yield from (task_line(f"k{i}") for i in range(1, 6))
        raise KeyboardInterrupt

    with pytest.raises(InterruptedByUser, match=r"^interrupted; lines 1-4 were imported, nothing after$"):
        import_records(Store.open(load_settings(conn_override=db_url)), lines(), batch_size=2)
    assert count(db_url, "task_state_store") == 4


def test_import_into_a_store_without_the_schema_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    sqlite3.connect(tmp_path / "empty.db").close()
    result = run_cli("import", "-", conn=url, input=task_line())
    assert result.exit_code == 3
    assert result.stderr.startswith("statestore: error: the state store tables are missing in sqlite:///")
    assert result.stderr.endswith(
        f"; to create them here, run `statestore --conn {url} db init`; nothing was imported\n"
    )


@pytest.mark.parametrize(
    "second, message",
    [
        ({"uri": "s3://elsewhere"}, "name=orders uri=s3://elsewhere shares its name"),
        ({"name": "orders_v2"}, "name=orders_v2 uri=s3://warehouse/orders shares its uri"),
    ],
)
@pytest.mark.parametrize("batch_size, dry_run", [(1, True), (10, True), (10, False)])
def test_two_new_assets_sharing_a_name_or_uri_are_refused(cli, db_url, second, message, batch_size, dry_run):
    # Only one of them could be active, and a sweep deletes an inactive asset's keys. In one batch the real
    # run would leave the second one inactive; the dry run must catch it across batches too, where the real
    # run stops at the later batch (the clash with an active asset above).
    lines = [asset_line("a"), task_line("t"), asset_line("b", **second)]
    dry = ["--dry-run"] if dry_run else []
    result = cli("import", "--batch-size", str(batch_size), *dry, "-", input="\n".join(lines))
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: line 3: asset {message} with the asset name=orders uri=s3://warehouse/orders "
        "created by line 1: an active asset's name and uri are each unique; "
        f"{'nothing was written (dry run)' if dry_run else 'nothing was imported'}\n"
    )
    assert count(db_url, "asset") == 0 and count(db_url, "asset_state_store") == 0
    assert count(db_url, "task_state_store") == 0
