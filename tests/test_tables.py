"""What an operator sees of ``list`` and ``clean --dry-run`` on a terminal, at 80 and 120 columns, with
realistic ids; that the listing streams; and ``list --limit/--offset`` on every engine."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator

import pytest
from cli_running import run_cli, run_statestore_process
from expected_output import assert_expected
from seeded_stores import (
    OPERATOR_ASSET_KEY,
    OPERATOR_ASSET_URI,
    OPERATOR_KEY,
    OPERATOR_REGION_KEYS,
    OPERATOR_RUN,
    REALISTIC_EXPIRED,
    REALISTIC_KEY,
    REALISTIC_LATER,
    REALISTIC_RUNS,
    seed_operator_store,
    seed_realistic,
)
from sqlalchemy import event

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.backends.store import Store
from statestore_cli.cli.output.grid import CHUNK, cell_width, fold, pack, wrap
from statestore_cli.cli.output.render import Output
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.ops.commands import list_entries

ALL_ENGINES = True
WIDTHS = (80, 120)
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _screen(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    return result.stdout


def _with_fixed_cutoff(text: str) -> str:
    """The dry run's cutoff is the moment it ran: replaced by a placeholder of the same width."""
    return re.sub(r"(expired before\s)" + TIMESTAMP.pattern, r"\1YYYY-MM-DD HH:MM:SS UTC", text)


def _assert_fits(text: str, width: int) -> None:
    for line in text.splitlines():
        assert cell_width(line) <= width, f"wider than {width} columns: {line!r}"


def _assert_whole_timestamps(text: str, expected: int) -> None:
    assert len(re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text)) == expected, text


# -- what people see: checked-in expected output -------------------------------------------------------------
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_list_table(db_url, width, monkeypatch):
    seed_realistic(db_url)
    monkeypatch.setenv("COLUMNS", str(width))
    screen = _screen(run_cli("list", "-o", "table", conn=db_url))
    _assert_fits(screen, width)
    _assert_whole_timestamps(screen, 18 + 12)  # updated_at of 18 keys, expires_at of the 12 that expire
    for dag_id in ("etl_orders_daily", "ml_feature_store_refresh_with_a_rather_long_dag_id"):
        for run_id in REALISTIC_RUNS:
            assert re.search(rf"dag_id {dag_id}\s+run_id {re.escape(run_id)}\n", screen)  # ids whole
    assert "task_id wait_for_emr_cluster_to_finish_processing" in screen
    assert "watermark" in screen and "s3://warehouse/orders/daily_partitions" in screen
    assert screen.count(f" {REALISTIC_KEY} ") == 8 and "…" not in screen  # whole on one line, at 80 columns too
    assert screen.count(" expired │") == 8  # the keys the next clean deletes
    assert screen.endswith("18 keys\n")
    assert_expected(f"list_{width}.txt", screen)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_dry_run_table(db_url, width, monkeypatch):
    seed_realistic(db_url)
    monkeypatch.setenv("COLUMNS", str(width))
    screen = _with_fixed_cutoff(_screen(run_cli("clean", "--dry-run", "-o", "table", conn=db_url)))
    _assert_fits(screen, width)
    assert "expired before YYYY-MM-DD HH:MM:SS UTC" in screen.replace("before\n", "before ")  # never split
    assert screen.count("2026-11-01 03:00:00 UTC") == 8
    assert "ml_feature_store_refresh_with_a_rather_long_dag_id │    2 │         4 │    4 │" in screen
    assert_expected(f"dry_run_{width}.txt", screen)


