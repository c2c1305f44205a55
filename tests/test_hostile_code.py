"""Code run on the user's behalf: a module a dotted path names that exits while it is imported is never a
success (nothing deleted, a clean's metrics file does not move last_success forward); a module or a config
file with `_cmd` options that another user could change gets a warning before it runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from metrics_files import read_metrics
from stores import sql

P = "statestore_clean_"
WHERE = "environment variable AIRFLOW__STATE_STORE__BACKEND: [state_store] backend = 'ss_exits.Backend'"


@pytest.fixture
def exiting_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """``ss_exits``, a module calling ``sys.exit(0)`` when imported, named as the [state_store] backend."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ss_exits.py").write_text("import sys\n\nsys.exit(0)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_exits.Backend")
    yield folder
    sys.modules.pop("ss_exits", None)


def _exited(stderr: str) -> bool:
    return stderr == (
        f"statestore: error: {WHERE}: importing module 'ss_exits' raised SystemExit(0); a module named by a "
        "dotted path must not exit when it is imported: remove the exit (an argparse or script entry point "
        "run at import, often) or name another module\n"
    )


def test_db_check_with_a_backend_that_exits_at_import_fails(cli, exiting_module):
    result = cli("db", "check")
    assert result.exit_code == 2, result.output
    assert _exited(result.stderr), result.stderr


def test_set_with_a_backend_that_exits_at_import_fails_and_writes_nothing(cli, db_url, exiting_module):
    result = cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k", "1")
    assert result.exit_code == 2, result.output
    assert _exited(result.stderr), result.stderr
    assert sql(db_url, "SELECT count(*) FROM task_state_store")[0][0] == 0


def test_a_clean_whose_backend_exits_at_import_is_a_failure_in_its_metrics_file(cli, db_url, tmp_path, monkeypatch):
    metrics = tmp_path / "clean.prom"
    assert cli("clean", "--metrics-file", str(metrics)).exit_code == 0  # a first success to carry over
    before = read_metrics(metrics)[f"{P}last_success_timestamp_seconds"]
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ss_exits.py").write_text("import sys\n\nsys.exit(0)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_exits.Backend")
    try:
        result = cli("clean", "--fail-on-skip", "--metrics-file", str(metrics))
    finally:
        sys.modules.pop("ss_exits", None)
    assert result.exit_code == 2, result.output
    assert _exited(result.stderr), result.stderr
    values = read_metrics(metrics)
    assert values[f"{P}exit_status"] == 2
    assert values[f"{P}last_success_timestamp_seconds"] == before


def test_a_module_raising_keyboardinterrupt_at_import_is_an_interruption_never_a_success(
    cli, db_url, tmp_path, monkeypatch
):
    # It cannot be told from Ctrl-C: exit 130 as for one, and the metrics file says so.
    metrics = tmp_path / "clean.prom"
    assert cli("clean", "--metrics-file", str(metrics)).exit_code == 0
    before = read_metrics(metrics)[f"{P}last_success_timestamp_seconds"]
    (tmp_path / "ss_interrupts.py").write_text("raise KeyboardInterrupt\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_interrupts.Backend")
    result = cli("clean", "--fail-on-skip", "--metrics-file", str(metrics))
    assert (result.exit_code, result.stderr) == (130, "statestore: error: interrupted\n")
    values = read_metrics(metrics)
    assert values[f"{P}exit_status"] == 130
    assert values[f"{P}last_success_timestamp_seconds"] == before


def test_a_connect_args_module_that_exits_at_import_fails(cli, db_url, tmp_path, monkeypatch):
    (tmp_path / "ss_exits_args.py").write_text("raise SystemExit(3)\nARGS = {}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", "ss_exits_args.ARGS")
    try:
        result = cli("list")
    finally:
        sys.modules.pop("ss_exits_args", None)
    assert result.exit_code == 2, result.output
    assert "importing module 'ss_exits_args' raised SystemExit(3)" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_backend_method_calling_sys_exit_is_an_error_not_a_success(cli, tmp_path, monkeypatch):
    # Not at import: when the command runs it. No command of ours ends by SystemExit, so one is a failure.
    (tmp_path / "ss_exits_later.py").write_text(
        "import sys\n"
        "from statestore_cli import BaseStoreBackend\n\n\n"
        "class Backend(BaseStoreBackend):\n"
        "    def get(self, *args, **kwargs):\n"
        "        sys.exit(0)\n\n"
        "    set = delete = clear = aget = aset = adelete = aclear = get\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_exits_later.Backend")
    try:
        result = cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k", "1")
    finally:
        sys.modules.pop("ss_exits_later", None)
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        "statestore: error: unexpected SystemExit(0) raised by code the command ran (a backend or a module a "
        "dotted path names); the command did not finish (rerun with --debug for the traceback)\n"
    )


