"""Faults: a server that never answers, signals at any moment, a connection killed mid-write, a full disk.

Every test runs real processes against real servers (or a real socket that accepts and stays silent),
and checks the exit code, the one-line message and what the database holds afterwards.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from cli_running import run_statestore_process, start_statestore
from faults import SilentServer, kill_session, named_session, row_locked
from servers import engine_of
from sqlalchemy import text
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine

pytestmark = pytest.mark.slow  # real processes, signals and connect timeouts

SERVERS = ["postgresql", "mariadb"]
PAST = datetime(2020, 1, 1)  # naive: every engine reads it as UTC here, and it is long expired
TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")


# -- a server that accepts connections and never answers -------------------------------------------------


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def silent_url(engine: str, port: int) -> str:
    if engine == "postgresql":
        return f"postgresql+psycopg://airflow:hunter2pw@127.0.0.1:{port}/airflow"
    return f"mysql+pymysql://airflow:hunter2pw@127.0.0.1:{port}/airflow"


COMMANDS = {
    "list": ("list",),
    "db check": ("db", "check", "-o", "plain"),
    "clean": ("clean",),
    "get": ("get", *TASK, "k"),
}


@pytest.mark.parametrize("engine", SERVERS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_server_that_never_answers_is_given_up_on_at_the_connect_timeout(silent, engine, command):
    url = silent_url(engine, silent.port)
    started = time.monotonic()
    result = run_statestore_process("--connect-timeout", "2s", "--conn", url, *COMMANDS[command], timeout=60)
    elapsed = time.monotonic() - started
    assert result.exit_code == 3, result.output
    masked = url.replace("hunter2pw", "***")
    message = f"statestore: error: connect timeout: {masked} did not accept a connection within 2s"
    if command == "db check":  # the report on stdout says it, and the error line repeats it
        assert f"error\tconnect timeout: {masked} did not accept a connection within 2s" in result.stdout
    assert result.stderr.startswith(message), result.output
    assert "raise the connect timeout (--connect-timeout, [state_store] connect_timeout)" in result.stderr
    assert result.stderr.count("\n") == 1 and "hunter2pw" not in result.stdout + result.stderr
    assert elapsed < 30, f"took {elapsed:.1f}s with a 2s connect timeout"  # a hang runs into run's timeout


def test_the_connect_timeout_comes_from_the_config_too(silent, tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(
        f"[state_store]\nconnect_timeout = 2s\n[database]\nsql_alchemy_conn = {silent_url('postgresql', silent.port)}\n"
    )
    result = run_statestore_process("--config", str(cfg), "list", timeout=60)
    assert result.exit_code == 3, result.output
    assert "did not accept a connection within 2s" in result.stderr


def test_the_default_connect_timeout_is_10_seconds(silent):
    result = run_statestore_process("--conn", silent_url("mariadb", silent.port), "list", timeout=60)
    assert result.exit_code == 3, result.output
    assert "did not accept a connection within 10s" in result.stderr


@pytest.mark.parametrize(
    "signum, code, message",
    [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")],
    ids=["sigterm", "sigint"],
)
@pytest.mark.parametrize("command", ["list", "db check", "clean"])
def test_a_signal_while_connecting_ends_the_command_at_once(silent, command, signum, code, message):
    """`timeout 60 statestore clean` in cron must work even while the server does not answer."""
    proc = start_statestore(
        "--conn",
        silent_url("postgresql", silent.port),
        *COMMANDS[command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert silent.accepted.wait(30), "the command never connected"
    time.sleep(0.3)  # well inside the connect, long before its 10 s timeout
    sent = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert out == ""
    assert time.monotonic() - sent < 5, "the signal was not honoured at once"
    assert proc.returncode == code, err
    assert err == f"statestore: error: {message}\n"


# -- the connection killed mid-write -------------------------------------------------------------------------


def seed_bulk_expired(db_url: str, count: int) -> None:
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("d", "r", "t"), "first", "1", expires_at=PAST.astimezone())
    backend.engine.dispose()
    run_id = sql(db_url, "SELECT dag_run_id FROM task_state_store")[0][0]
    _insert_many(db_url, run_id, [{"r": run_id, "k": f"bulk{i:06}", "t": PAST} for i in range(count - 1)])


def _insert_many(db_url: str, run_id: int, rows: list[dict]) -> None:
    engine = engine_of(db_url)
    quoted = "`key`" if engine.dialect.name in ("mysql", "mariadb") else '"key"'
    statement = text(
        f"INSERT INTO task_state_store (dag_run_id, task_id, map_index, {quoted}, dag_id, run_id, value, "
        "updated_at, expires_at) VALUES (:r, 't', -1, :k, 'd', 'r', '1', :t, :t)"
    )
    with engine.begin() as conn:
        conn.execute(statement, rows)
    engine.dispose()


def count_rows(db_url: str) -> int:
    return sql(db_url, "SELECT count(*) FROM task_state_store")[0][0]


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_connection_killed_mid_clean_keeps_the_committed_batches_and_a_rerun_finishes(db_url):
    total = 20_000
    seed_bulk_expired(db_url, total)
    with named_session(db_url) as (url, marker):
        proc = start_statestore(
            "--conn",
            url,
            "clean",
            "--batch-size",
            "10",
            "-o",
            "json",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while count_rows(db_url) == total and time.monotonic() < deadline:
            time.sleep(0.02)
        kill_session(db_url, marker, proc)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert out == "" and err.count("\n") == 1 and err.startswith("statestore: error: database error on "), err
    done = re.search(
        r"\(the clean had deleted ([\d,]+) expired keys in ([\d,]+) committed batch(?:es)?; "
        r"they stay deleted: run clean again to finish\)\n$",
        err,
    )
    assert done, err
    deleted = int(done.group(1).replace(",", ""))
    assert int(done.group(2).replace(",", "")) == deleted // 10 and 0 < deleted < total
    # Every batch it reported stays deleted; the batch the kill interrupted was rolled back (or, if the
    # kill came just after its commit, it is deleted too).
    assert total - deleted - 10 <= count_rows(db_url) <= total - deleted
    rerun = run_statestore_process("--conn", db_url, "clean", "--batch-size", "5000", "-o", "json")
    assert rerun.exit_code == 0, rerun.output
    assert count_rows(db_url) == 0


def values(db_url: str) -> dict[str, str]:
    return dict(sql(db_url, "SELECT {key}, value FROM task_state_store ORDER BY {key}"))


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
@pytest.mark.parametrize(
    "args",
    [("set", *TASK, "k2", '"new"'), ("clear", *TASK, "--yes")],
    ids=["set", "clear"],
)
def test_a_connection_killed_mid_write_leaves_the_old_state(db_url, args):
    """`set` and `clear` are one transaction each: killed while it waits for a row lock, nothing of it stays."""
    backend = MetastoreBackend(make_engine(db_url))
    for key in ("k1", "k2", "k3"):
        backend.set(TaskScope("d", "r", "t"), key, '"old"')
    backend.engine.dispose()
    before = values(db_url)
    with named_session(db_url) as (url, marker), row_locked(db_url, "k2"):
        proc = start_statestore("--conn", url, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        kill_session(db_url, marker, proc, waiting_for_lock=True)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert out == ""
    assert err.startswith("statestore: error: database error on ") and err.count("\n") == 1, err
    assert values(db_url) == before == {"k1": '"old"', "k2": '"old"', "k3": '"old"'}
    again = run_statestore_process("--conn", db_url, *args)  # and with the server well, it works
    assert again.exit_code == 0, again.output
    assert values(db_url) == ({"k1": '"old"', "k2": '"new"', "k3": '"old"'} if args[0] == "set" else {})


# -- SQLite on a full disk -----------------------------------------------------------------------------------
def test_a_write_on_a_full_disk_fails_clearly_and_keeps_the_previous_value(small_disk):
    url = f"sqlite:///{small_disk / 'airflow.db'}"
    assert run_statestore_process("--conn", url, "db", "init").exit_code == 0
    assert run_statestore_process("--conn", url, "set", "--asset-name", "a", "k", '"before"').exit_code == 0
    filler = small_disk / "filler"
    with filler.open("wb", buffering=0) as handle:  # fill the disk to the last byte
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    big = '"' + "x" * 200_000 + '"'
    env = {**os.environ, "AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES": "0"}
    result = run_statestore_process("--conn", url, "set", "--asset-name", "a", "k", "-", input=big, env=env)
    assert result.exit_code == 3, result.stderr
    assert result.stderr == (
        f"statestore: error: database error on {url}: database or disk is full; free space on its filesystem, "
        "then retry: the previous values are kept\n"
    )
    filler.unlink()
    got = run_statestore_process("--conn", url, "get", "--asset-name", "a", "k", "-o", "json")
    assert got.exit_code == 0, got.output
    assert '"before"' in got.stdout