def _many_expired(db_url: str, count: int) -> None:
    """One mapped task with ``count`` expired keys beside the realistic store: past the dry run's 100 rows."""
    backend = MetastoreBackend(make_engine(db_url))
    try:
        for index in range(count):
            scope = TaskScope("etl_orders_daily", REALISTIC_RUNS[1], "load_partition", 2000 + index)
            backend.set(scope, REALISTIC_KEY, "1", expires_at=REALISTIC_EXPIRED)
    finally:
        backend.engine.dispose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_dry_run_table_collapsed(db_url, width, monkeypatch):
    seed_realistic(db_url)
    _many_expired(db_url, 110)
    monkeypatch.setenv("COLUMNS", str(width))
    screen = _with_fixed_cutoff(_screen(run_cli("clean", "--dry-run", "-o", "table", conn=db_url)))
    _assert_fits(screen, width)
    assert screen.count("2026-11-01 03:00:00 UTC") == 100
    assert "18 more rows not listed above; --all lists every row.\n" in screen
    assert "Dry run: 118 expired task keys would be deleted" in screen
    assert_expected(f"dry_run_collapsed_{width}.txt", screen)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_dry_run_table_all_rows(db_url, monkeypatch):
    seed_realistic(db_url)
    _many_expired(db_url, 110)
    monkeypatch.setenv("COLUMNS", "80")
    screen = _with_fixed_cutoff(_screen(run_cli("clean", "--dry-run", "--all", "-o", "table", conn=db_url)))
    _assert_fits(screen, 80)
    assert screen.count("2026-11-01 03:00:00 UTC") == 118
    assert "not listed above" not in screen
    assert_expected("dry_run_all_80.txt", screen)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("mode, name", [("plain", "list_plain.txt"), ("json", "list.json")])
def test_plain_and_json_listings_are_what_scripts_read(db_url, mode, name):
    """Byte for byte what the tool printed before the terminal tables changed (files made by that version)."""
    seed_realistic(db_url)
    assert_expected(name, _screen(run_cli("list", "-o", mode, conn=db_url)))
    if mode == "plain":
        dry = run_cli("clean", "--dry-run", "-o", "plain", conn=db_url)
        assert_expected("dry_run_plain.txt", _screen(dry))  # the rows only; the sentence is on stderr
        assert _with_fixed_cutoff(dry.stderr) == (
            "dry run: 8 expired task keys would be deleted (expired before YYYY-MM-DD HH:MM:SS UTC)\n"
        )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_flat_layout_when_every_cell_fits(db_url, monkeypatch):
    """Short ids: task_id and map_index are columns of their own, shown on a task instance's first row."""
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("etl", "r1", "extract"), "job_id", "1", expires_at=REALISTIC_LATER)
    backend.set(TaskScope("etl", "r1", "extract"), "offset", "1", expires_at=None)
    backend.engine.dispose()
    monkeypatch.setenv("COLUMNS", "80")
    lines = _screen(run_cli("list", "-o", "table", conn=db_url)).splitlines()
    assert lines[1] == "dag_id etl  run_id r1"
    assert lines[3].split("┃")[1:3] == [" task_id ", " map_index "]
    assert lines[5].startswith("│ extract │        -1 │ job_id │ ")
    assert lines[6].startswith("│         │           │ offset │ ") and lines[6].endswith("│ never               │")


