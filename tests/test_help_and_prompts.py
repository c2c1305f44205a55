"""What an operator meets at the prompt and in help: `clear`'s question and its answers (yes, no, Ctrl-C,
end of input), interrupted dry runs, progress bars that end at the final count, help with summaries
and examples, options on the wrong side of the command, and the `config show` / `db check` tables."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
from cli_running import run_cli, run_statestore_process, start_statestore
from expected_output import assert_expected
from terminals import Terminal, terminal_env

TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COMMANDS = (
    [],
    ["get"],
    ["set"],
    ["delete"],
    ["clear"],
    ["list"],
    ["stats"],
    ["export"],
    ["import"],
    ["clean"],
    ["db"],
    ["db", "init"],
    ["db", "check"],
    ["config"],
    ["config", "show"],
)


def _keys(db_url: str) -> int:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        return int(conn.execute("SELECT count(*) FROM task_state_store").fetchone()[0])


def _expired_rows(db_url: str, count: int) -> None:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        conn.execute("INSERT INTO dag_run (id, dag_id, run_id) VALUES (1, 'd', 'r')")
        conn.executemany(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at,"
            " expires_at) VALUES (1, 't', -1, ?, 'd', 'r', '1', ?, ?)",
            [(f"k{i:07d}", "2020-01-01 00:00:00.000000", "2020-01-01 00:00:00.000000") for i in range(count)],
        )


def _mapped_keys(cli) -> None:  # type: ignore[no-untyped-def]
    for index in (0, 1, 2):
        assert cli("set", *TASK, "--map-index", str(index), "k", "1").exit_code == 0


# -- clear ----------------------------------------------------------------------------------------------------
def test_clear_with_nothing_to_clear_says_so_and_does_not_ask(cli):
    result = cli("clear", *TASK)  # stdin is not a terminal and there is no --yes: it would refuse to ask
    assert (result.exit_code, result.stdout) == (0, ""), result.output  # a message, not a record: stderr
    assert result.stderr == "nothing to clear: no keys for dag_id=d run_id=r task_id=t map_index=-1\n"
    everything = cli("clear", *TASK, "--all-map-indices")
    assert everything.stderr == "nothing to clear: no keys for dag_id=d run_id=r task_id=t, all map indices\n"
    asset = cli("clear", "--asset-name", "nowhere", "--yes")
    assert (asset.exit_code, asset.stderr) == (0, "nothing to clear: no keys for name=nowhere\n")


@pytest.mark.slow
def test_clear_question_names_the_scope_the_map_indices_and_the_count(cli, db_url):
    _mapped_keys(cli)
    term = Terminal(["--conn", db_url, "clear", *TASK, "--all-map-indices"], terminal_env())
    term.wait_for(b"[y/N] ")
    assert b"Delete 3 keys of dag_id=d run_id=r task_id=t, all map indices? [y/N] " in term.seen
    assert b"map_index" not in term.seen
    term.type(b"y\n")
    status, screen = term.finish()
    assert status == 0, screen
    assert "deleted 3 keys of dag_id=d run_id=r task_id=t, all map indices\n" in screen
    assert _keys(db_url) == 0


@pytest.mark.slow
def test_clear_of_one_map_index_names_it(cli, db_url):
    _mapped_keys(cli)
    term = Terminal(["--conn", db_url, "clear", *TASK, "--map-index", "1"], terminal_env())
    term.wait_for(b"[y/N] ")
    assert b"Delete 1 key of dag_id=d run_id=r task_id=t map_index=1? [y/N] " in term.seen
    term.type(b"yes\n")
    assert term.finish()[0] == 0
    assert _keys(db_url) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("keys", "code", "after_question"),
    [
        (b"n\n", 1, "n\nstatestore: nothing deleted (answered no)\n"),
        (b"\n", 1, "\nstatestore: nothing deleted (answered no)\n"),
        (b"\x03", 130, "^C\nstatestore: error: interrupted at the question\nhint: nothing deleted\n"),
        (b"\x04", 1, "\nstatestore: nothing deleted (no answer: end of input)\n"),
    ],
    ids=["no", "enter", "ctrl-c", "ctrl-d"],
)
def test_clear_not_confirmed_exits_with_its_code_on_a_line_of_its_own(cli, db_url, keys, code, after_question):
    _mapped_keys(cli)
    term = Terminal(["--conn", db_url, "clear", *TASK, "--all-map-indices"], terminal_env())
    term.wait_for(b"[y/N] ")
    term.type(keys)
    status, screen = term.finish()
    assert status == code, screen
    assert screen.endswith("all map indices? [y/N] " + after_question), screen
    assert "Traceback" not in screen and "aborted" not in screen
    assert _keys(db_url) == 3


def test_the_reference_documents_the_clear_exit_codes():
    page = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "commands.md").read_text(encoding="utf-8")
    table = page[page.index("\n## Exit codes\n") :]
    assert re.search(r"^\| 1 \|.*`clear` was answered no.*end of input", table, re.MULTILINE)
    assert re.search(r"^\| 130 \|.*Ctrl-C.*`clear`", table, re.MULTILINE)


# -- interrupted runs and progress ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_dry_run_interrupted_says_nothing_was_deleted_and_how_many_it_listed(cli, db_url):
    _expired_rows(db_url, 50_000)
    env = {**os.environ, "STATESTORE_NO_FAST_PATH": "1"}
    proc = start_statestore(
        "--conn",
        db_url,
        "clean",
        "--dry-run",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the rows stream; unread, the pipe fills and the dry run waits on it
    assert first.startswith(b"d\tr\tt\t-1\tk0000000\t")
    proc.send_signal(signal.SIGINT)
    rest, stderr = proc.communicate(timeout=60)
    printed = 1 + rest.count(b"\n")
    assert proc.returncode == 130, stderr
    message = re.fullmatch(
        rb"statestore: error: dry run interrupted after listing ([\d,]+) expired task keys?; nothing was deleted\n",
        stderr,
    )
    assert message, stderr
    listed = int(message.group(1).replace(b",", b""))
    assert printed <= listed < 50_000, "the count is of the rows read before the signal"
    assert _keys(db_url) == 50_000


@pytest.mark.slow
def test_an_interrupted_dry_run_on_a_terminal_erases_its_bar(cli, db_url):
    _expired_rows(db_url, 400_000)
    term = Terminal(["--conn", db_url, "clean", "--dry-run"], terminal_env(80))
    term.wait_for(b"reading expired keys")
    term.type(b"\x03")
    status, screen = term.finish()
    assert status == 130, screen
    message = re.search(  # at a terminal, what was done is a hint of its own
        r"statestore: error: dry run interrupted after listing ([\d,]+) expired task keys\n"
        r"hint: nothing was deleted\n$",
        screen,
    )
    assert message, screen
    last_bar = screen.rindex("reading expired keys")
    assert "\x1b[2K" in screen[last_bar : message.start()], "the bar was left on the screen"
    assert _keys(db_url) == 400_000


@pytest.mark.slow
def test_the_progress_bar_ends_at_the_final_count(cli, db_url):
    _expired_rows(db_url, 2200)
    status, screen = Terminal(["--conn", db_url, "clean", "--batch-size", "1000"], terminal_env(100)).finish()
    assert status == 0, screen
    bars = re.findall(r"deleting expired keys.*?([\d,]+)/([\d,]+)", ANSI.sub("", screen))
    assert bars and bars[-1] == ("2,200", "2,200"), bars
    assert "deleted 2,200 expired task keys in 3 batches of up to 1,000" in screen


@pytest.mark.slow
def test_a_dry_run_bar_ends_at_the_final_count(cli, db_url):
    _expired_rows(db_url, 2500)
    status, screen = Terminal(["--conn", db_url, "clean", "--dry-run"], terminal_env(100)).finish()
    assert status == 0, screen
    bars = re.findall(r"reading expired keys.*?([\d,]+)/([\d,]+)", ANSI.sub("", screen))
    assert bars and bars[-1] == ("2,500", "2,500"), bars
    assert "Dry run: 2,500 expired task keys would be deleted" in screen


def test_human_lines_use_thousands_separators_and_machine_fields_do_not(cli, db_url):
    _expired_rows(db_url, 1200)
    dry = cli("clean", "--dry-run", "-o", "plain")
    assert dry.stderr.startswith("dry run: 1,200 expired task keys would be deleted")
    assert len(dry.stdout.splitlines()) == 1200
    assert cli("clean", "--dry-run", "-o", "json").stdout.rstrip().endswith('"would_delete": 1200}')
    listed = cli("list", "-o", "table")
    assert listed.stdout.endswith("1,200 keys\n")
    done = cli("clean", "--batch-size", "1000", "-o", "plain")
    assert done.stderr.startswith("deleted 1,200 expired task keys in 2 batches of up to 1,000 ")
    assert re.search(r"[\d,]+ rows/s\n$", done.stderr)
    assert "deleted\t1200\n" in done.stdout


def test_a_clean_report_in_json_has_plain_numbers(cli, db_url):
    _expired_rows(db_url, 1200)
    report = json.loads(cli("clean", "-o", "json").stdout)
    assert (report["deleted"], report["batches"]) == (1200, 1)


# -- help ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "statestore")
def test_every_help_has_a_summary_and_an_example(command):
    result = run_cli(*command, "--help")
    assert result.exit_code == 0, result.output
    text = result.stdout
    summary = text.split("\n\n")[1].strip()
    assert summary and "\n" not in summary and summary.endswith("."), text
    examples = text[text.index("Examples:") :]
    assert re.search(rf"^    statestore .*{' '.join(command)}", examples, re.MULTILINE), text
    assert "<bool>" not in text and "BOOLEAN" not in text


def test_flags_read_as_flags_in_plain_help():
    text = run_cli("clean", "--help").stdout
    for flag in ("--dry-run", "--all", "--exclusive"):
        assert re.search(rf"^  {flag} {{2,}}[A-Z]", text, re.MULTILINE), text
    assert re.search(r"^  --string {2,}Store", run_cli("set", "--help").stdout, re.MULTILINE)
    assert re.search(r"^  --yes, -y|^  -y, --yes {2,}Do", run_cli("clear", "--help").stdout, re.MULTILINE)


def _rich_help(args: list[str], columns: int) -> str:
    status, screen = Terminal([*args, "--help"], terminal_env(columns, TERM="dumb")).finish()
    assert status == 0, screen
    return ANSI.sub("", screen)


@pytest.mark.slow
def test_flags_read_as_flags_in_rich_help_on_a_terminal():
    screen = _rich_help(["clean"], 120)
    assert "╭─ Options" in screen, "help on a terminal is rich"
    for flag in ("--dry-run", "--all", "--exclusive"):
        assert re.search(rf"│ {flag} {{2,}}[A-Z]", screen), screen
    assert "bool" not in screen.lower()


@pytest.mark.parametrize("columns", (80, 120))
def test_clean_help_plain(columns):
    result = run_statestore_process("clean", "--help", env={**os.environ, "COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= columns
    assert "-o, --output MODE" in result.stdout
    assert_expected(f"clean_help_{columns}.txt", result.stdout)


def test_clean_help_rich_at_80_columns():
    screen = _rich_help(["clean"], 80)
    lines = screen.splitlines()
    assert max(len(line) for line in lines) <= 80
    option_lines = [line for line in lines if line.startswith("│ --")]
    helps = [re.split(r" {2,}", line.strip("│ "))[-1] for line in option_lines]
    assert max(len(h) for h in helps) >= 36, screen  # descriptions have room, not 22 columns
    assert_expected("clean_help_rich_80.txt", screen)


def test_rich_help_fills_its_lines_and_examples_do_not_wrap_at_80_columns():
    """A paragraph of a docstring is one paragraph on the terminal, not the source's line breaks; a long
    example is continued with a backslash between words, its JSON whole on one line."""
    screen = _rich_help(["set"], 80)
    lines = screen.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert " it is JSON null, NaN or Infinity, or larger than" in screen, screen
    assert "statestore set --dag-id etl --run-id manual__1 --task-id submit job_id \\" in screen
    assert '\'{"id": "j-123"}\' --retention 6h' in screen


@pytest.mark.slow
@pytest.mark.parametrize("command", ["set", "get", "clear", "list", "import", "clean", "db", "assets"])
def test_plain_help_examples_fit_80_columns(command):
    shown = run_statestore_process(command, "--help", env={**os.environ, "COLUMNS": "80"}).stdout
    examples = shown[shown.index("Examples:") :].splitlines()
    assert max(len(line) for line in examples) <= 80, shown


def test_root_help_names_every_root_option():
    shown = " ".join(run_statestore_process("--help", env={**os.environ, "COLUMNS": "80"}).stdout.split())
    roots = "--config, --conn, --api-url, --connect-timeout, --debug, --version"
    assert f"Root options ({roots}) go before the command" in shown


def test_config_defaults_are_named_in_help():
    def flat(text: str) -> str:
        return " ".join(text.split())

    assert "Default: [state_store] default_retention_days (30 unless configured)" in flat(
        run_cli("set", "--help").stdout
    )
    assert "Default: [state_store] state_cleanup_batch_size" in flat(run_cli("clean", "--help").stdout)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "json", "list"], "No such option: -o; --output/-o goes after the command: statestore list -o json"),
        (
            ["--output=json", "db", "check"],
            "No such option: --output; --output/-o goes after the command: statestore db check --output=json",
        ),
        (
            ["--dry-run", "clean"],
            "No such option: --dry-run; --dry-run goes after the command: statestore clean --dry-run",
        ),
        (
            ["list", "--conn", "sqlite:////x.db"],
            "No such option: --conn; --conn goes before the command: statestore --conn sqlite:////x.db list",
        ),
        (
            ["config", "show", "--config", "/etc/airflow.cfg"],
            "No such option: --config; --config goes before the command: "
            "statestore --config /etc/airflow.cfg config show",
        ),
        (
            ["db", "check", "--debug"],
            "No such option: --debug; --debug goes before the command: statestore --debug db check",
        ),
        (["list", "--bogus"], "No such option: --bogus (see 'statestore list --help')"),
    ],
)
def test_an_option_on_the_wrong_side_says_where_it_goes(args, message):
    result = run_cli(*args)
    assert result.exit_code == 2
    assert result.stderr == f"statestore: error: {message}\n"


# -- config show and db check ------------------------------------------------------------------------------
def _flat(text: str) -> str:
    return " ".join(text.split())


def test_config_show_says_where_it_looked(clean_environment, monkeypatch, tmp_path):
    shown = _flat(run_cli("config", "show", "-o", "table").stdout)
    assert (
        "config file: none found (tried: no --config; $AIRFLOW_CONFIG not set; "
        f"{clean_environment / 'airflow.cfg'} ($AIRFLOW_HOME/airflow.cfg) does not exist)"
    ) in shown
    monkeypatch.setenv("AIRFLOW_CONFIG", str(tmp_path / "missing.cfg"))
    shown = _flat(run_cli("config", "show", "-o", "table").stdout)
    assert (
        f"config file: none found (tried: no --config; $AIRFLOW_CONFIG {tmp_path / 'missing.cfg'} does not exist)"
        in shown
    )


def test_config_show_breaks_where_it_looked_between_words(clean_environment, monkeypatch):
    """At 80 columns the paths tried stay whole, each on one line (the terminal would cut one at its edge)."""
    monkeypatch.setenv("COLUMNS", "80")
    lines = run_cli("config", "show", "-o", "table").stdout.split("\n\n")[0].splitlines()
    tried = f"{clean_environment / 'airflow.cfg'}"
    assert len(lines) > 1 and all(len(line) <= 80 or " " not in line for line in lines), lines  # a path alone
    assert lines[0].startswith("config file: none found (tried: no --config;")
    assert any(line == tried or line.startswith(tried + " ") for line in lines), lines
    assert " ".join(lines).endswith(f"{tried} ($AIRFLOW_HOME/airflow.cfg) does not exist)")


REALISTIC_CFG = """\
[state_store]
default_retention_days = 14
state_cleanup_batch_size = 10000

