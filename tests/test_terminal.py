"""Behaviour that needs a real terminal (a pseudo-terminal here)."""

from __future__ import annotations

import os
import pty
import sqlite3
import subprocess
from pathlib import Path

import pytest
from cli_running import start_statestore
from terminals import read_terminal

pytestmark = pytest.mark.slow  # real processes on pseudo-terminals

TASK = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]


def run_in_pty(args: list[str], answer: str | None, env: dict[str, str]) -> tuple[int, str]:
    """Run ``python -m statestore_cli ARGS`` with a terminal on stdin/stdout, typing ``answer``."""
    primary, secondary = pty.openpty()
    proc = start_statestore(
        *args,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env,
        close_fds=True,
    )
    os.close(secondary)
    answered = answer is None

    def answer_the_prompt(seen: bytes) -> None:
        nonlocal answered
        if not answered and b"[y/N]" in seen:
            os.write(primary, f"{answer}\n".encode())
            answered = True

    seen = read_terminal(primary, proc, answer_the_prompt)
    return proc.wait(timeout=20), seen.decode(errors="replace")


def _count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM task_state_store").fetchone()[0]


@pytest.mark.parametrize("answer, code, remaining", [("y", 0, 0), ("n", 1, 2)])
def test_clear_asks_on_a_terminal(cli, db_url, answer, code, remaining):
    cli("set", *TASK, "a", "1")
    cli("set", *TASK, "b", "1")
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    status, screen = run_in_pty(["--conn", db_url, "clear", *TASK], answer, env)
    assert status == code, screen
    assert "Delete 2 keys of dag_id=d run_id=r task_id=t map_index=-1? [y/N]" in screen
    assert _count(Path(db_url.removeprefix("sqlite:///"))) == remaining
    assert ("deleted 2 keys of" in screen) is (answer == "y")


def test_terminal_output_is_a_table_and_no_color_is_respected(cli, db_url):
    cli("set", *TASK, "a", "1")
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    _, coloured = run_in_pty(["--conn", db_url, "list"], None, env)
    assert "┏" in coloured and "\x1b[" in coloured  # a rich table, styled
    _, plain = run_in_pty(["--conn", db_url, "list"], None, {**env, "NO_COLOR": "1"})
    assert "┏" in plain and "\x1b[1m" not in plain and "\x1b[3" not in plain


def _expired_rows(db: Path, count: int) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO dag_run (id, dag_id, run_id) VALUES (1, 'd', 'r')")
        conn.executemany(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at,"
            " expires_at) VALUES (1, 't', -1, ?, 'd', 'r', '1', ?, ?)",
            [(f"k{i}", "2020-01-01 00:00:00.000000", "2020-01-01 00:00:00.000000") for i in range(count)],
        )


def test_clean_shows_a_progress_bar_on_a_terminal_only(cli, db_url):
    db = Path(db_url.removeprefix("sqlite:///"))
    _expired_rows(db, 3000)
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    status, screen = run_in_pty(["--conn", db_url, "clean", "--batch-size", "10"], None, env)
    assert status == 0, screen
    assert "deleting expired keys" in screen and "rows/s" in screen
    assert "deleted 3,000 expired task keys in 300 batches of up to 10" in screen
    piped = cli("clean", "--batch-size", "10")  # in-process: not a terminal
    assert "deleting expired keys" not in piped.stdout + piped.stderr


def test_import_shows_a_progress_bar_on_stderr_on_a_terminal_only(cli, db_url, tmp_path):
    db = Path(db_url.removeprefix("sqlite:///"))
    _expired_rows(db, 3000)
    export = tmp_path / "keys.jsonl"
    assert cli("export", "--file", str(export)).exit_code == 0
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    status, screen = run_in_pty(["--conn", db_url, "import", "--batch-size", "10", str(export)], None, env)
    assert status == 0, screen
    assert "importing keys" in screen and "/3,000" in screen and "rows/s" in screen
    piped = cli("import", "--batch-size", "10", str(export))  # in-process: not a terminal
    assert piped.exit_code == 0 and "importing keys" not in piped.stdout + piped.stderr
    # stdout a pipe, stderr the terminal (`import -o json | jq`): the bar is drawn on stderr only.
    primary, secondary = pty.openpty()
    proc = start_statestore(
        "--conn",
        db_url,
        "import",
        "-o",
        "json",
        "--batch-size",
        "10",
        str(export),
        stdout=subprocess.PIPE,
        stderr=secondary,
        env=env,
        close_fds=True,
    )
    os.close(secondary)
    stderr = read_terminal(primary, proc).decode(errors="replace")
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.wait(timeout=20) == 0
    assert "importing keys" in stderr and "importing keys" not in stdout and stdout.startswith("{")