# -- the pieces of a table --------------------------------------------------------------------------------
def test_fold_keeps_every_character():
    assert fold("abcdefghij", 10) == ["abcdefghij"]
    assert fold("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert fold("2026-11-01 03:00:00 expired", 19) == ["2026-11-01 03:00:00", "expired"]  # between words
    wide = "漢字漢字漢字漢字"  # two cells each
    assert fold(wide, 7) == ["漢字漢", "字漢字", "漢字"]


def test_pack_and_wrap_break_only_between_parts():
    assert pack(["dag_id a", "run_id b"], 20) == ["dag_id a  run_id b"]
    assert pack(["dag_id " + "a" * 20, "run_id b"], 20) == ["dag_id", "a" * 20, "run_id b"]  # between words
    assert pack(["dag_id" + "a" * 20, "run_id b"], 20) == ["dag_id" + "a" * 14, "a" * 6 + "  run_id b"]  # whole
    stamp = "2026-11-30 14:50:59 UTC)."
    assert wrap(["expired", "before", stamp, "Nothing"], 20) == ["expired before", stamp, "Nothing"]


# -- the operator's store: keys of 40-60 characters at 80 and 120 columns -----------------------------------
def _key_lines(screen: str, key: str) -> list[str]:
    """The table lines showing ``key``, which must be there whole, on one line."""
    return [line for line in screen.splitlines() if re.search(rf"[│ ]{re.escape(key)}[ │]", line)]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_operator_list_shows_every_key_whole(db_url, width, monkeypatch):
    seed_operator_store(db_url)
    monkeypatch.setenv("COLUMNS", str(width))
    screen = _screen(run_cli("list", "-o", "table", conn=db_url))
    _assert_fits(screen, width)
    assert "…" not in screen
    for key in OPERATOR_REGION_KEYS:  # they differ only in their middle
        assert len(_key_lines(screen, key)) == 1
    assert len(_key_lines(screen, OPERATOR_KEY)) == 21  # one per map index
    assert len(_key_lines(screen, OPERATOR_ASSET_KEY)) == 2
    assert f"uri {OPERATOR_ASSET_URI}" in screen
    assert screen.count("2026-11-01 03:00:00 expired") == 6 and screen.count("expired") == 6
    assert screen.endswith("27 keys\n")
    assert_expected(f"operator_list_{width}.txt", screen)
    plain = _screen(run_cli("list", "-o", "plain", conn=db_url)).splitlines()  # for scripts: fields kept
    assert len(plain) == 27 and "expired" not in "\n".join(plain)
    assert {len(line.split("\t")) for line in plain if line.startswith("task")} == {8}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_operator_dry_run_shows_every_key_whole(db_url, width, monkeypatch):
    seed_operator_store(db_url)
    monkeypatch.setenv("COLUMNS", str(width))
    screen = _with_fixed_cutoff(_screen(run_cli("clean", "--dry-run", "-o", "table", conn=db_url)))
    _assert_fits(screen, width)
    assert "…" not in screen
    for key in OPERATOR_REGION_KEYS:
        assert len(_key_lines(screen, key)) == 1
    assert len(_key_lines(screen, OPERATOR_KEY)) == 3  # expired at map indexes 0-2
    assert f"run_id {OPERATOR_RUN}" in screen
    assert_expected(f"operator_dry_run_{width}.txt", screen)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_operator_sweep_dry_run_shows_every_key_whole(db_url, width, monkeypatch):
    seed_operator_store(db_url)
    monkeypatch.setenv("COLUMNS", str(width))
    screen = _screen(run_cli("assets", "sweep", "--dry-run", "-o", "table", conn=db_url))
    _assert_fits(screen, width)
    assert f"\n  {OPERATOR_ASSET_KEY}\n" in screen
    assert OPERATOR_ASSET_URI + "_legacy" in screen
    assert_expected(f"operator_sweep_dry_run_{width}.txt", screen)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_key_wider_than_the_table_wraps_whole(db_url, monkeypatch):
    key = "k" * 70 + "_the_end_of_a_very_long_key"  # 97 characters: more than 80 columns hold
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("etl", "r1", "extract"), key, "1", expires_at=None)
    backend.engine.dispose()
    monkeypatch.setenv("COLUMNS", "80")
    screen = _screen(run_cli("list", "-o", "table", conn=db_url))
    _assert_fits(screen, 80)
    shown = [line[4:-2].rstrip() for line in screen.splitlines() if "kkk" in line or "long_key" in line]
    assert "".join(shown) == key and "…" not in screen


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("fast", [True, False])
def test_get_on_a_terminal_says_the_key_expired(db_url, fast):
    seed_operator_store(db_url)
    scope = ["--dag-id", "etl_orders_daily", "--run-id", OPERATOR_RUN, "--task-id", "submit_spark_job"]
    env = {k: v for k, v in os.environ.items() if k != "STATESTORE_NO_FAST_PATH"}
    if not fast:
        env["STATESTORE_NO_FAST_PATH"] = "1"
    key = OPERATOR_REGION_KEYS[1]

    def get(*args: str):  # type: ignore[no-untyped-def]
        return run_statestore_process("--conn", db_url, "get", *scope, *args, env=env)

    table = get("--map-index", "0", key, "-o", "table")
    assert table.exit_code == 0 and table.stdout == "1764460800\n"
    assert (
        table.stderr == f"statestore: note: key {key} expired at 2026-11-01 03:00:00 UTC; the next clean deletes it\n"
    )
    for mode in ("json", "plain"):  # what scripts read: stdout as before, nothing on stderr
        result = get("--map-index", "0", key, "-o", mode)
        assert result.exit_code == 0 and result.stderr == ""
        assert (json.loads(result.stdout)["value"] if mode == "json" else result.stdout) in (1764460800, "1764460800\n")
    live = get("--map-index", "5", OPERATOR_KEY, "-o", "table")
    assert live.exit_code == 0 and live.stderr == ""


