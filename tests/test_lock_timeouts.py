"""Bounded lock waits: every writing command gives up after ``[state_store] lock_timeout`` (``--lock-timeout``).

Real locks on every engine: a second connection holds a row lock (``SELECT ... FOR UPDATE`` in an open
transaction on PostgreSQL and MariaDB) or SQLite's write lock (``BEGIN EXCLUSIVE``), and the command must
exit 3 within a few seconds with one line naming the limit, leaving the store as it was.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cli_running import Result, run_cli, run_statestore_process
from metrics_files import read_metrics
from servers import ENGINES, engine_of
from sqlalchemy import event, make_url, text
from sqlalchemy.engine import Engine
from stores import quote_key, sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine, mask_url

pytestmark = pytest.mark.slow  # each test waits out a lock timeout

TASK = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract")
SCOPE = TaskScope("etl", "manual__1", "extract")
HINT = "raise [state_store] lock_timeout or --lock-timeout"
INVALID = "expected a positive duration such as 10s, 2m or PT30S"


# -- holding locks ----------------------------------------------------------------------------------------
def holder(url: str) -> Engine:
    """The engine of the other session. READ COMMITTED on a server, as statestore itself runs MySQL: the
    rows it locks are locked, not the gaps between them (a writer inserting a new row goes on). On
    PostgreSQL, which would wait forever, the server ends the session after 20 s idle in its transaction:
    a command that does not give up then succeeds and fails its test instead of hanging the suite."""
    if url.startswith("sqlite"):
        return engine_of(url)
    engine = engine_of(url, isolation_level="READ COMMITTED")
    if url.startswith("postgresql"):

        @event.listens_for(engine, "connect")
        def backstop(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("SET idle_in_transaction_session_timeout = 20000")
            cursor.close()
            dbapi_conn.commit()

    return engine


@contextmanager
def lock_held(url: str, table: str = "task_state_store") -> Iterator[None]:
    """Another session holding a lock a writer of ``table`` waits for: on a server the row locks of every
    row of ``table``, on SQLite the write lock of the whole file. Released (rolled back) afterwards."""
    engine = holder(url)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN EXCLUSIVE")
            else:
                conn.begin()
                conn.execute(text(f"SELECT * FROM {table} FOR UPDATE")).all()
            try:
                yield
            finally:
                conn.rollback()
    finally:
        engine.dispose()


def seed(url: str) -> None:
    """Two task keys of one run (one of them expired) and one asset key."""
    backend = MetastoreBackend(make_engine(url))
    try:
        backend.set(SCOPE, "fresh", '"old"')
        backend.set(SCOPE, "stale", '"old"', expires_at=datetime.now(UTC) - timedelta(days=1))
        backend.set(AssetScope(name="orders", uri="orders"), "watermark", '"old"')
    finally:
        backend.engine.dispose()


def snapshot(url: str) -> dict[str, list[tuple]]:
    return {
        table: sorted(map(tuple, sql(url, f"SELECT * FROM {table}")), key=repr)
        for table in ("dag_run", "asset", "task_state_store", "asset_state_store")
    }


def where(url: str, table: str = "task_state_store", statement_table: str | None = None) -> str:
    """What a message names a lock by: on SQLite the file (the URL); on PostgreSQL the table of the row
    waited for; on MySQL/MariaDB, which does not say, the table of the statement that waited."""
    if url.startswith("sqlite"):
        return mask_url(make_url(url))
    return statement_table or table if url.startswith("mysql") else table


def timed(*args: str, conn: str) -> tuple[Result, float]:
    started = time.monotonic()
    result = run_cli(*args, conn=conn)
    return result, time.monotonic() - started


def assert_gave_up(result: Result, waited: float, message: str) -> None:
    assert result.exit_code == 3, result.output
    assert result.stderr == f"statestore: error: {message}\n", result.output
    assert result.stdout == ""
    assert 0.9 <= waited < 8, f"waited {waited:.1f}s for a 1s lock timeout"


# -- every writing command, every engine --------------------------------------------------------------------
# command line, and the table a MySQL message names when it is not the locked one (the cascade's parent)
WRITES = {
    "set": (("set", *TASK, "fresh", '"new"'), None),
    "set-keep-expiry": (("set", *TASK, "fresh", '"new"', "--keep-expiry"), None),
    "delete": (("delete", *TASK, "fresh"), None),
    "clear": (("clear", *TASK, "--yes"), None),
    "clear-run": (("clear", "--dag-id", "etl", "--run-id", "manual__1", "--yes"), None),
    "clear-dag-batched": (("clear", "--dag-id", "etl", "--batch-size", "1", "--yes"), None),
    "clean": (("clean",), None),
    "runs-delete": (("runs", "delete", "--dag-id", "etl", "--run-id", "manual__1", "--yes"), "dag_run"),
}


@pytest.mark.parametrize("db_url", ENGINES, indirect=True)
@pytest.mark.parametrize("args, statement_table", WRITES.values(), ids=WRITES.keys())
def test_a_writing_command_gives_up_after_its_lock_timeout(db_url, args, statement_table):
    seed(db_url)
    before = snapshot(db_url)
    with lock_held(db_url):
        result, waited = timed(*args, "--lock-timeout", "1s", conn=db_url)
    on = where(db_url, statement_table=statement_table)
    assert_gave_up(result, waited, f"waited 1s for a lock held by another session on {on}; {HINT}")
    assert snapshot(db_url) == before  # nothing half-written


@pytest.mark.parametrize("db_url", ENGINES, indirect=True)
def test_set_of_an_asset_key_and_assets_commands_give_up_too(db_url):
    seed(db_url)
    sql(db_url, "DELETE FROM asset_active")  # the asset is inactive: the sweep deletes its key
    before = snapshot(db_url)
    for args, statement_table in (
        (("set", "--asset-id", "1", "watermark", '"new"'), None),
        (("assets", "sweep", "--yes"), None),
        (("assets", "sweep", "--yes", "--batch-size", "1"), None),
        (("assets", "delete", "--asset-id", "1", "--yes"), "asset"),
    ):
        with lock_held(db_url, "asset_state_store"):
            result, waited = timed(*args, "--lock-timeout", "1s", conn=db_url)
        on = where(db_url, "asset_state_store", statement_table)
        assert_gave_up(result, waited, f"waited 1s for a lock held by another session on {on}; {HINT}")
    assert snapshot(db_url) == before


@pytest.mark.parametrize("db_url", ENGINES, indirect=True)
def test_import_says_what_it_had_imported_when_it_gave_up(db_url, tmp_path):
    seed(db_url)
    lines = [
        {"store": "task", "dag_id": "etl", "run_id": "manual__2", "task_id": "t", "map_index": -1, "key": "a"},
        {"store": "task", "dag_id": "etl", "run_id": "manual__1", "task_id": "extract", "map_index": -1},
    ]
    lines[1]["key"] = "fresh"
    for line in lines:
        line |= {"value": "new", "updated_at": "2026-11-30T00:00:00+00:00", "expires_at": None}
    export = tmp_path / "keys.jsonl"
    export.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with lock_held(db_url):
        result, waited = timed("import", str(export), "--batch-size", "1", "--lock-timeout", "1s", conn=db_url)
    # SQLite's lock is the file's: the first batch waits already; on a server the row of line 2 is locked.
    done = "nothing was imported" if db_url.startswith("sqlite") else "line 1 was imported, nothing after"
    assert_gave_up(result, waited, f"waited 1s for a lock held by another session on {where(db_url)}; {HINT}; {done}")
    assert sql(db_url, "SELECT value FROM task_state_store WHERE {key} = 'fresh'") == [('"old"',)]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_db_init_gives_up_behind_a_table_lock(db_url):
    """`db init` creates what is missing; a new table's foreign key locks the table it references, so
    behind another session's lock of that table it gives up too. (MariaDB's CREATE TABLE waits for no
    lock another session can hold on the referenced table.)"""
    sql(db_url, "DROP TABLE asset_state_store")
    engine = holder(db_url)
    with engine.connect() as conn, conn.begin():
        conn.exec_driver_sql("LOCK TABLE asset IN ACCESS EXCLUSIVE MODE")
        result, waited = timed("db", "init", "--lock-timeout", "1s", conn=db_url)
    engine.dispose()
    # A table lock names no row, and CREATE TABLE reads from no table: the database is named.
    on = mask_url(make_url(db_url))
    assert_gave_up(result, waited, f"waited 1s for a lock held by another session on {on}; {HINT}")
    assert run_cli("db", "init", conn=db_url).exit_code == 0  # and with the lock gone it creates the table


@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
def test_a_table_lock_is_bounded_like_a_row_lock(db_url):
    """A whole-table lock (an ALTER TABLE in progress, LOCK TABLES; on MySQL a metadata lock, waited for
    under lock_wait_timeout rather than innodb_lock_wait_timeout) gives up after the lock timeout too."""
    seed(db_url)
    before = snapshot(db_url)
    engine = holder(db_url)
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.begin()
            conn.exec_driver_sql("LOCK TABLE task_state_store IN ACCESS EXCLUSIVE MODE")
        else:
            conn.exec_driver_sql("LOCK TABLES task_state_store WRITE")
        result, waited = timed("set", *TASK, "fresh", '"new"', "--lock-timeout", "1s", conn=db_url)
        conn.rollback()
        if conn.dialect.name != "postgresql":
            conn.exec_driver_sql("UNLOCK TABLES")
    engine.dispose()
    assert_gave_up(result, waited, f"waited 1s for a lock held by another session on task_state_store; {HINT}")
    assert snapshot(db_url) == before


# -- clean: what committed batches did, and the metrics file ------------------------------------------------
@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_a_batched_clean_says_how_many_keys_it_deleted_before_it_gave_up(db_url, tmp_path):
    """The batches before the locked row commit and stay deleted; the message and the metrics say how many.
    InnoDB's range scan also reads the record after the range's end, so the batch just before the locked
    row (k2's) waits on it already: two batches commit. (On PostgreSQL a batched clean skips rows another
    session holds: see the next test.)"""
    backend = MetastoreBackend(make_engine(db_url))
    expired = datetime.now(UTC) - timedelta(days=1)
    for index in range(5):
        backend.set(SCOPE, f"k{index}", '"old"', expires_at=expired)
    backend.engine.dispose()
    [(locked,)] = sql(db_url, "SELECT id FROM task_state_store WHERE {key} = 'k3'")
    engine = holder(db_url)
    metrics = tmp_path / "clean.prom"
    with engine.connect() as conn, conn.begin():
        conn.execute(text("SELECT id FROM task_state_store WHERE id = :id FOR UPDATE"), {"id": locked}).all()
        result, waited = timed(
            "clean", "--batch-size", "1", "--lock-timeout", "1s", "--metrics-file", str(metrics), conn=db_url
        )
    engine.dispose()
    assert_gave_up(
        result,
        waited,
        f"waited 1s for a lock held by another session on task_state_store; {HINT} (the clean had deleted "
        "2 expired keys in 2 committed batches; they stay deleted: run clean again to finish)",
    )
    assert sorted(sql(db_url, "SELECT {key} FROM task_state_store")) == [("k2",), ("k3",), ("k4",)]
    values = read_metrics(metrics)
    assert (values["statestore_clean_exit_status"], values["statestore_clean_rows_deleted"]) == (3, 2)
    assert (values["statestore_clean_batches"], values["statestore_clean_expired_rows_remaining"]) == (2, None)
    assert values["statestore_clean_last_success_timestamp_seconds"] is None


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_batched_clean_on_postgresql_skips_the_rows_another_session_holds(db_url):
    seed(db_url)
    with lock_held(db_url):
        result, waited = timed("clean", "--batch-size", "1", "--lock-timeout", "1s", "-o", "json", conn=db_url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == 0 and waited < 8
    assert ("stale",) in sql(db_url, "SELECT {key} FROM task_state_store")  # the next clean deletes it


def test_a_clean_that_gave_up_on_sqlite_records_it_in_the_metrics_file(db_url, tmp_path):
    seed(db_url)
    metrics = tmp_path / "clean.prom"
    with lock_held(db_url):
        result, waited = timed("clean", "--lock-timeout", "1s", "--metrics-file", str(metrics), conn=db_url)
    assert_gave_up(result, waited, f"waited 1s for a lock held by another session on {db_url}; {HINT}")
    values = read_metrics(metrics)
    assert (values["statestore_clean_exit_status"], values["statestore_clean_rows_deleted"]) == (3, 0)


# -- reading commands -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("get", *TASK, "fresh"), ("list",), ("stats",), ("clean", "--dry-run")])
def test_sqlite_readers_wait_for_the_lock_timeout_too(db_url, monkeypatch, args):
    """SQLite's readers wait for a writer's lock: they give up after lock_timeout, not connect_timeout, and
    a command without --lock-timeout names only the option."""
    seed(db_url)
    monkeypatch.setenv("AIRFLOW__STATE_STORE__LOCK_TIMEOUT", "1s")
    with lock_held(db_url):
        result, waited = timed("--connect-timeout", "30s", *args, conn=db_url)
    hint = HINT if args[0] == "clean" else "raise [state_store] lock_timeout"
    assert_gave_up(result, waited, f"waited 1s for a lock held by another session on {db_url}; {hint}")


@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
def test_server_reads_do_not_wait_for_row_locks(db_url):
    seed(db_url)
    with lock_held(db_url):
        assert run_cli("get", *TASK, "fresh", conn=db_url).stdout == '"old"\n'
        listed = run_cli("list", "-o", "json", conn=db_url)
    assert listed.exit_code == 0 and len(json.loads(listed.stdout)) == 3, listed.output


# -- where the limit comes from ---------------------------------------------------------------------------
@pytest.mark.parametrize("db_url", ENGINES, indirect=True)
def test_the_limit_comes_from_the_option_then_the_environment_then_the_file(db_url, monkeypatch, tmp_path):
    seed(db_url)
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text("[state_store]\nlock_timeout = 1s\n", encoding="utf-8")
    args = ("--config", str(cfg), "set", *TASK, "fresh", '"new"')
    message = f"waited {{}}s for a lock held by another session on {where(db_url)}; {HINT}"
    with lock_held(db_url):
        from_file, waited = timed(*args, conn=db_url)
        assert_gave_up(from_file, waited, message.format(1))
        monkeypatch.setenv("AIRFLOW__STATE_STORE__LOCK_TIMEOUT", "PT2S")
        from_env, waited = timed(*args, conn=db_url)
        assert from_env.stderr == f"statestore: error: {message.format(2)}\n" and 1.9 <= waited < 9
        from_option, waited = timed(*args, "--lock-timeout", "1s", conn=db_url)
        assert_gave_up(from_option, waited, message.format(1))


def test_the_settings_resolve_the_lock_timeout_in_the_documented_order(monkeypatch, tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text("[state_store]\nlock_timeout = 45s\n", encoding="utf-8")
    assert load_settings().lock_timeout == 30.0
    assert load_settings(config_path=cfg).lock_timeout == 45.0
    monkeypatch.setenv("AIRFLOW__STATE_STORE__LOCK_TIMEOUT", "2m")
    settings = load_settings(config_path=cfg)
    assert settings.lock_timeout == 120.0
    assert settings.setting("state_store", "lock_timeout").source == "env AIRFLOW__STATE_STORE__LOCK_TIMEOUT"
    settings = load_settings(config_path=cfg, lock_timeout_override="5s")
    assert (settings.lock_timeout, settings.setting("state_store", "lock_timeout").source) == (
        5.0,
        "lock_timeout_override",
    )


def test_config_show_names_where_the_lock_timeout_came_from(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__LOCK_TIMEOUT", "2m")
    doc = json.loads(run_cli("config", "show", "-o", "json").stdout)
    assert doc["options"]["state_store"]["lock_timeout"] == {
        "value": "2m",
        "source": "environment variable AIRFLOW__STATE_STORE__LOCK_TIMEOUT",
    }


WRITING_COMMANDS = [
    ("set", *TASK, "k", '"v"'),
    ("delete", *TASK, "k"),
    ("clear", *TASK, "--yes"),
    ("import", "-"),
    ("db", "init"),
    ("runs", "delete", "--dag-id", "etl", "--run-id", "manual__1", "--yes"),
    ("assets", "delete", "--asset-id", "1", "--yes"),
    ("assets", "sweep", "--yes"),
    ("clean",),
]


@pytest.mark.parametrize("args", WRITING_COMMANDS, ids=lambda args: " ".join(args[:2]))
@pytest.mark.parametrize("bad", ["soon", "0s", "-1s", "30", ""])
def test_a_bad_lock_timeout_is_a_usage_error_before_anything_is_written(cli, db_url, args, bad):
    seed(db_url)
    before = snapshot(db_url)
    result = cli(*args, "--lock-timeout", bad, input="")
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: --lock-timeout: invalid value {bad!r} for [state_store] lock_timeout: {INVALID}\n"
    )
    assert snapshot(db_url) == before


def test_a_bad_lock_timeout_in_the_file_fails_every_command_with_exit_2(cli, tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text("[state_store]\nlock_timeout = 1 minute\n", encoding="utf-8")
    for args in (("list",), ("set", *TASK, "k", '"v"')):
        result = cli("--config", str(cfg), *args)
        assert result.exit_code == 2, result.output
        assert result.stderr == (
            f"statestore: error: {cfg}: invalid value '1 minute' for [state_store] lock_timeout: {INVALID}\n"
        )


def test_every_command_that_writes_takes_lock_timeout_and_none_that_only_reads():
    from typer.main import get_command

    from statestore_cli.cli.root_command import app

    root = get_command(app)
    found = set()
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        subcommands = getattr(command, "commands", None) or {"": command}
        for sub, leaf in subcommands.items():
            if any("--lock-timeout" in param.opts for param in leaf.params):
                found.add(f"{name} {sub}".strip())
    assert found == {
        "set",
        "delete",
        "clear",
        "import",
        "db init",
        "runs delete",
        "assets delete",
        "assets sweep",
        "clean",
        "copy",
    }


def test_the_lock_timeout_goes_after_the_command(cli):
    result = cli("--lock-timeout", "1s", "set", *TASK, "k", '"v"')
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: No such option: --lock-timeout (Possible options: --connect-timeout); "
        "--lock-timeout goes after the command: "
        "statestore set --lock-timeout 1s\n"
    )


def test_get_in_a_process_of_its_own_waits_for_the_lock_once(db_url, tmp_path):
    """The fast `get` path does not wait for a locked file: the full CLI waits, once, and words the error."""
    seed(db_url)
    env = {**os.environ, "AIRFLOW__STATE_STORE__LOCK_TIMEOUT": "4s"}
    with lock_held(db_url):
        started = time.monotonic()
        result = run_statestore_process("--conn", db_url, "get", *TASK, "fresh", env=env)
        waited = time.monotonic() - started
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"statestore: error: waited 4s for a lock held by another session on {db_url}; "
        "raise [state_store] lock_timeout\n"
    )
    # Twice would be 8 s; the margin is for starting the process on a loaded machine (3 s seen at 10 workers).
    assert 3.9 <= waited < 7.9, f"waited {waited:.1f}s for a 4s lock timeout: twice would be 8s"
    assert run_statestore_process("--conn", db_url, "get", *TASK, "fresh").stdout == '"old"\n'


@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
@pytest.mark.parametrize("command", ["clear", "assets sweep"])
def test_a_batched_clear_or_sweep_says_how_many_keys_it_deleted_before_it_gave_up(db_url, command):
    """As a batched clean does: the batches before the locked key (k3) commit and stay deleted. InnoDB's
    range scan also reads the record after the range's end, so there k2's batch waits on k3 already."""
    backend = MetastoreBackend(make_engine(db_url))
    scope = SCOPE if command == "clear" else AssetScope(name="orders", uri="orders")
    for index in range(5):
        backend.set(scope, f"k{index}", '"old"')
    backend.engine.dispose()
    table = "task_state_store" if command == "clear" else "asset_state_store"
    if command == "assets sweep":
        sql(db_url, "DELETE FROM asset_active")  # the asset is inactive: the sweep deletes its keys
    args = ("clear", "--dag-id", "etl", "--yes") if command == "clear" else ("assets", "sweep", "--yes")
    engine = holder(db_url)
    with engine.connect() as conn, conn.begin():
        conn.execute(text(quote_key(f"SELECT * FROM {table} WHERE {{key}} = 'k3' FOR UPDATE", conn.dialect.name))).all()
        result, waited = timed(*args, "--batch-size", "1", "--lock-timeout", "1s", conn=db_url)
    engine.dispose()
    done = 2 if db_url.startswith("mysql") else 3
    assert_gave_up(
        result,
        waited,
        f"waited 1s for a lock held by another session on {table}; {HINT} (the {command} had deleted "
        f"{done} keys in {done} committed batches; they stay deleted: run {command} again to finish)",
    )
    assert sorted(sql(db_url, f"SELECT {{key}} FROM {table}")) == [(f"k{i}",) for i in range(done, 5)]
