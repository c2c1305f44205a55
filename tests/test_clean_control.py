"""Running a clean at scale: stopping early and cleanly, one clean at a time, safety beside writers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from cli_running import run_statestore_process, start_statestore
from servers import engine_of
from sqlalchemy import event
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine
from statestore_cli.errors import CleanRunningError
from statestore_cli.model.entries import Timeouts
from statestore_cli.ops.cleanup import CleanControl, delete_expired, iter_expired

ALL_ENGINES = True
PAST = datetime(2020, 1, 1, tzinfo=UTC)


def seed_expired(db_url: str, count: int) -> MetastoreBackend:
    backend = MetastoreBackend(make_engine(db_url))
    for i in range(count):
        backend.set(TaskScope("d", f"r{i % 3}", "t", i % 4 - 1), f"k{i:04}", "1", expires_at=PAST)
    backend.set(TaskScope("d", "r0", "t"), "alive", "1", expires_at=datetime.now(UTC) + timedelta(days=1))
    return backend


def remaining(db_url: str) -> int:
    return sql(db_url, "SELECT count(*) FROM task_state_store")[0][0]


def test_max_runtime_stops_after_the_current_batch_and_a_rerun_finishes(cli, db_url):
    seed_expired(db_url, 35)
    first = cli("clean", "--batch-size", "10", "--max-runtime", "0s", "-o", "json")
    assert first.exit_code == 4, first.output
    report = json.loads(first.stdout)
    assert (report["deleted"], report["complete"], report["stopped"], report["batches"]) == (
        10,
        False,
        "max_runtime",
        1,
    )
    assert remaining(db_url) == 26
    second = cli("clean", "--batch-size", "10", "--max-runtime", "1h", "-o", "json")
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["deleted"] == 25 and json.loads(second.stdout)["complete"] is True
    assert remaining(db_url) == 1


def test_stopped_clean_says_what_was_done(cli, db_url):
    seed_expired(db_url, 5)
    result = cli("clean", "--batch-size", "2", "--max-runtime", "0s")
    assert result.exit_code == 4
    lines = result.stderr.splitlines()
    assert lines[0].startswith("deleted 2 expired task keys in 1 batch of up to 2 (expired before ")
    assert lines[1] == (
        "stopped early (--max-runtime reached): every committed batch stays deleted; run clean again to finish"
    )


def test_a_stop_request_is_honoured_between_batches(db_url):
    seed_expired(db_url, 30)
    asked = []

    def should_stop():
        asked.append(1)
        return "interrupted" if len(asked) >= 2 else None

    engine = make_engine(db_url)
    report = delete_expired(engine, datetime.now(UTC), 7, CleanControl(should_stop=should_stop))
    assert (report.deleted, report.batches, report.stopped) == (14, 2, "interrupted")
    assert remaining(db_url) == 31 - 14


def test_summary_has_elapsed_time_and_rate(cli, db_url):
    seed_expired(db_url, 4)
    doc = json.loads(cli("clean", "-o", "json").stdout)
    assert doc["deleted"] == 4 and doc["elapsed_seconds"] >= 0 and doc["rows_per_second"] >= 0
    seed_expired(db_url, 4)
    line = cli("clean").stderr
    assert " rows/s\n" in line and ") in " in line


# -- one clean at a time ----------------------------------------------------------------------------------
def _hold_clean_lock(db_url: str):
    """Take the lock `clean --exclusive` takes, from another session, as a running clean would."""
    engine = engine_of(db_url)
    conn = engine.connect()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_lock({0x73746174657374})")  # the key `clean` uses
    elif conn.dialect.name in ("mysql", "mariadb"):
        conn.exec_driver_sql(f"SELECT GET_LOCK('statestore-clean:{conn.engine.url.database}', 0)")
    else:
        import fcntl

        handle = open(engine.url.database, "rb")  # noqa: SIM115 - held until release
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        conn.info["handle"] = handle
    return engine, conn


def test_exclusive_clean_refuses_to_queue_behind_another(cli, db_url):
    seed_expired(db_url, 3)
    engine, holder = _hold_clean_lock(db_url)
    try:
        started = time.monotonic()
        refused = cli("clean", "--exclusive")
        assert time.monotonic() - started < 10
        assert refused.exit_code == 3, refused.output
        assert refused.stderr.startswith("statestore: error: another --exclusive clean is running on ")
        assert remaining(db_url) == 4
        assert cli("clean").exit_code == 0  # without --exclusive nobody is refused
    finally:
        if "handle" in holder.info:
            holder.info["handle"].close()
        holder.close()
        engine.dispose()
    seed_expired(db_url, 3)
    assert cli("clean", "--exclusive").exit_code == 0
    assert cli("clean", "--exclusive").exit_code == 0  # the lock was released


def test_exclusive_lock_error_type(db_url):
    engine, holder = _hold_clean_lock(db_url)
    try:
        with pytest.raises(CleanRunningError):
            delete_expired(make_engine(db_url), datetime.now(UTC), 0, CleanControl(exclusive=True))
    finally:
        if "handle" in holder.info:
            holder.info["handle"].close()
        holder.close()
        engine.dispose()


# -- safety beside live writers -------------------------------------------------------------------------
def test_key_refreshed_after_the_dry_run_listed_it_survives_the_clean(db_url):
    backend = seed_expired(db_url, 3)
    cutoff = datetime.now(UTC)
    listed = [row.key for row in iter_expired(backend.engine, cutoff)]
    assert listed == ["k0000", "k0001", "k0002"]
    # the task retries and refreshes one key after the clean selected it
    backend.set(TaskScope("d", "r1", "t", 0), "k0001", "2", expires_at=datetime.now(UTC) + timedelta(hours=1))
    report = delete_expired(backend.engine, cutoff, 0)
    assert report.deleted == 2
    assert backend.get(TaskScope("d", "r1", "t", 0), "k0001") == "2"


@pytest.mark.parametrize("batch_size", [0, 2])
def test_writer_interleaved_right_before_the_delete_statement_keeps_its_key(db_url, batch_size):
    """Deterministic interleaving: the writer commits between the clean's cutoff and its DELETE."""
    seed_expired(db_url, 4)
    writer = MetastoreBackend(make_engine(db_url))
    cleaner = make_engine(db_url)
    refreshed = []

    @event.listens_for(cleaner, "before_cursor_execute")
    def refresh_first(_conn, _cursor, statement, *_args):
        if "DELETE " in statement.upper() and not refreshed:
            writer.set(TaskScope("d", "r2", "t", 1), "k0002", "3", expires_at=datetime.now(UTC) + timedelta(hours=1))
            refreshed.append(True)

    report = delete_expired(cleaner, datetime.now(UTC), batch_size)
    assert refreshed and report.deleted == 3
    assert writer.get(TaskScope("d", "r2", "t", 1), "k0002") == "3"