# -- streaming ----------------------------------------------------------------------------------------------
def test_list_table_streams_as_rows_arrive(db_url, capsys, monkeypatch):
    """Each dag run's table is on stdout before the next run's rows are read, and a run with more rows
    than a table is laid out from starts to show before its last row is read."""
    backend = MetastoreBackend(make_engine(db_url))
    for run in ("r1", "r2"):
        for index in range(3 if run == "r1" else CHUNK + 50):
            backend.set(TaskScope("etl", run, "t"), f"k{index:04}", "1", expires_at=None)
    backend.engine.dispose()
    monkeypatch.setenv("COLUMNS", "100")
    shown: list[str] = []
    seen_when: dict[tuple[str | None, str], str] = {}

    def watched(entries: Iterator[Entry]) -> Iterator[Entry]:
        for entry in entries:
            shown.append(capsys.readouterr().out)
            seen_when[(entry.run_id, entry.key)] = "".join(shown)
            yield entry

    settings = load_settings(conn_override=db_url)
    Output("table").entries(watched(list_entries(Store.open(settings), KeyFilter())))
    shown.append(capsys.readouterr().out)
    before_r2 = seen_when[("r2", "k0001")]  # r1 ends when the next run starts
    assert "run_id r1" in before_r2 and "│ k0002 " in before_r2 and "└" in before_r2
    assert "run_id r2" not in before_r2
    before_last = seen_when[("r2", f"k{CHUNK + 49:04}")]
    assert "run_id r2" in before_last and f"│ k{CHUNK // 2:04} " in before_last  # drawn, not held
    assert "".join(shown).endswith(f"{CHUNK + 53} keys\n")


# -- --limit / --offset, on every engine ---------------------------------------------------------------------
def _seed_paging(db_url: str) -> None:
    backend = MetastoreBackend(make_engine(db_url))
    try:
        for dag in ("da", "db"):
            for run in ("ra", "rb"):
                backend.set(TaskScope(dag, run, "ta", 2), "kb", "1", expires_at=None)
                backend.set(TaskScope(dag, run, "ta", 1), "ka", "1", expires_at=None)
                backend.set(TaskScope(dag, run, "tb"), "kc", "1", expires_at=None)
    finally:
        backend.engine.dispose()
    assert run_cli("set", "--asset-name", "zz", "wm", "1", conn=db_url).exit_code == 0
    assert run_cli("set", "--asset-name", "aa", "wm", "1", conn=db_url).exit_code == 0


def _identity(doc: dict) -> tuple:
    if doc["store"] == "task":
        return (doc["dag_id"], doc["run_id"], doc["task_id"], doc["map_index"], doc["key"])
    return ("asset", doc["name"], doc["key"])