# -- files another user could change ---------------------------------------------------------------------
OTHER_USER = 65534  # nobody
BACKEND_CODE = "from sample_backends import NullBackend\n\n\nclass Backend(NullBackend):\n    pass\n"


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """``ss_planted.py`` in a folder of its own, named as the [state_store] backend; the test sets who may
    change it."""
    folder = tmp_path / "plugins"
    folder.mkdir(mode=0o755)
    module = folder / "ss_planted.py"
    module.write_text(BACKEND_CODE, encoding="utf-8")
    module.chmod(0o644)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_planted.Backend")
    yield module
    sys.modules.pop("ss_planted", None)


def _module_warning(module: Path, problem: str, fix: str) -> str:
    return (
        f"statestore: warning: module 'ss_planted' at {module}, imported for environment variable "
        f"AIRFLOW__STATE_STORE__BACKEND: [state_store] backend = 'ss_planted.Backend', {problem}: another user "
        f"can make statestore run their code as root; fix it with {fix}\n"
    )


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@as_root
def test_a_backend_module_another_user_owns_is_warned_about_and_still_used(cli, planted):
    os.chown(planted, OTHER_USER, -1)
    result = cli("db", "check", "-o", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr == _module_warning(
        planted, "is owned by uid 65534 (nobody), not by root or this user", f"`chown root {planted}`"
    )


@as_root
def test_a_backend_module_others_can_write_is_warned_about(cli, planted):
    planted.chmod(0o666)
    result = cli("db", "check", "-o", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr == _module_warning(
        planted, "is writable by other users (mode 0666)", f"`chmod go-w {planted}`"
    )


@as_root
def test_a_backend_module_in_a_folder_others_can_write_is_warned_about(cli, planted):
    planted.parent.chmod(0o777)
    result = cli("db", "check", "-o", "json")
    assert result.stderr == _module_warning(
        planted,
        f"is in {planted.parent}, writable by other users (mode 0777, no sticky bit)",
        f"`chmod go-w {planted.parent}`, or move the file",
    )


@as_root
def test_a_module_only_root_can_change_gets_no_warning_even_in_a_sticky_folder(cli, planted):
    planted.parent.chmod(0o1777)  # as /tmp: others may add files, not replace root's
    result = cli("db", "check", "-o", "json")
    assert (result.exit_code, result.stderr) == (0, "")


@as_root
def test_a_config_file_with_a_command_another_user_owns_is_warned_about(cli, db_url, tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(f"[database]\nsql_alchemy_conn_cmd = echo {db_url}\n", encoding="utf-8")
    cfg.chmod(0o644)
    assert cli("--config", str(cfg), "list", conn=None).stderr == ""
    os.chown(cfg, OTHER_USER, -1)
    result = cli("--config", str(cfg), "list", conn=None)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"statestore: warning: config file {cfg}, whose [database] sql_alchemy_conn_cmd runs, is owned by uid "
        "65534 (nobody), not by root or this user: another user can make statestore run their commands as root; "
        f"fix it with `chown root {cfg}`\n"
    )


@as_root
def test_a_config_file_without_commands_gets_no_warning_whoever_owns_it(cli, db_url, tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(f"[database]\nsql_alchemy_conn = {db_url}\n", encoding="utf-8")
    os.chown(cfg, OTHER_USER, -1)
    result = cli("--config", str(cfg), "list", conn=None)
    assert (result.exit_code, result.stderr) == (0, ""), result.output


@as_root
def test_a_secrets_backend_in_airflow_home_config_another_user_owns_is_warned_about(
    cli, db_url, clean_environment, monkeypatch
):
    # $AIRFLOW_HOME/config is on the import path, as Airflow makes it: a folder the airflow user often owns.
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder added is gone after the test
    folder = clean_environment / "config"
    folder.mkdir(mode=0o755)
    module = folder / "ss_secrets.py"
    module.write_text(f"class Secrets:\n    def get_config(self, key):\n        return {db_url!r}\n", encoding="utf-8")
    module.chmod(0o644)
    os.chown(module, OTHER_USER, -1)
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "ss_secrets.Secrets")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET", "conn")
    try:
        result = cli("list", conn=None)
    finally:
        sys.modules.pop("ss_secrets", None)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"statestore: warning: module 'ss_secrets' at {module}, imported for environment variable "
        "AIRFLOW__SECRETS__BACKEND: [secrets] backend = 'ss_secrets.Secrets', is owned by uid 65534 (nobody), "
        "not by root or this user: another user can make statestore run their code as root; "
        f"fix it with `chown root {module}`\n"
    )
