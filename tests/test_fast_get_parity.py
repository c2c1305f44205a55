"""The fast `get` path stays one behaviour with the full CLI: it knows every option of `get`, hands
over what it does not answer, prints the same bytes on a terminal, and leaves no connection open."""

from __future__ import annotations

import gc
import json
import os
import pty
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from terminals import read_terminal

from statestore_cli.cli import fast_get
from statestore_cli.cli.root_command import app

TASK = ["--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract"]
PROBE = """
import sys
sys.argv = ["statestore", *{argv!r}]
from statestore_cli.__main__ import main
try:
    main()
finally:
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & {{"typer", "rich", "sqlalchemy"}})
    sys.stderr.write("LOADED=" + ",".join(loaded) + "\\n")
"""


def option_names(command, ctx) -> set[str]:
    return {
        name
        for param in command.get_params(ctx)
        if param.param_type_name == "option"
        for name in (*param.opts, *param.secondary_opts)
    }


def test_the_fast_path_knows_every_option_of_get_and_of_the_root():
    """A new option of `get` fails this test until the fast path answers it or hands it over."""
    group = typer.main.get_command(app)
    root_ctx = group.context_class(group, info_name="statestore", **group.context_settings)
    get = group.commands["get"]
    get_ctx = get.context_class(get, info_name="get", parent=root_ctx)
    assert option_names(group, root_ctx) == {*fast_get.ROOT_OPTIONS, *fast_get.ROOT_HANDED_OVER}
    assert option_names(get, get_ctx) == {*fast_get.GET_OPTIONS, *fast_get.GET_HANDED_OVER}


@pytest.mark.parametrize(
    "argv",
    [
        [*fast_get.ROOT_HANDED_OVER[:1], "get", *TASK, "k"],
        ["get", *TASK, "k", "--bogus"],
        ["get", *TASK, "k", "--bogus=1"],
        ["--bogus", "get", *TASK, "k"],
        ["get", *TASK, "k", "-o=json"],
        ["get", *TASK, "k", "-ojson"],
        ["get", *TASK, "--dag-id", "again", "k"],
        ["get", *TASK, "k", "--", "x"],
        *(["get", *TASK, "k", name, "x"] for name in fast_get.GET_HANDED_OVER),
        *([name, "get", *TASK, "k"] for name in fast_get.ROOT_HANDED_OVER),
    ],
)
def test_options_the_fast_path_does_not_answer_go_to_the_full_cli(argv, tmp_path):
    """Decided before any configuration or database is read: an absent store cannot change it."""
    assert fast_get.answer(["--conn", f"sqlite:///{tmp_path / 'absent.db'}", *argv], environ={}) is None


def run(argv: list[str], cwd: Path, fast: bool) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STATESTORE_NO_FAST_PATH"}
    if not fast:
        env["STATESTORE_NO_FAST_PATH"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, env=env, cwd=cwd
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def store(cli, db_url):
    assert cli("set", *TASK, "job", '{"id": "j-1", "list": [1, 2], "w": "\\u00e9\\u001b"}').exit_code == 0
    return db_url


@pytest.mark.slow
@pytest.mark.parametrize("extra", [["--bogus"], ["-o=json"], ["--output", "yaml"]])
def test_an_option_the_fast_path_does_not_read_gets_the_full_clis_answer(store, tmp_path, extra):
    argv = ["--conn", store, "get", *TASK, "job", *extra]
    fast_code, fast_out, fast_err = run(argv, tmp_path, fast=True)
    full_code, full_out, full_err = run(argv, tmp_path, fast=False)
    assert (fast_code, fast_out) == (full_code, full_out) and fast_code == 2
    assert fast_err == full_err and "typer" in fast_err.rpartition("LOADED=")[2]


def run_on_terminal(argv: list[str], cwd: Path, fast: bool) -> tuple[int, bytes, str]:
    """stdout is a pseudo-terminal (what `auto` looks at); stderr a pipe."""
    env = {k: v for k, v in os.environ.items() if k != "STATESTORE_NO_FAST_PATH"}
    env.update(COLUMNS="100", TERM="xterm-256color")
    if not fast:
        env["STATESTORE_NO_FAST_PATH"] = "1"
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        stdout=secondary,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    os.close(secondary)
    seen = read_terminal(primary, proc)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    return proc.wait(timeout=20), seen, stderr


@pytest.mark.slow
@pytest.mark.parametrize("key", ["job", "missing"])
def test_auto_output_on_a_terminal_is_the_full_clis(store, tmp_path, key):
    argv = ["--conn", store, "get", *TASK, key]
    fast = run_on_terminal(argv, tmp_path, fast=True)
    full = run_on_terminal(argv, tmp_path, fast=False)
    assert fast[:2] == full[:2]
    assert fast[2].rpartition("LOADED=")[0] == full[2].rpartition("LOADED=")[0]
    assert fast[2].rpartition("LOADED=")[2].strip() == "", "the fast path loaded the full CLI"
    if key == "job":  # a terminal gets the indented form (table mode), not the one-line plain form
        assert fast[1].replace(b"\r\n", b"\n").decode() == (
            json.dumps({"id": "j-1", "list": [1, 2], "w": "\u00e9\x1b"}, ensure_ascii=False, indent=2).replace(
                "\x1b", "\\u001b"
            )
            + "\n"
        )
    else:
        assert fast[0] == 1


def test_the_sqlite_connection_is_closed(store, capsys):
    """`with sqlite3.connect()` only ends the transaction; the fast path closes the connection itself."""
    closed: list[sqlite3.Connection] = []

    def watch(_frame, event, arg):
        owner = getattr(arg, "__self__", None)
        if event == "c_call" and getattr(arg, "__name__", "") == "close" and isinstance(owner, sqlite3.Connection):
            closed.append(owner)

    gc.collect()  # an engine the fixture's `set` left behind closes its connections when collected: not during the call
    before = open_descriptors(store)
    sys.setprofile(watch)
    try:
        code = fast_get.answer(["--conn", store, "get", *TASK, "job"], environ={})
    finally:
        sys.setprofile(None)
    assert code == 0 and json.loads(capsys.readouterr().out)["id"] == "j-1"
    assert len(closed) == 1
    assert open_descriptors(store) == before  # (the test's own engine may hold the file open too)


def open_descriptors(url: str) -> set[str] | None:
    """This process's file descriptors open on the store's file (None where /proc is not there)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        return None
    path = os.path.realpath(url.removeprefix("sqlite:///"))
    found = set()
    for fd in fds.iterdir():
        try:
            if os.path.realpath(fd) == path:
                found.add(fd.name)
        except OSError:  # closed while we looked
            continue
    return found