def test_list_is_ordered_by_scope_and_key(db_url):
    _seed_paging(db_url)
    docs = json.loads(_screen(run_cli("list", "-o", "json", conn=db_url)))
    tasks = [_identity(d) for d in docs if d["store"] == "task"]
    assert tasks == sorted(tasks) and len(tasks) == 12
    assert [_identity(d) for d in docs[12:]] == [("asset", "aa", "wm"), ("asset", "zz", "wm")]


@pytest.mark.parametrize("limit, offset", [(3, 0), (5, 4), (4, 10), (1, 13), (10, 12), (5, 14), (0, 0), (None, 11)])
def test_limit_and_offset_page_through_the_listing(db_url, limit, offset, monkeypatch):
    _seed_paging(db_url)
    everything = json.loads(_screen(run_cli("list", "-o", "json", conn=db_url)))
    page = everything[offset : None if limit is None else offset + limit]
    flags = ["--offset", str(offset)] + ([] if limit is None else ["--limit", str(limit)])
    assert json.loads(_screen(run_cli("list", *flags, "-o", "json", conn=db_url))) == page
    plain = _screen(run_cli("list", "-o", "plain", conn=db_url)).splitlines()
    paged = _screen(run_cli("list", *flags, "-o", "plain", conn=db_url)).splitlines()
    assert paged == plain[offset : None if limit is None else offset + limit]
    monkeypatch.setenv("COLUMNS", "100")
    table = _screen(run_cli("list", *flags, "-o", "table", conn=db_url))
    assert table.endswith(f"{len(page)} key{'s' if len(page) != 1 else ''}\n")
    assert table.count("│ wm ") + table.count("│   wm ") == sum(d["store"] == "asset" for d in page)


def test_limit_and_offset_are_in_the_query(db_url):
    _seed_paging(db_url)
    backend = MetastoreBackend(make_engine(db_url))
    statements: list[tuple[str, object]] = []
    event.listen(backend.engine, "before_cursor_execute", lambda *a: statements.append((a[2].upper(), a[3])))
    try:
        listed = list(backend.entries(KeyFilter(), limit=2, offset=11))
    finally:
        backend.engine.dispose()
    assert [e.key for e in listed] == ["kc", "wm"]  # the last task key, then the first asset key
    tasks, assets = (
        [(s, p) for s, p in statements if f"FROM {table}" in s] for table in ("TASK_STATE_STORE", "ASSET_STATE_STORE")
    )
    [(task_query, task_params)] = tasks
    values = list(task_params.values()) if isinstance(task_params, dict) else list(task_params)  # type: ignore[attr-defined]
    assert "LIMIT" in task_query and 11 in values and 2 in values
    [(asset_query, _)] = assets
    assert "LIMIT" in asset_query


def test_offset_past_every_task_key_starts_among_the_asset_keys(db_url):
    _seed_paging(db_url)
    backend = MetastoreBackend(make_engine(db_url))
    try:
        assert [e.name for e in backend.entries(KeyFilter(), offset=13)] == ["zz"]
        assert list(backend.entries(KeyFilter(), offset=14)) == []
        assert [e.key for e in backend.entries(KeyFilter(store="task", key="kc"), limit=1, offset=1)] == ["kc"]
    finally:
        backend.engine.dispose()


@pytest.mark.parametrize("flag", ["--limit", "--offset"])
def test_negative_limit_or_offset_is_a_usage_error(cli, flag):
    result = cli("list", flag, "-1")
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("statestore: error: ") and flag in line


def test_the_library_refuses_a_negative_limit(db_url):
    from statestore_cli.errors import InvalidInputError

    backend = MetastoreBackend(make_engine(db_url))
    try:
        with pytest.raises(InvalidInputError):
            backend.entries(KeyFilter(), limit=-1)  # at the call, before any row is read
        with pytest.raises(InvalidInputError):
            backend.entries(KeyFilter(), offset=-1)
    finally:
        backend.engine.dispose()
