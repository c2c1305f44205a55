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


# -- both paths on the same stores, in this process: what the fast path answers is the full CLI's answer -----
RUN = ["--dag-id", "etl", "--run-id", "manual__1"]


@pytest.fixture
def keys(cli, db_url):
    """A SQLite store holding each kind of answer `get` gives: JSON documents, a string, a number, a key at
    another map index, an expired key (not yet cleaned), an asset key."""
    for args in (
        [*TASK, "job", '{"id": "j-1", "list": [1, 2], "w": "\\u00e9\\u001b", "n": null}', "--retention", "6h"],
        [*TASK, "--map-index", "3", "job", "[1, 2.5, true]", "--retention", "never"],
        [*TASK, "text", "a line\ttab", "--string"],
        [*TASK, "count", "42"],
        [*TASK, "old", '"stale"', "--expires-at", "2020-01-01T00:00:00Z", "--force"],
        ["--asset-name", "orders", "watermark", '"2026-11-30"'],
    ):
        assert cli("set", *args).exit_code == 0, args
    return db_url


def fast_answer(argv: list[str], capsys) -> tuple[int, str, str] | None:
    """The fast path's exit code, stdout and stderr; None when it handed over (having printed nothing)."""
    capsys.readouterr()
    code = fast_get.answer(argv, environ={})
    out, err = capsys.readouterr()
    if code is None:
        assert (out, err) == ("", ""), "a hand-over prints nothing: the full CLI answers alone"
        return None
    return code, out, err


def full_answer(argv: list[str]) -> tuple[int, str, str]:
    from cli_running import run_cli

    result = run_cli(*argv)
    return result.exit_code, result.stdout, result.stderr


ANSWERED = [
    pytest.param([*TASK, "job", *mode], id=f"json-object-{mode[-1] if mode else 'auto'}")
    for mode in ([], ["-o", "plain"], ["-o", "json"], ["--output=table"])
] + [
    pytest.param([*TASK, "--map-index", "3", "job", "-o", "json"], id="json-array-map-index"),
    pytest.param([*TASK, "--map-index=3", "job", "-o", "table"], id="json-array-table"),
    pytest.param([*TASK, "text"], id="string-plain"),
    pytest.param([*TASK, "text", "-o", "json"], id="string-json"),
    pytest.param([*TASK, "count", "-o", "table"], id="number-table"),
    pytest.param([*TASK, "old"], id="expired-plain"),
    pytest.param([*TASK, "old", "-o", "json"], id="expired-json"),
    pytest.param([*TASK, "old", "-o", "table"], id="expired-table-notice"),
    pytest.param([*TASK, "missing"], id="missing-key"),
    pytest.param([*TASK, "--map-index", "7", "job"], id="missing-here-found-at-other-map-index"),
    pytest.param([*RUN, "--task-id", "other", "job", "-o", "json"], id="missing-task"),
    pytest.param(["--dag-id", "etl", "--run-id", "no_such_run", "--task-id", "extract", "job"], id="missing-run"),
]


@pytest.mark.parametrize("args", ANSWERED)
def test_what_the_fast_path_answers_is_byte_for_byte_the_full_clis(keys, capsys, args):
    argv = ["--conn", keys, "get", *args]
    fast = fast_answer(argv, capsys)
    assert fast is not None, "the fast path answers this itself"
    assert fast == full_answer(argv)


HANDED_OVER = [
    pytest.param(["get", "--asset-name", "orders", "watermark"], id="asset-scope"),
    pytest.param(["get", "--asset-name", "orders", "missing"], id="asset-scope-missing"),
    pytest.param(["get", *TASK, ""], id="empty-key"),
    pytest.param(["get", *TASK, "--map-index", "x", "job"], id="map-index-not-a-number"),
    pytest.param(["get", *TASK, "job", "-o", "yaml"], id="unknown-output"),
    pytest.param(["get", "--dag-id", "etl", "job"], id="incomplete-scope"),
]


@pytest.mark.parametrize("args", HANDED_OVER)
def test_what_the_fast_path_hands_over_it_leaves_wholly_to_the_full_cli(keys, capsys, args):
    """Asset scopes and bad input: the fast path prints nothing and the full CLI gives its answer (checked here
    to be an answer: a value, or an error with its exit code)."""
    argv = ["--conn", keys, *args]
    assert fast_answer(argv, capsys) is None
    code, out, err = full_answer(argv)
    assert (code == 0 and out and not err) or (code != 0 and not out and err.startswith("statestore: error: "))


def test_a_store_the_fast_path_cannot_read_is_the_full_clis_error(tmp_path, capsys):
    """A missing file, a file without the tables, a file that is no database: the full CLI's error and exit
    code, never a second answer from the fast path."""
    (tmp_path / "empty.db").touch()
    sqlite3.connect(tmp_path / "bare.db").close()
    (tmp_path / "junk.db").write_bytes(b"not a database, just bytes" * 100)
    for name, code in (("absent.db", 3), ("empty.db", 3), ("bare.db", 3), ("junk.db", 3)):
        argv = ["--conn", f"sqlite:///{tmp_path / name}", "get", *TASK, "job"]
        assert fast_answer(argv, capsys) is None, name
        full = full_answer(argv)
        assert (full[0], full[1]) == (code, ""), (name, full)
        assert full[2].startswith("statestore: error: "), (name, full)
