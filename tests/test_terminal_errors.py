"""Errors a person can read at a terminal, one line in a pipe.

At a terminal (stderr a tty) an error is broken between words at the terminal's width, the problem first and
each detail or fix on a ``hint:`` line; in a pipe it stays the one line it always was. The split is checked as
a property of the rule (``cli.output.message_layout``) over every message of docs/errors.md, and the layout against
golden files: ``tests/expected/terminal_errors/NAME.txt`` holds what the real command writes on an 80-column
pseudo-terminal for each row of the "Bad input" table (``test_bad_input.CASES``) and for the faults with a
message of their own. Regenerate them with ``STATESTORE_UPDATE_EXPECTED=1`` and review the diff.

Paths in the messages are the test's folder, whose name varies: each case runs in a folder of a fixed length,
``/tmp/ssg-XXXXXXXX``, so the lines break where they would for any folder of that length, and the comparison
puts the placeholder back in the place of the random part.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import sqlite3
import struct
import subprocess
import tempfile
import termios
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

import pytest
from bad_input_cases import CASES, Case, seed
from cli_running import LOADED_PROBE, run_cli, start_statestore, statestore_argv
from expected_output import assert_expected
from hypothesis import given
from hypothesis import strategies as st
from paths import REPO
from stores import isolated_database
from terminals import read_terminal

from statestore_cli.cli.output.message_layout import HINT, message_parts, stderr_message, words
from statestore_cli.errors import InvalidInputError

COLUMNS = 80
FOLDER = "/tmp/ssg-XXXXXXXX"  # what every case's folder is shown as (tempfile's random names are 8 characters)
TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")


# -- the split: the rule, and what it does to every documented message ------------------------------------------
def documented_messages() -> list[str]:
    """The messages of docs/errors.md: the "what you get" column of its tables, and the errors quoted in its
    text (``statestore: error: …``), without their "error: " or "warning: "."""
    page = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    found = []
    for row in page.splitlines():
        cells = row.split(" | ")
        if row.startswith("| ") and len(cells) >= 3 and cells[-2] != "what you get" and not row.startswith("|--"):
            found.append(re.sub(r"^(after the lock timeout: )?(error|warning): ", "", cells[-2]))
    quoted = re.findall(r"`statestore: error: ([^`]*)`", re.sub(r"\n *", " ", page))
    return [m for m in found + quoted if not m.startswith("see [")]


def test_the_documented_messages_are_found():
    messages = documented_messages()
    assert len(messages) >= 60
    assert "VALUE is JSON null, which cannot be stored; delete the key instead" in messages


def unwrapped(block: str, width: int) -> str:
    """The parts of laid-out lines, joined by NUL: the prefix and "hint: " off, each continuation line's indent
    off (aligned under the text while 40 columns are left for it, else two spaces) and the line joined to the one
    before with a space."""
    lines = block.rstrip("\n").split("\n")
    prefix = next(p for p in ("statestore: error: ", "statestore: warning: ", "statestore: ") if lines[0].startswith(p))
    texts = [lines[0].removeprefix(prefix)]
    indent = len(prefix) if width - len(prefix) >= 40 else 2
    for line in lines[1:]:
        if line.startswith(HINT):
            texts.append(line.removeprefix(HINT))
            indent = len(HINT) if width - len(HINT) >= 40 else 2
        else:
            assert line.startswith(" " * indent), (indent, line)
            texts[-1] += " " + line[indent:]
    return "\x00".join(texts)


@pytest.mark.parametrize("text", documented_messages() + [case.message for case in CASES])
def test_every_documented_message_splits_into_parts_that_give_it_back(text):
    parts = message_parts(text)
    assert "; ".join(parts) == text
    assert all(part and part == part.strip() for part in parts)
    for width in (40, 80, 120):
        assert unwrapped(stderr_message("statestore: error: ", text, width), width).split("\x00") == parts


@pytest.mark.parametrize(
    "text, parts",
    [
        (
            "VALUE is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2); "
            "quote it as JSON or pass --string to store it as a string",
            [
                "VALUE is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)",
                "quote it as JSON or pass --string to store it as a string",
            ],
        ),
        # quotes, backticks, brackets of each kind, a path: none is split, however a value reads
        ("value 'a; b' is bad; fix it", ["value 'a; b' is bad", "fix it"]),
        ('value "a; b" is bad; fix it', ['value "a; b" is bad', "fix it"]),
        ("run `set k 1; get k`; then look", ["run `set k 1; get k`", "then look"]),
        ("a (b; c (d; e) f) g; h", ["a (b; c (d; e) f) g", "h"]),
        ("a [b; c] {d; e}; f", ["a [b; c] {d; e}", "f"]),
        (
            "no state store at /srv/a; b/airflow.db: missing; create it",
            ["no state store at /srv/a; b/airflow.db: missing", "create it"],
        ),
        # an apostrophe opens no quote; a quote never closed leaves the rest whole
        ("the dag run's keys are gone; run it again", ["the dag run's keys are gone", "run it again"]),
        ("value 'a; b is bad; fix it", ["value 'a; b is bad; fix it"]),
        # an empty part would be an empty hint: no split at all
        ("a; ; b", ["a; ; b"]),
        ("a;b; c", ["a;b", "c"]),
    ],
)
def test_the_rule_splits_at_semicolons_outside_quotes_brackets_and_paths(text, parts):
    assert message_parts(text) == parts


QUOTED = st.text(st.characters(blacklist_characters="'`\"()[]{}", blacklist_categories=("Cs",)), max_size=30)
TEXT = st.lists(st.sampled_from([*"ab /'\"`()[]{}:;", "; ", ": "]), max_size=40).map("".join)


@given(before=TEXT, inner=QUOTED, after=TEXT, quote=st.sampled_from(["'", '"', "`"]))
def test_a_quoted_value_is_never_split(before, inner, after, quote):
    text = f"{before} {quote}{inner}{quote} {after}"
    parts = message_parts(text)
    assert "; ".join(parts) == text
    start = len(before) + 1
    cuts = [sum(len(p) + 2 for p in parts[:n]) - 2 for n in range(1, len(parts))]  # where each "; " was
    assert not any(start < cut < start + len(inner) + 2 for cut in cuts), parts


@given(text=TEXT, problem=TEXT)
def test_the_parts_always_give_the_message_back(text, problem):
    parts = message_parts(text)
    assert "; ".join(parts) == text
    explicit = message_parts(f"{problem}: {text}", problem)
    if explicit[0] == problem and len(explicit) > 1:
        assert f"{problem}: " + "; ".join(explicit[1:]) == f"{problem}: {text}"
    else:
        assert "; ".join(explicit) == f"{problem}: {text}"


# -- the layout: widths, indents, nothing lost ----------------------------------------------------------------------
def one_word(line: str) -> bool:
    """Whether ``line`` holds one word after its prefix or indent (a path, a URL, a quoted value): a word
    wider than the line."""
    text = line.removeprefix("statestore: error: ").removeprefix("statestore: warning: ").removeprefix(HINT)
    return len(words(text.lstrip(" "))) == 1


@given(
    words=st.lists(st.text(st.sampled_from("abc/'é注"), min_size=1, max_size=30), min_size=1, max_size=40),
    seps=st.lists(st.sampled_from([" ", " ", " ", "  ", "; "]), min_size=40, max_size=40),
    width=st.integers(min_value=20, max_value=140),
)
def test_the_layout_breaks_between_words_within_the_width_and_loses_nothing(words, seps, width):
    text = "".join(word + sep for word, sep in zip(words, seps, strict=False)).rstrip("; ")
    block = stderr_message("statestore: error: ", text, width)
    assert "; ".join(unwrapped(block, width).split("\x00")) == text
    for line in block.splitlines():
        columns = sum(2 if c == "注" else 1 for c in line)
        assert columns <= width or one_word(line), (width, line)


def test_in_a_pipe_the_message_is_the_one_line_it_always_was():
    text = "key 'a\x1bb' is bad; fix it"
    assert stderr_message("statestore: error: ", text, None) == "statestore: error: key 'a\\x1bb' is bad; fix it\n"


def test_an_explicit_problem_ends_at_its_colon_and_is_given_up_if_the_text_changed():
    error = InvalidInputError("no scope given", hint="give --dag-id, --run-id and --task-id")
    assert str(error) == "no scope given: give --dag-id, --run-id and --task-id"
    problem = error.worded_problem({})
    assert stderr_message("statestore: error: ", str(error), 80, problem=problem) == (
        "statestore: error: no scope given\nhint: give --dag-id, --run-id and --task-id\n"
    )
    masked = "no scope ***: give --dag-id"  # what a masking of the text would leave: the rule, not the problem
    assert stderr_message("statestore: error: ", masked, 80, problem=problem) == f"statestore: error: {masked}\n"


def test_a_narrow_terminal_indents_by_two_spaces():
    block = stderr_message("statestore: error: ", "a " * 20 + "b; fix it", 40)
    assert block == ("statestore: error: a a a a a a a a a a a\n  a a a a a a a a a b\nhint: fix it\n")


def test_a_word_wider_than_the_line_has_a_line_of_its_own():
    url = "sqlite:////" + "x" * 90 + "/airflow.db"
    block = stderr_message("statestore: error: ", f"no state store at {url}: missing; create it", 80)
    indent = " " * len("statestore: error: ")
    assert block == f"statestore: error: no state store at\n{indent}{url}:\n{indent}missing\nhint: create it\n"


# -- the real commands on an 80-column pseudo-terminal -------------------------------------------------------------
class Run(NamedTuple):
    code: int
    stderr: str  # what the terminal showed, "\r\n" back to "\n"
    stdout: str


def in_terminal(
    args: list[str], env: dict[str, str], cwd: Path, columns: int = COLUMNS, code: str | None = None
) -> Run:
    """``statestore ARGS`` with stderr on a pseudo-terminal ``columns`` wide (set on the terminal itself,
    not by $COLUMNS), stdout a pipe and stdin nothing (no question can be answered); ``code``: a new
    interpreter running it (``statestore_argv``)."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": secondary}
    if code is None:
        proc = start_statestore(*args, **streams, env=env, cwd=cwd, close_fds=True)
    else:
        proc = subprocess.Popen(statestore_argv(*args, code=code), **streams, env=env, cwd=cwd, close_fds=True)
    os.close(secondary)
    seen = read_terminal(primary, proc)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    return Run(proc.wait(timeout=60), seen.decode(errors="replace").replace("\r\n", "\n"), stdout)