[workers]
state_store_backend = acme_airflow.state_store.backends.object_storage.ObjectStorageStateBackend

[database]
sql_alchemy_conn = postgresql+psycopg://airflow:s3cret@airflow-metadata.prod.internal:5432/airflow
"""
MASKED_URL = "postgresql+psycopg://airflow:***@airflow-metadata.prod.internal:5432/airflow"  # 76 characters


# Paths relative to the test's own folder: the same on every machine, so the tables wrap the same way.
CONFIG = "etc/airflow/deployments/airflow-production-eu-west-1/airflow.cfg"
DATABASE = "var/lib/airflow/deployments/airflow-production-eu-west-1/airflow-metadata.db"


@pytest.mark.parametrize("columns", (80, 120))
def test_config_show_table(monkeypatch, tmp_path, columns):
    monkeypatch.chdir(tmp_path)
    Path(CONFIG).parent.mkdir(parents=True)
    Path(CONFIG).write_text(REALISTIC_CFG, encoding="utf-8")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "131072")
    monkeypatch.setenv("COLUMNS", str(columns))
    result = run_cli("--config", CONFIG, "config", "show", "-o", "table")
    assert result.exit_code == 0, result.output
    screen = result.stdout
    lines = screen.splitlines()
    assert max(len(line) for line in lines) <= columns
    for option in ("default_retention_days", "state_cleanup_batch_size", "max_value_storage_bytes"):
        assert any(line.startswith(f"  {option} ") for line in lines), f"{option} was broken"
    # URLs, import paths and sources are whole, each on one line, whatever the width.
    for whole in (
        MASKED_URL,
        "acme_airflow.state_store.backends.object_storage.ObjectStorageStateBackend",
        "statestore_cli.backends.metastore.MetastoreBackend",
        "environment variable AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES",
    ):
        assert any(whole in line for line in lines), f"{whole} was broken"
    assert [line for line in lines if line.startswith("[")] == ["[state_store]", "[workers]", "[database]", "[secrets]"]
    assert "s3cret" not in screen
    assert_expected(f"config_show_{columns}.txt", screen)


def test_config_show_leaves_a_value_wider_than_the_terminal_whole():
    """A value no indentation can fit is written on a line of its own, unbroken: the terminal wraps it,
    and a copy of it is still the whole URL."""
    from statestore_cli.cli.output.db_config_view import config_lines
    from statestore_cli.ops.commands import ConfigRow

    url = "postgresql+psycopg://airflow:***@airflow-metadata.prod.internal.example.com:5432/airflow"
    rows = [
        ConfigRow("database", "sql_alchemy_conn", url, "default", ""),
        ConfigRow("state_store", "clear_on_success", False, "default", ""),
    ]
    lines = [line.plain for line in config_lines(rows, None, 80)]
    assert lines == [
        "",
        "[database]",
        "  sql_alchemy_conn",
        url,
        "    default",
        "",
        "[state_store]",
        "  clear_on_success  false  default",
    ]


@pytest.mark.parametrize("columns", (80, 120))
@pytest.mark.parametrize("state", ("empty", "ready"))
def test_db_check_table(monkeypatch, tmp_path, columns, state):
    monkeypatch.chdir(tmp_path)
    Path(DATABASE).parent.mkdir(parents=True)
    sqlite3.connect(DATABASE).close()
    url = f"sqlite:///{DATABASE}"
    if state == "ready":
        assert run_cli("db", "init", conn=url).exit_code == 0
    monkeypatch.setenv("COLUMNS", str(columns))
    result = run_cli("db", "check", "-o", "table", conn=url)
    assert result.exit_code == (3 if state == "empty" else 0), result.output
    screen = result.stdout
    assert max(len(line) for line in screen.splitlines()) <= columns
    if state == "empty":
        assert "the state store is not usable: missing tables" in _flat(screen), "the reason is in the table"
        assert re.search(r"^error +the state store is not usable", screen, re.MULTILINE)
    else:
        assert re.search(r"^error +- *$", screen, re.MULTILINE)
    assert_expected(f"db_check_{state}_{columns}.txt", screen)


def test_db_check_json_of_an_empty_database_has_the_reason(tmp_path):
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    doc = json.loads(run_cli("db", "check", "-o", "json", conn=f"sqlite:///{empty}").stdout)
    assert doc["ok"] is False
    assert doc["error"].startswith("the state store is not usable: missing tables task_state_store")


# -- get ----------------------------------------------------------------------------------------------------
def test_get_under_a_run_that_does_not_exist_says_so(cli, db_url):
    assert cli("set", *TASK, "k", "1").exit_code == 0
    no_key = cli("get", *TASK, "other")
    assert no_key.stderr == "statestore: error: no key 'other' for dag_id=d run_id=r task_id=t map_index=-1\n"
    no_run = cli("get", "--dag-id", "d", "--run-id", "r2", "--task-id", "t", "k")
    expected = (
        "statestore: error: no key 'k' for dag_id=d run_id=r2 task_id=t map_index=-1; "
        "the dag run dag_id=d run_id=r2 does not exist\n"
    )
    assert (no_run.exit_code, no_run.stderr) == (1, expected)
    env = {k: v for k, v in os.environ.items() if k != "STATESTORE_NO_FAST_PATH"}
    fast = run_statestore_process(
        "--conn", db_url, "get", "--dag-id", "d", "--run-id", "r2", "--task-id", "t", "k", env=env
    )
    assert (fast.exit_code, fast.stderr) == (1, expected)
