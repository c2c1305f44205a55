"""What each kind of command loads at start-up (in a fresh process): help, the version and shell
completion load no SQLAlchemy; plain output loads no rich; nothing loads pydantic.

Only modules are checked here, never times: ``bench/startup.py`` measures those.
"""

from __future__ import annotations

import pytest
from startup_probe import probe, probe_all

pytestmark = pytest.mark.slow  # a real process for each test

TASK = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["get", "--help"],
        ["clean", "--help"],
        ["import", "--help"],
        ["db", "--help"],
        ["db", "init", "--help"],
        [],
    ],
    ids=lambda argv: " ".join(argv) or "no arguments",
)
def test_help_loads_no_sqlalchemy(argv, tmp_path):
    code, stdout, stderr, loaded = probe_all(argv, tmp_path)
    # Without a command: the help, then a usage error (exit 2, one line on stderr).
    assert (code, "Usage: statestore" in stdout) == (0 if argv else 2, True)
    assert stderr.startswith("statestore: error: missing command") or argv
    assert "sqlalchemy" not in loaded
    assert "rich" not in loaded, "help into a pipe is plain: typer's rich help layer is not loaded"
    assert "pydantic" not in loaded


def test_version_loads_no_sqlalchemy(tmp_path):
    from statestore_cli import __version__

    code, stdout, loaded = probe(["--version"], tmp_path)
    assert (code, stdout) == (0, f"statestore {__version__}\n")
    assert loaded.isdisjoint({"sqlalchemy", "rich", "pydantic"})


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("statestore cl", "1", {"clear", "clean"}),
        ("statestore get --dag", "2", {"--dag-id"}),
        ("statestore list --store ''", "3", {"task", "dag_run", "asset"}),  # not file names
        ("statestore stats --store d", "3", {"dag_run"}),
        ("statestore export --store a", "3", {"asset"}),
    ],
)
def test_shell_completion_loads_no_sqlalchemy(words, cword, expected, tmp_path):
    code, stdout, loaded = probe([], tmp_path, _STATESTORE_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword)
    assert code == 0
    assert set(stdout.split()) == expected
    assert loaded.isdisjoint({"sqlalchemy", "rich", "pydantic"})


def test_show_completion_prints_the_script(tmp_path):
    # --show-completion takes no value: typer asks shellingham for the shell that started the process, which
    # looks up the parent processes; from pytest's worker it found none now and then ("Shell  not supported.").
    code, stdout, stderr, loaded = probe_all(["--show-completion"], tmp_path, under_bash=True)
    assert code == 0, stdout + stderr
    assert "_STATESTORE_COMPLETE=complete_bash" in stdout
    assert "sqlalchemy" not in loaded


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["list", "-o", "json"],
        ["get", "k", *TASK],
        ["set", "k2", "2", *TASK],
        ["delete", "k2", *TASK],
        ["db", "check"],
        ["clean", "--dry-run"],
        ["clean"],
        ["config", "show"],
        ["export"],
        ["import", "-"],
    ],
    ids=" ".join,
)
def test_plain_output_loads_no_rich(argv, tmp_path, cli, db_url):
    """Into a pipe, the database commands print plain lines or JSON: rich is never imported."""
    assert cli("db", "init").exit_code == 0
    assert cli("set", *TASK, "k", '"v"').exit_code == 0
    code, stdout, loaded = probe(["--conn", db_url, *argv], tmp_path, STATESTORE_NO_FAST_PATH="1")
    assert code == 0, stdout
    assert "sqlalchemy" in loaded
    assert "rich" not in loaded
    assert "pydantic" not in loaded, "typer coerces options through pydantic from 0.29 on"
