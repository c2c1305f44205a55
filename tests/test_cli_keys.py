"""get / set / delete / clear / list through the CLI, on a real SQLite store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from stores import sql as _rows

TASK = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract")
ASSET = ("--asset-name", "orders")


ALL_ENGINES = True  # every test here runs on SQLite, PostgreSQL and MariaDB


# -- set and get ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw, expected",
    [
        ('{"job_id": "abc", "n": 3}', {"job_id": "abc", "n": 3}),
        ("[1, 2.5, true]", [1, 2.5, True]),
        ("42", 42),
        ('"text"', "text"),
        ("false", False),
        ('{"emoji": "\u00e9\u6f22\U0001f600"}', {"emoji": "\u00e9\u6f22\U0001f600"}),
    ],
)
def test_set_then_get_returns_the_json_value(cli, raw, expected):
    result = cli("set", *TASK, "k", raw)
    assert result.exit_code == 0, result.output
    result = cli("get", *TASK, "k")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected
    assert result.stderr == ""


def test_get_plain_output_is_compact_json_and_table_output_is_indented(cli):
    cli("set", *TASK, "k", '{"a": [1, 2]}')
    assert cli("get", *TASK, "k", "-o", "plain").stdout == '{"a": [1, 2]}\n'
    assert cli("get", *TASK, "k", "-o", "table").stdout == '{\n  "a": [\n    1,\n    2\n  ]\n}\n'


def test_get_json_output_carries_scope_and_timestamps(cli):
    before = datetime.now(UTC)
    cli("set", *TASK, "--map-index", "4", "k", "[1]", "--retention", "6h")
    result = cli("get", *TASK, "--map-index", "4", "k", "--output", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {k: doc[k] for k in ("store", "dag_id", "run_id", "task_id", "map_index", "key", "value")} == {
        "store": "task",
        "dag_id": "etl",
        "run_id": "manual__1",
        "task_id": "extract",
        "map_index": 4,
        "key": "k",
        "value": [1],
    }
    updated = datetime.fromisoformat(doc["updated_at"])
    expires = datetime.fromisoformat(doc["expires_at"])
    assert before <= updated <= datetime.now(UTC)
    assert expires - updated == pytest.approx(timedelta(hours=6), abs=timedelta(seconds=2))


def test_set_replaces_the_value_and_the_expiry_in_place(cli, db_url):
    cli("set", *TASK, "k", "1", "--retention", "1h")
    cli("set", *TASK, "k", "2", "--retention", "never")
    assert _rows(db_url, "SELECT value, expires_at FROM task_state_store") == [("2", None)]
    assert json.loads(cli("get", *TASK, "k").stdout) == 2


def test_string_flag_stores_the_text_as_a_json_string(cli):
    assert cli("set", *TASK, "k", "not json", "--string").exit_code == 0
    assert json.loads(cli("get", *TASK, "k").stdout) == "not json"


def test_value_dash_reads_stdin(cli):
    result = cli("set", *TASK, "k", "-", input='{"from": "stdin"}\n')
    assert result.exit_code == 0, result.output
    assert json.loads(cli("get", *TASK, "k").stdout) == {"from": "stdin"}


@pytest.mark.parametrize(
    "value, message",
    [
        ("null", "VALUE is JSON null, which cannot be stored; delete the key instead"),
        ("{oops", "VALUE is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ],
)
def test_bad_values_are_refused_with_one_line_and_nothing_written(cli, db_url, value, message):
    result = cli("set", *TASK, "k", value)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"statestore: error: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert _rows(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]


def test_value_over_max_value_storage_bytes_is_refused(cli, db_url, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "10")
    result = cli("set", *TASK, "k", '"0123456789"')  # 12 bytes with the quotes
    assert result.exit_code == 2, result.output
    assert "12 bytes, over [state_store] max_value_storage_bytes = 10" in result.stderr
    assert _rows(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]
    assert cli("set", *TASK, "k", '"01234567"').exit_code == 0  # exactly 10 bytes is allowed


def test_get_missing_key_exits_1_with_message_on_stderr(cli):
    assert cli("set", *TASK, "present", "1").exit_code == 0  # the run exists: only the key is missing
    result = cli("get", *TASK, "absent")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "statestore: error: no key 'absent' for dag_id=etl run_id=manual__1 task_id=extract map_index=-1\n"
    )


def test_keys_and_ids_are_case_sensitive_and_map_indices_separate(cli):
    cli("set", *TASK, "Key", "1")
    cli("set", *TASK, "key", "2")
    cli("set", *TASK, "--map-index", "0", "key", "3")
    assert json.loads(cli("get", *TASK, "Key").stdout) == 1
    assert json.loads(cli("get", *TASK, "key").stdout) == 2
    assert json.loads(cli("get", *TASK, "--map-index", "0", "key").stdout) == 3
    assert cli("get", "--dag-id", "ETL", "--run-id", "manual__1", "--task-id", "extract", "key").exit_code == 1


# -- retention --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "retention, seconds",
    [("90s", 90), ("15m", 900), ("6h", 21600), ("7d", 604800), ("1d12h", 129600), ("P7D", 604800), ("PT6H", 21600)],
)
def test_retention_sets_expiry_relative_to_write_time(cli, retention, seconds):
    cli("set", *TASK, "k", "1", "--retention", retention)
    doc = json.loads(cli("get", *TASK, "k", "-o", "json").stdout)
    lifetime = datetime.fromisoformat(doc["expires_at"]) - datetime.fromisoformat(doc["updated_at"])
    assert lifetime == pytest.approx(timedelta(seconds=seconds), abs=timedelta(seconds=2))


def test_retention_never_and_default_retention_days(cli, monkeypatch):
    cli("set", *TASK, "forever", "1", "--retention", "never")
    cli("set", *TASK, "default", "1")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "0")
    cli("set", *TASK, "no-expiry", "1")
    docs = {d["key"]: d for d in json.loads(cli("list", "-o", "json").stdout)}
    assert docs["forever"]["expires_at"] is None
    assert docs["no-expiry"]["expires_at"] is None
    lifetime = datetime.fromisoformat(docs["default"]["expires_at"]) - datetime.fromisoformat(
        docs["default"]["updated_at"]
    )
    assert lifetime == pytest.approx(timedelta(days=30), abs=timedelta(seconds=2))


@pytest.mark.parametrize("retention", ["soon", "0s", "-1d", "P1M", "7x"])
def test_bad_retention_is_usage_error(cli, db_url, retention):
    result = cli("set", *TASK, "k", "1", "--retention", retention)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("statestore: error: retention") or "invalid retention" in result.stderr
    assert _rows(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]


def test_retention_on_an_asset_key_is_refused(cli):
    result = cli("set", *ASSET, "k", "1", "--retention", "1d")
    assert result.exit_code == 2, result.output
    assert "task and dag-run keys only" in result.stderr


# -- scopes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        ((), "no scope given"),
        (("--dag-id", "d"), "a task scope needs --run-id, --task-id as well"),
        ((*TASK, "--asset-name", "a"), "a task scope and an asset scope were both given"),
        ((*TASK, "--map-index", "-2"), "map_index must be -1 (not mapped) or >= 0, got -2"),
    ],
)
def test_incomplete_or_mixed_scopes_are_usage_errors(cli, args, message):
    result = cli("get", *args, "k")
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stderr.count("\n") == 1


def test_overlong_key_is_refused(cli):
    result = cli("set", *TASK, "k" * 513, "1")
    assert result.exit_code == 2
    assert "key is 513 characters long; the limit is 512" in result.stderr
    assert cli("set", *TASK, "k" * 512, "1").exit_code == 0


# -- asset keys -------------------------------------------------------------------------------------------
def test_asset_keys_by_name_uri_and_id(cli, db_url):
    assert cli("set", *ASSET, "watermark", '"2026-11-01"').exit_code == 0
    [(asset_id, name, uri)] = _rows(db_url, "SELECT id, name, uri FROM asset")
    assert (name, uri) == ("orders", "orders")
    for scope in (ASSET, ("--asset-uri", "orders"), ("--asset-id", str(asset_id))):
        result = cli("get", *scope, "watermark")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == "2026-11-01"
    assert _rows(db_url, "SELECT last_updated_by_kind FROM asset_state_store") == [("api",)]


def test_unknown_asset_id_on_set_is_refused(cli):
    result = cli("set", "--asset-id", "999", "k", "1")
    assert result.exit_code == 2
    assert "no asset with asset_id=999" in result.stderr


# -- delete and clear -----------------------------------------------------------------------------------
def test_delete_removes_one_key_and_a_missing_key_is_not_an_error(cli):
    cli("set", *TASK, "a", "1")
    cli("set", *TASK, "b", "2")
    result = cli("delete", *TASK, "a")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # not a terminal: the message is for people, on stderr
    assert result.stderr == "deleted 'a' for dag_id=etl run_id=manual__1 task_id=extract map_index=-1\n"
    assert cli("get", *TASK, "a").exit_code == 1
    assert cli("get", *TASK, "b").exit_code == 0
    again = cli("delete", *TASK, "a")
    assert again.exit_code == 0
    assert again.stderr.startswith("no such key, nothing deleted: 'a'")


def test_clear_needs_yes_without_a_terminal_and_deletes_nothing(cli, db_url):
    cli("set", *TASK, "a", "1")
    result = cli("clear", *TASK)
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: clear deletes keys and stdin is not a terminal to confirm on; pass --yes\n"
    )
    assert _rows(db_url, "SELECT count(*) FROM task_state_store") == [(1,)]


def test_clear_only_its_map_index_unless_all_map_indices(cli, db_url):
    for index in ("-1", "0", "1"):
        cli("set", *TASK, "--map-index", index, "k", "1")
    cli("set", "--dag-id", "etl", "--run-id", "manual__1", "--task-id", "other", "k", "1")
    result = cli("clear", *TASK, "--map-index", "0", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr == "deleted 1 key of dag_id=etl run_id=manual__1 task_id=extract map_index=0\n"
    assert _rows(db_url, "SELECT task_id, map_index FROM task_state_store ORDER BY 1, 2") == [
        ("extract", -1),
        ("extract", 1),
        ("other", -1),
    ]
    result = cli("clear", *TASK, "--all-map-indices", "--yes")
    assert result.stderr.startswith("deleted 2 keys of")
    assert _rows(db_url, "SELECT task_id FROM task_state_store") == [("other",)]


def test_clear_asset_scope(cli, db_url):
    cli("set", *ASSET, "a", "1")
    cli("set", *ASSET, "b", "1")
    cli("set", "--asset-name", "other", "a", "1")
    result = cli("clear", *ASSET, "-y")
    assert result.exit_code == 0, result.output
    assert result.stderr == "deleted 2 keys of name=orders\n"
    assert _rows(db_url, "SELECT {key} FROM asset_state_store") == [("a",)]


# -- list -------------------------------------------------------------------------------------------------
def _seed(cli):
    cli("set", "--dag-id", "a", "--run-id", "r1", "--task-id", "t", "k1", "1", "--retention", "never")
    cli("set", "--dag-id", "a", "--run-id", "r2", "--task-id", "t", "--map-index", "2", "k2", "1")
    cli("set", "--dag-id", "b", "--run-id", "r1", "--task-id", "t", "k3", "1")
    cli("set", "--asset-uri", "s3://bucket/x", "wm", "1")


def test_list_json_has_every_key_with_scope_fields(cli):
    _seed(cli)
    result = cli("list", "--output", "json")
    assert result.exit_code == 0, result.output
    docs = json.loads(result.stdout)
    assert [(d["store"], d["key"]) for d in docs] == [("task", "k1"), ("task", "k2"), ("task", "k3"), ("asset", "wm")]
    assert set(docs[0]) == {"store", "dag_id", "run_id", "task_id", "map_index", "key", "updated_at", "expires_at"}
    assert docs[0]["expires_at"] is None
    assert docs[1]["map_index"] == 2
    assert set(docs[3]) == {"store", "asset_id", "name", "uri", "key", "updated_at", "expires_at"}
    assert (docs[3]["name"], docs[3]["uri"], docs[3]["expires_at"]) == ("s3://bucket/x", "s3://bucket/x", None)


@pytest.mark.parametrize(
    "filters, keys",
    [
        (("--dag-id", "a"), ["k1", "k2"]),
        (("--run-id", "r1"), ["k1", "k3"]),
        (("--dag-id", "a", "--map-index", "2"), ["k2"]),
        (("--asset-uri", "s3://bucket/x"), ["wm"]),
        (("--store", "asset"), ["wm"]),
        (("--store", "task", "--key", "k3"), ["k3"]),
        (("--dag-id", "zzz"), []),
    ],
)
def test_list_filters_by_any_subset_of_scope_options(cli, filters, keys):
    _seed(cli)
    result = cli("list", *filters, "-o", "json")
    assert result.exit_code == 0, result.output
    assert [d["key"] for d in json.loads(result.stdout)] == keys


def test_list_plain_output_is_tab_separated(cli):
    cli("set", "--dag-id", "a", "--run-id", "r1", "--task-id", "t", "k1", "1", "--retention", "never")
    result = cli("list", "-o", "plain")
    [line] = result.stdout.splitlines()
    cells = line.split("\t")
    assert cells[:6] == ["task", "a", "r1", "t", "-1", "k1"]
    assert cells[7] == "never"


# -- untrusted text -----------------------------------------------------------------------------------------
HOSTILE_KEY = "[bold red]x[/] \x1b[2J\x1b]0;pwned\x07 \u202e"


@pytest.mark.parametrize("mode", ["table", "plain"])
def test_stored_text_cannot_inject_markup_or_control_sequences(cli, mode, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that the table does not fold the key
    assert cli("set", *TASK, HOSTILE_KEY, '"\\u001b[31mred"').exit_code == 0
    listing = cli("list", "-o", mode).stdout
    assert "\x1b" not in listing and "\x07" not in listing and "\u202e" not in listing
    assert "[bold red]x[/] \\x1b[2J\\x1b]0;pwned\\x07 \\u202e" in listing  # literal, not markup
    value = cli("get", *TASK, HOSTILE_KEY, "-o", mode).stdout
    assert "\x1b" not in value
    assert json.loads(value) == "\x1b[31mred"


def test_json_output_escapes_c1_controls_and_stays_valid(cli):
    key = "k\x9b\x85"
    cli("set", *TASK, key, '"v\\u009b"')
    out = cli("get", *TASK, key, "-o", "json").stdout
    assert "\x9b" not in out and "\x85" not in out
    doc = json.loads(out)
    assert (doc["key"], doc["value"]) == (key, "v\x9b")