def in_a_pipe(args: list[str], env: dict[str, str], cwd: Path) -> Run:
    proc = start_statestore(
        *args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd
    )
    stdout, stderr = proc.communicate(timeout=60)
    return Run(proc.returncode, stderr.decode(errors="replace"), stdout.decode(errors="replace"))


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder whose path is as long as ``FOLDER``: the lines of a message naming it break as in the goldens."""
    made = tempfile.mkdtemp(prefix="ssg-", dir="/tmp")
    assert len(made) == len(FOLDER), made
    (Path(made) / "home").mkdir()
    yield Path(made)
    shutil.rmtree(made)


def environment(folder: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without the developer's Airflow, $COLUMNS or colours; AIRFLOW_HOME in ``folder``."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AIRFLOW__")
        and name not in ("AIRFLOW_HOME", "AIRFLOW_CONFIG", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")
    }
    return {**kept, "AIRFLOW_HOME": str(folder / "home"), "TERM": "dumb", **(extra or {})}


def check_layout(run: Run, piped: Run, folder: Path) -> str:
    """The terminal's stderr with the folder as ``FOLDER``, after checking it against the same command's
    one line in a pipe: the same words in the same order, every line within the width."""
    assert run.code == piped.code, (run, piped)
    assert piped.stderr.count("\n") == 1 or "warning:" in piped.stderr, piped.stderr
    assert squeezed(re.sub(r"(?m)^hint: ", "", run.stderr)) == squeezed(piped.stderr), (run.stderr, piped.stderr)
    for line in run.stderr.splitlines():
        assert len(line) <= COLUMNS or one_word(line), line
    assert "Traceback" not in run.stderr and "s3cret" not in run.stderr + run.stdout
    return run.stderr.replace(str(folder), FOLDER)


def squeezed(text: str) -> str:
    """``text`` without what the layout may change: white space, and the "; " or ": " where a line ends."""
    return re.sub(r"[\s;:]", "", text)


def case_arguments(case: Case, folder: Path, stack: ExitStack, tmp_path: Path) -> list[str]:
    """The case's command line in ``folder``: its store seeded (on its first engine), its config file written."""
    engine = case.engines[0]
    url = (
        f"sqlite:///{folder / 'store.db'}"
        if engine == "sqlite"
        else stack.enter_context(isolated_database(engine, tmp_path))
    )
    seed(url)
    fill = {"url": url, "home": str(folder / "home"), "cfg": str(folder / "airflow.cfg")}
    conn = url
    if case.conn is not None and "{bare}" in case.conn:
        conn = f"sqlite:///{folder / 'bare.db'}"
        sqlite3.connect(folder / "bare.db").close()
    elif case.conn is not None:
        conn = case.conn.format(**fill)
    args = ["--conn", conn] if conn else []
    if case.cfg is not None:
        Path(fill["cfg"]).write_bytes(case.cfg if isinstance(case.cfg, bytes) else case.cfg.encode())
        args += ["--config", fill["cfg"]]
    return args + [arg.replace("{cfg}", fill["cfg"]).replace("{home}", fill["home"]) for arg in case.args]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_at_an_80_column_terminal(case, folder, tmp_path):
    with ExitStack() as stack:
        args = case_arguments(case, folder, stack, tmp_path)
        env = environment(folder, case.env)
        run = in_terminal(args, env, folder)
        assert run.code == case.code, run
        shown = check_layout(run, in_a_pipe(args, env, folder), folder)
    assert_expected(f"terminal_errors/{case.id}.txt", shown)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, args",
    [
        ("list-empty-home", ["list"]),  # the default store under an AIRFLOW_HOME holding nothing
        ("get-no-scope", ["get", "k"]),
    ],
)
def test_a_new_users_first_commands_at_an_80_column_terminal(name, args, folder):
    env = environment(folder)
    run = in_terminal(args, env, folder)
    shown = check_layout(run, in_a_pipe(args, env, folder), folder)
    assert_expected(f"terminal_errors/{name}.txt", shown)
    assert run.stderr.startswith("statestore: error: no s")  # the problem first: no state store, no scope


