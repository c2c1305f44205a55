"""Exit codes 0-3 of the "Exit codes" table (docs/reference/commands.md), row by row: 0 success, 1 a key
`get` did not find, 2 bad usage or input, 3 an operational failure; and no command shows a traceback unless
asked with --debug.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tomllib

import pytest
from cli_running import run_statestore_process
from paths import REPO

TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")


def assert_one_line_error(result, code: int, text: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("statestore: error: "), result.output
    assert text in result.stderr, result.output
    assert result.stderr.count("\n") == 1, result.output
    assert "Traceback" not in result.stderr + result.stdout


def test_0_success(cli):
    assert cli("set", *TASK, "k", "1").exit_code == 0
    assert cli("get", *TASK, "k").exit_code == 0
    assert cli("db", "check").exit_code == 0


def test_1_get_did_not_find_the_key(cli):
    assert_one_line_error(cli("get", *TASK, "missing"), 1, "no key 'missing'")


@pytest.mark.parametrize(
    "args, text",
    [
        (("get", *TASK), "Missing argument 'KEY'"),
        (("get", "--bogus", "k"), "No such option: --bogus"),
        (("nonsense",), "No such command 'nonsense'"),
        (("get", "--map-index", "x", *TASK, "k"), "Invalid value for '--map-index'"),
        (("clean", "--output", "yaml"), "'yaml' is not one of"),
        (("set", *TASK, "k", "{"), "VALUE is not valid JSON"),
        (("set", "--asset-name", "a", "k", "1", "--retention", "1d"), "task and dag-run keys only"),
        (("clear", *TASK), "pass --yes"),
    ],
)
def test_2_bad_usage_or_input(cli, args, text):
    if args[0] == "clear":  # a scope with keys: one without has nothing to clear and asks nothing
        assert cli("set", *TASK, "k", "1").exit_code == 0
    assert_one_line_error(cli(*args), 2, text)


def test_2_bad_configuration(cli, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "-3")
    assert_one_line_error(
        cli("set", *TASK, "k", "1"),
        2,
        "environment variable AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS: invalid value '-3' for "
        "[state_store] default_retention_days: expected a whole number from 0 to 2147483647",
    )


def test_2_unknown_driver_says_how_to_get_one(cli):
    result = cli("get", *TASK, "k", conn="mysql+mysqlconnector://root@127.0.0.1/test")
    assert_one_line_error(
        result,
        2,
        "the database driver for 'mysql+mysqlconnector' is not installed (mysql); "
        "install it, or use mysql+pymysql:// after installing PyMySQL (pip install 'PyMySQL'), "
        "or reinstall statestore with its mysql extra (pip install '.[mysql]' in its source tree)",
    )


@pytest.mark.parametrize(
    "url, blocked, extra",
    [
        ("postgresql://u@127.0.0.1/db", ("psycopg", "psycopg2"), "postgres"),
        ("postgresql+psycopg2://u@127.0.0.1/db", ("psycopg", "psycopg2"), "postgres"),
        ("mysql://root@127.0.0.1/test", ("pymysql", "MySQLdb"), "mysql"),
        ("mysql+pymysql://root@127.0.0.1/test", ("pymysql", "MySQLdb"), "mysql"),
    ],
)
def test_2_missing_driver_names_the_extra(url, blocked, extra, tmp_path):
    """In a process where the drivers cannot be imported, as after a plain `pip install .`: the hint names
    what can be installed without an index serving statestore (the driver from PyPI, or the extra of a
    checkout), never `statestore-cli[...]`."""
    script = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from statestore_cli.__main__ import main\n"
        "sys.argv[0] = 'statestore'\n"
        "main()\n"
    )
    run = run_statestore_process("--conn", url, "list", code=script, cwd=tmp_path)
    assert run.exit_code == 2, run.stderr
    assert run.stderr.startswith("statestore: error: the database driver for ")
    assert "statestore-cli" not in run.stderr
    assert f"reinstall statestore with its {extra} extra (pip install '.[{extra}]' in its source tree)" in run.stderr
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirement = re.search(r"pip install '([^'.][^']*)'", run.stderr)
    assert requirement, run.stderr
    # The package named is the very one the extra brings (from PyPI), and the extra exists.
    brought = [re.split(r"[<>=!~ ]", dep)[0] for dep in project["optional-dependencies"][extra]]
    assert requirement.group(1) in brought, (requirement.group(1), brought)
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr


def test_3_database_unreachable(cli):
    result = cli("get", *TASK, "k", conn="postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert_one_line_error(result, 3, "database error on postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_3_schema_missing(cli, tmp_path):
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert_one_line_error(cli("get", *TASK, "k", conn=f"sqlite:///{empty}"), 3, "the state store tables are missing")
    check = cli("db", "check", "-o", "json", conn=f"sqlite:///{empty}")
    assert check.exit_code == 3 and '"ok": false' in check.stdout


def test_3_sqlite_file_that_does_not_exist_is_not_created(cli, tmp_path):
    ghost = tmp_path / "nowhere" / "airflow.db"
    assert_one_line_error(
        cli("list", conn=f"sqlite:///{ghost}"),
        3,
        (
            "the file does not exist; the URL is the one --conn gave; if the store is elsewhere, fix --conn; "
            f"to create it here, run `statestore --conn sqlite:///{ghost} db init`"
        ),
    )
    assert not ghost.exists() and not ghost.parent.exists()


def test_3_custom_backend_failure(cli, tmp_path, monkeypatch):
    (tmp_path / "broken_backend.py").write_text(
        "from sample_backends import NullBackend\n"
        "class Broken(NullBackend):\n"
        "    def __init__(self):\n"
        "        raise OSError('bucket not reachable')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "broken_backend.Broken")
    assert_one_line_error(cli("get", *TASK, "k"), 3, "cannot create [state_store] backend Broken: bucket not reachable")


def test_debug_shows_the_traceback(cli):
    result = cli("--debug", "get", *TASK, "missing")
    assert result.exit_code != 0
    assert result.exception is not None and type(result.exception).__name__ == "NotFoundError"


def test_version_and_help(cli):
    from statestore_cli import __version__

    assert cli("--version").stdout == f"statestore {__version__}\n"
    help_text = cli("--help").stdout
    for command in ("get", "set", "delete", "clear", "list", "clean", "db", "config"):
        assert f" {command} " in help_text


def test_3_db_check_reports_an_unreachable_database_as_json(cli):
    result = cli("db", "check", "-o", "json", conn="postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert (doc["ok"], doc["engine"], doc["mode"]) == (False, "postgresql", "unknown")
    assert doc["error"].startswith("database error on postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert result.stderr.startswith("statestore: error: database error on ")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("group", "commands"),
    [
        ("db", "init, check"),
        ("backend", "check"),
        ("config", "show"),
        ("assets", "sweep, delete"),
        ("runs", "delete"),
        ("", "the commands listed above"),
    ],
)
def test_a_group_without_its_command_prints_its_help_and_exits_2(group, commands):
    """Like any missing subcommand: a usage error (exit 2, one line on stderr), after the group's help,
    whole lines, on stdout."""
    run = run_statestore_process(*([group] if group else []))
    path = f"statestore {group}".strip()
    assert run.exit_code == 2
    assert run.stdout.startswith(f"Usage: {path} [OPTIONS] COMMAND [ARGS]...\n")
    assert run.stdout.endswith("\n") and "Examples:" in run.stdout
    assert run.stderr == f"statestore: error: missing command: {path} takes one of {commands}\n"
