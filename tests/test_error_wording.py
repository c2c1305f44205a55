"""The library names its own parameters; the CLI words the same errors with its flags. A clean's stop
reasons carry their exit codes, and the CLI exits with them."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from statestore_cli import AssetScope, InvalidInputError, MetastoreBackend, TaskScope, load_settings
from statestore_cli.backends.store import Store
from statestore_cli.db.database import make_engine
from statestore_cli.errors import CleanRunningError, ConfigError, StopReason
from statestore_cli.model.entries import Timeouts
from statestore_cli.ops.cleanup import CleanControl, delete_expired
from statestore_cli.ops.commands import set_value

TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")
PAST = datetime(2020, 1, 1, tzinfo=UTC)


def one_error_line(result) -> str:
    assert result.stderr.startswith("statestore: error: ") and result.stderr.count("\n") == 1, result.output
    return result.stderr.removeprefix("statestore: error: ").rstrip("\n")


def test_retention_on_an_asset_key(cli, db_url):
    with pytest.raises(InvalidInputError) as caught:
        set_value(Store.open(load_settings(conn_override=db_url)), AssetScope(name="a"), "k", 1, timedelta(days=1))
    assert str(caught.value) == "retention applies to task and dag-run keys only; asset keys never expire"
    assert caught.value.parameter == "retention"
    result = cli("set", "--asset-name", "a", "k", "1", "--retention", "1d")
    assert result.exit_code == 2
    assert one_error_line(result) == "--retention applies to task and dag-run keys only; asset keys never expire"


def test_missing_config_file(cli, tmp_path):
    missing = tmp_path / "nope.cfg"
    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=missing)
    assert str(caught.value) == f"config file {missing} does not exist; pass an existing file to config_path"
    result = cli("--config", str(missing), "db", "check", conn=None)
    assert result.exit_code == 2
    assert one_error_line(result) == f"config file {missing} does not exist; pass an existing file to --config"


def test_invalid_conn_override(cli):
    with pytest.raises(ConfigError) as caught:
        load_settings(conn_override="   ")
    assert str(caught.value).startswith("conn_override: invalid value '   ' for [database] sql_alchemy_conn")
    result = cli("db", "check", conn="   ")
    assert result.exit_code == 2
    assert one_error_line(result).startswith("--conn: invalid value '   ' for [database] sql_alchemy_conn")


def test_a_timeout_the_engine_lacks_is_a_note_in_each_ones_terms(cli, db_url):
    report = delete_expired(make_engine(db_url), datetime.now(UTC), 0, CleanControl(Timeouts(statement_seconds=5)))
    assert [str(note) for note in report.notes] == [
        "SQLite has no statement timeout; statement_seconds was not applied"
    ]
    result = cli("clean", "--statement-timeout", "5s")
    note = result.stderr.splitlines()[0]  # then the summary, on stderr too (stdout is not a terminal)
    assert note == "statestore: note: SQLite has no statement timeout; --statement-timeout was not applied"


def test_another_exclusive_clean(cli, db_url):
    with open(db_url.removeprefix("sqlite:///"), "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(CleanRunningError) as caught:
            delete_expired(make_engine(db_url), datetime.now(UTC), 0, CleanControl(exclusive=True))
        assert str(caught.value).startswith("another exclusive clean is running on ")
        result = cli("clean", "--exclusive")
    assert result.exit_code == 3
    assert one_error_line(result).startswith("another --exclusive clean is running on ")


def test_each_stop_reason_carries_its_exit_code():
    assert {reason: reason.exit_code for reason in StopReason} == {
        StopReason.INTERRUPTED: 130,
        StopReason.TERMINATED: 143,
        StopReason.MAX_RUNTIME: 4,
    }


@pytest.mark.parametrize("reason", list(StopReason))
def test_a_stopped_clean_reports_its_reason_and_exit_code(db_url, reason):
    backend = MetastoreBackend(make_engine(db_url))
    for i in range(5):
        backend.set(TaskScope("d", "r", "t"), f"k{i}", "1", expires_at=PAST)
    report = delete_expired(backend.engine, datetime.now(UTC), 2, CleanControl(should_stop=lambda: reason))
    assert (report.deleted, report.stopped, report.exit_code) == (2, reason, reason.exit_code)
    finished = delete_expired(backend.engine, datetime.now(UTC), 2)
    assert (finished.deleted, finished.stopped, finished.exit_code) == (3, None, 0)


def test_db_check_of_a_store_without_tables_exits_3_with_one_line(cli, tmp_path):
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    result = cli("db", "check", conn=f"sqlite:///{empty}")
    assert result.exit_code == 3
    assert one_error_line(result) == (
        "the state store is not usable: missing tables task_state_store, asset_state_store, dag_run, asset, "
        "asset_active; the URL is the one --conn gave; if the store is elsewhere, fix --conn; to create them "
        f"here, run `statestore --conn sqlite:///{empty} db init`"
    )


@pytest.mark.slow
def test_a_clear_answered_no_deletes_nothing_and_says_so_as_one_error_line(cli, db_url):
    assert cli("set", *TASK, "a", "1").exit_code == 0
    primary, secondary = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "STATESTORE_NO_FAST_PATH": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "statestore_cli", "--conn", db_url, "clear", *TASK],
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=secondary,  # the question goes to stderr, so stdout keeps only results
        env=env,
    )
    os.close(secondary)
    seen = b""
    while b"[y/N] " not in seen:
        ready, _, _ = select.select([primary], [], [], 20)
        assert ready, f"no question on the terminal; so far {seen!r}"
        seen += os.read(primary, 4096)
    os.write(primary, b"n\n")
    stdout, _ = proc.communicate(timeout=20)
    while True:
        ready, _, _ = select.select([primary], [], [], 5)
        try:
            chunk = os.read(primary, 4096) if ready else b""
        except OSError:  # the child closed the terminal
            chunk = b""
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    assert (proc.returncode, stdout) == (1, b"")
    # the answer's newline is the terminal's echo: the error is a line of its own
    assert seen.decode().endswith("? [y/N] n\r\nstatestore: nothing deleted (answered no)\r\n"), seen
    assert cli("get", *TASK, "a").exit_code == 0