@pytest.mark.slow
def test_a_lock_timeout_at_an_80_column_terminal(folder):
    url = f"sqlite:///{folder / 'store.db'}"
    seed(url)
    args = ["--conn", url, "set", *TASK, "k", '"new"', "--lock-timeout", "1s"]
    env = environment(folder)
    holder = sqlite3.connect(folder / "store.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        run = in_terminal(args, env, folder)
        shown = check_layout(run, in_a_pipe(args, env, folder), folder)
    finally:
        holder.close()
    assert run.code == 3
    assert_expected("terminal_errors/lock-timeout.txt", shown)


@pytest.mark.slow
def test_a_connect_timeout_at_an_80_column_terminal(folder):
    from faults import SilentServer

    server = SilentServer()
    try:
        port = str(server.port)
        assert len(port) == 5, port  # the placeholder's length: the lines break as in the golden file
        args = ["--connect-timeout", "2s", "--conn", f"postgresql+psycopg://airflow:s3cret@127.0.0.1:{port}/airflow"]
        env = environment(folder)
        run = in_terminal([*args, "list"], env, folder)
        shown = check_layout(run, in_a_pipe([*args, "list"], env, folder), folder)
    finally:
        server.close()
    assert run.code == 3
    assert_expected("terminal_errors/connect-timeout.txt", shown.replace(f":{port}/", ":PPPPP/"))


@pytest.mark.slow
def test_the_fast_get_path_lays_its_error_out_as_the_full_cli_does(folder):
    url = f"sqlite:///{folder / 'store.db'}"
    seed(url)
    assert run_cli("set", *TASK, "--map-index", "3", "job", "1", conn=url).exit_code == 0
    args = ["--conn", url, "get", *TASK, "job"]
    fast = in_terminal(args, environment(folder), folder, code=LOADED_PROBE)
    full = in_terminal(args, environment(folder, {"STATESTORE_NO_FAST_PATH": "1"}), folder)
    assert fast.stdout == "LOADED=\n"  # the fast path answered, without typer, rich or SQLAlchemy
    assert (fast.code, fast.stderr) == (full.code, full.stderr) == (1, fast.stderr)
    assert check_layout(fast, in_a_pipe(args, environment(folder), folder), folder) == (
        "statestore: error: no key 'job' for dag_id=d run_id=r task_id=t map_index=-1\n"
        "hint: the key is at map index 3 of t: give --map-index N\n"
    )


@pytest.mark.slow
def test_columns_sets_the_width_as_for_rich_and_a_pipe_ignores_it(folder):
    env = environment(folder, {"COLUMNS": "50"})
    run = in_terminal(["get", "k"], env, folder, columns=120)
    assert max(len(line) for line in run.stderr.splitlines()) <= 50
    assert run.stderr.startswith("statestore: error: no scope given\nhint: give --dag-id,")
    piped = in_a_pipe(["get", "k"], env, folder)
    assert piped.stderr.count("\n") == 1 and piped.stderr.startswith("statestore: error: no scope given: give")


def test_in_process_the_output_is_one_line(clean_environment):
    """The suite's in-process runs (stderr captured, not a terminal) see the one line, as scripts do."""
    result = run_cli("get", "k")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("statestore: error: no scope given: give")