# -- signals (a real process, a real SIGTERM) -------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sigterm_stops_after_the_current_batch(db_url, tmp_path):
    path = db_url.removeprefix("sqlite:///")
    seed_expired(db_url, 1)
    with sqlite3.connect(path) as conn:
        run_id = conn.execute("SELECT dag_run_id FROM task_state_store LIMIT 1").fetchone()[0]
        conn.executemany(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at,"
            " expires_at) VALUES (?, 't', -1, ?, 'd', 'r', '1', '2020-01-01 00:00:00.000000', ?)",
            [(run_id, f"bulk{i}", "2020-01-01 00:00:00.000000") for i in range(60000)],
        )
    before = remaining(db_url)
    proc = start_statestore(
        "--conn",
        db_url,
        "clean",
        "--batch-size",
        "20",
        "-o",
        "json",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "STATESTORE_NO_FAST_PATH": "1"},
    )
    deadline = time.monotonic() + 60
    while remaining(db_url) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    report = json.loads(out)
    assert report["stopped"] == "terminated" and report["complete"] is False
    assert 0 < report["deleted"] < 60001 and report["deleted"] % 20 == 0
    assert remaining(db_url) == before - report["deleted"]  # every committed batch, nothing half done
    finish = run_statestore_process("--conn", db_url, "clean", "-o", "json")
    assert json.loads(finish.stdout)["deleted"] == 60001 - report["deleted"]


def test_the_cleans_session_settings_do_not_leak_to_later_use_of_the_engine(db_url):
    """The clean tunes its own connection (no foreign-key checks on SQLite, a statement timeout); later
    work on the same engine still gets cascades, the server's own statement timeout and the engine's
    lock timeout."""
    backend = seed_expired(db_url, 3)
    delete_expired(backend.engine, datetime.now(UTC), 2, CleanControl(Timeouts(statement_seconds=5)))
    with backend.engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
        elif conn.dialect.name == "postgresql":
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "0"
            assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == "30s"
        else:
            settings = "SELECT @@session.max_statement_time, @@session.innodb_lock_wait_timeout"
            assert tuple(conn.exec_driver_sql(settings).one()) == (0, 30)
    with backend.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM dag_run")
    assert remaining(db_url) == 0  # the cascade from dag_run still works
