"""Airflow's other sources of a sensitive option: ``_CMD`` / ``_cmd`` commands and ``_SECRET`` / ``_secret``
secrets read through ``[secrets] backend``, in Airflow's order, on real stores through the CLI.

The secrets backend is a real class in a module written to tmp_path (``SECRETS_MODULE``); the commands are
real processes. A command or backend writes a line to a log file each time it runs, so the tests see what
ran, and how often. ``hunter2`` is the password every test hides: it must never reach the output.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

import pytest
from cli_running import Result, run_cli, run_statestore_process

from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.ops.commands import db_init

TASK = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract")
ENV = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
BACKEND = "ss_test_secrets.FileSecrets"
PASSWORD = "hunter2"

# A secrets backend as Airflow's are: made with [secrets] backend_kwargs, asked with get_config(key).
SECRETS_MODULE = '''
import json
from pathlib import Path


class FileSecrets:
    """The secrets of a JSON file; logs each question; a key "raise" makes it fail as a sealed vault does."""

    def __init__(self, path, log, region="eu"):
        self.secrets = json.loads(Path(path).read_text())
        self.log = Path(log)
        self.region = region

    def get_config(self, key):
        with self.log.open("a") as log:
            log.write(f"{self.region} {key}\\n")
        if key == "raise":
            raise RuntimeError("vault is sealed; last URL postgresql://airflow:hunter2@vault/db\\nsecond line")
        return self.secrets.get(key)


class Refuses:
    def __init__(self, **kwargs):
        raise ValueError("no vault address given")


not_a_class = 42
'''


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict]:
    """``ss_test_secrets`` importable; its secrets file (written by the test) and log; the kwargs to pass."""
    folder = tmp_path / "secrets-backend"
    folder.mkdir()
    (folder / "ss_test_secrets.py").write_text(SECRETS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    store, log = tmp_path / "secrets.json", tmp_path / "secrets.log"
    store.write_text("{}", encoding="utf-8")
    yield {"store": store, "log": log, "kwargs": json.dumps({"path": str(store), "log": str(log)})}
    sys.modules.pop("ss_test_secrets", None)


def logged(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def logging_command(log: Path, output: str, extra: str = "") -> str:
    """A command line (as Airflow splits it: no shell) that logs its run and prints ``output``."""
    script = f"echo ran >> {log}; {extra}printf '%s\\n' '{output}'"
    return f'sh -c "{script}"'


def show(*args: str) -> tuple[Result, dict]:
    run = run_cli(*args, "config", "show", "-o", "json")
    assert run.exit_code == 0, run.output
    return run, json.loads(run.stdout)["options"]["database"]["sql_alchemy_conn"]


def write_cfg(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


# -- precedence: every pair of sources -------------------------------------------------------------------------
# Highest first, as Airflow documents it (and --conn above all).
SOURCES = ("conn", "env", "env_cmd", "env_secret", "file", "file_cmd", "file_secret")


def url_of(tmp_path: Path, source: str) -> str:
    return f"sqlite:///{tmp_path / source}.db"


def expected_source(source: str, cfg: Path) -> str:
    return {
        "conn": "--conn",
        "env": f"environment variable {ENV}",
        "env_cmd": f"command {ENV}_CMD",
        "env_secret": f"secret {ENV}_SECRET via {BACKEND}",
        "file": str(cfg),
        "file_cmd": f"command [database] sql_alchemy_conn_cmd in {cfg}",
        "file_secret": f"secret [database] sql_alchemy_conn_secret in {cfg} via {BACKEND}",
    }[source]


def set_up(sources: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secrets: dict) -> list[str]:
    """Each source in ``sources`` gives its own URL; returns the root options (``--config``, ``--conn``)."""
    database = []
    secret_store = {}
    for source in sources:
        url = url_of(tmp_path, source)
        command = logging_command(tmp_path / f"{source}.log", url)
        if source == "env":
            monkeypatch.setenv(ENV, url)
        elif source == "env_cmd":
            monkeypatch.setenv(f"{ENV}_CMD", command)
        elif source == "env_secret":
            monkeypatch.setenv(f"{ENV}_SECRET", "env_conn")
            secret_store["env_conn"] = url
        elif source == "file":
            database.append(f"sql_alchemy_conn = {url}")
        elif source == "file_cmd":
            database.append(f"sql_alchemy_conn_cmd = {command}")
        elif source == "file_secret":
            database.append("sql_alchemy_conn_secret = file_conn")
            secret_store["file_conn"] = url
    secrets["store"].write_text(json.dumps(secret_store), encoding="utf-8")
    cfg = tmp_path / "airflow.cfg"
    body = "\n".join(
        ["[database]", *database, "", "[secrets]", f"backend = {BACKEND}", f"backend_kwargs = {secrets['kwargs']}"]
    )
    cfg.write_text(body + "\n", encoding="utf-8")
    args = ["--config", str(cfg)]
    if "conn" in sources:
        args += ["--conn", url_of(tmp_path, "conn")]
    return args


# Pairs of the plain sources (--conn, the variable, the file) are test_config's lookup-order test.
PAIRS = [(higher, lower) for higher, lower in combinations(SOURCES, 2) if {higher, lower} - {"conn", "env", "file"}]


@pytest.mark.parametrize("higher, lower", PAIRS)
def test_the_higher_source_wins_and_the_lower_one_is_not_run(tmp_path, monkeypatch, secrets, higher, lower):
    cfg = tmp_path / "airflow.cfg"
    # Alone, the lower source gives the URL...
    with monkeypatch.context() as alone:
        _, conn = show(*set_up((lower,), tmp_path, alone, secrets))
        assert conn == {"value": url_of(tmp_path, lower), "source": expected_source(lower, cfg)}
    for log in (tmp_path / f"{lower}.log", secrets["log"]):
        log.unlink(missing_ok=True)
    # ...beside the higher one it is never consulted: its command does not run, its secret is not asked for.
    run, conn = show(*set_up((higher, lower), tmp_path, monkeypatch, secrets))
    assert conn == {"value": url_of(tmp_path, higher), "source": expected_source(higher, cfg)}
    assert run.stderr == ""
    assert logged(tmp_path / f"{lower}.log") == []
    asked = [line.split()[1] for line in logged(secrets["log"])]
    assert asked == ([f"{higher.split('_')[0]}_conn"] if higher.endswith("_secret") else [])
    if higher.endswith("_cmd"):
        assert logged(tmp_path / f"{higher}.log") == ["ran"]  # once


def test_lookup_order_through_the_library(tmp_path, monkeypatch, secrets):
    """load_settings follows the same order: env _CMD beats the file's plain option."""
    set_up(("env_cmd", "file"), tmp_path, monkeypatch, secrets)
    settings = load_settings(config_path=tmp_path / "airflow.cfg")
    assert settings.sql_alchemy_conn == url_of(tmp_path, "env_cmd")
    assert settings.setting("database", "sql_alchemy_conn").source == f"command {ENV}_CMD"


# -- commands ----------------------------------------------------------------------------------------------------
def assert_failed(run: Result, code: int, message: str, tmp_path: Path, clean_environment: Path) -> None:
    assert run.exit_code == code, run.output
    assert run.stderr == f"statestore: error: {message}\n", run.output
    assert run.stdout == ""
    assert PASSWORD not in run.stdout + run.stderr
    assert not (clean_environment / "airflow.db").exists(), "nothing may be created"
    assert list(tmp_path.glob("**/*.db")) == []


def test_a_command_gives_the_url_stripped_and_masked(tmp_path, monkeypatch):
    monkeypatch.setenv(
        f"{ENV}_CMD", logging_command(tmp_path / "cmd.log", f"  postgresql://airflow:{PASSWORD}@db/af  ")
    )
    run, conn = show()
    assert conn == {"value": "postgresql://airflow:***@db/af", "source": f"command {ENV}_CMD"}
    assert PASSWORD not in run.stdout + run.stderr
    assert load_settings().sql_alchemy_conn == f"postgresql://airflow:{PASSWORD}@db/af"


def test_a_command_names_a_real_store(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    db_init(Store.open(load_settings(conn_override=url), create_file=True))
    monkeypatch.setenv(f"{ENV}_CMD", logging_command(tmp_path / "cmd.log", url))
    assert run_cli("set", *TASK, "job", '"42"').exit_code == 0
    got = run_cli("get", *TASK, "job")
    assert (got.exit_code, got.stdout) == (0, '"42"\n'), got.output
    assert run_cli("--conn", url, "get", *TASK, "job").stdout == '"42"\n'  # the store the command named


@pytest.mark.slow
def test_the_fast_get_path_hands_a_command_over_and_it_runs_once(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    db_init(Store.open(load_settings(conn_override=url), create_file=True))
    assert run_cli("--conn", url, "set", *TASK, "job", '"42"').exit_code == 0
    log = tmp_path / "cmd.log"
    monkeypatch.setenv(f"{ENV}_CMD", logging_command(log, url))
    got = run_statestore_process("get", *TASK, "job")
    assert (got.exit_code, got.stdout, got.stderr) == (0, '"42"\n', "")
    assert logged(log) == ["ran"]


@pytest.mark.parametrize("where", ["env", "file"])
def test_a_failing_command_is_one_line_exit_3_without_its_stderr(tmp_path, clean_environment, monkeypatch, where):
    stderr = f"vault: permission denied reading postgresql://airflow:{PASSWORD}@db/af"
    command = logging_command(
        tmp_path / "cmd.log", f"postgresql://airflow:{PASSWORD}@db/af", f"echo '{stderr}' >&2; echo more >&2; exit 3; "
    )
    args: list[str] = []
    if where == "env":
        monkeypatch.setenv(f"{ENV}_CMD", command)
        named = f"environment variable {ENV}_CMD"
    else:
        cfg = write_cfg(tmp_path / "airflow.cfg", f"[database]\nsql_alchemy_conn_cmd = {command}\n")
        args = ["--config", str(cfg)]
        named = f"[database] sql_alchemy_conn_cmd in {cfg}"
    run = run_cli(*args, "db", "init")
    message = (
        f"{named}: the command failed (exit status 3); its output is not shown, as it may hold a password: "
        "run the command yourself to see it"
    )
    assert_failed(run, 3, message, tmp_path, clean_environment)


def test_a_failing_command_shows_none_of_its_stderr(tmp_path, clean_environment, monkeypatch):
    """Its stderr may hold the secret in any shape (here, one it never printed on stdout)."""
    command = f"sh -c \"echo 'token {PASSWORD} rejected' >&2; exit 1\""
    monkeypatch.setenv(f"{ENV}_CMD", command)
    run = run_cli("db", "init")
    assert_failed(
        run,
        3,
        f"environment variable {ENV}_CMD: the command failed (exit status 1); its output is not shown, as it may "
        "hold a password: run the command yourself to see it",
        tmp_path,
        clean_environment,
    )


def test_a_command_that_prints_nothing_is_exit_2(tmp_path, clean_environment, monkeypatch):
    monkeypatch.setenv(f"{ENV}_CMD", "sh -c 'printf \"  \\n\"'")
    run = run_cli("db", "init")
    message = f"environment variable {ENV}_CMD: the command printed nothing; it must print the value on stdout"
    assert_failed(run, 2, message, tmp_path, clean_environment)


def test_a_command_that_does_not_finish_is_stopped_exit_3(tmp_path, clean_environment, monkeypatch):
    monkeypatch.setenv(f"{ENV}_CMD", "sh -c 'sleep 30; echo sqlite:////tmp/late.db'")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__COMMAND_TIMEOUT", "1s")
    started = time.monotonic()
    run = run_cli("db", "init")
    assert time.monotonic() - started < 10
    message = (
        f"environment variable {ENV}_CMD: the command did not finish within 1s and was stopped; "
        "raise [state_store] command_timeout or make the command answer sooner"
    )
    assert_failed(run, 3, message, tmp_path, clean_environment)


@pytest.mark.parametrize(
    "command, problem",
    [
        ("/nonexistent/vault read db", "cannot run '/nonexistent/vault': No such file or directory; fix the command"),
        ("vault read 'db", "cannot split the command into words (No closing quotation); fix its quoting"),
        ("   ", "the command is empty; give the command that prints the value"),
    ],
)
def test_a_command_that_cannot_run_is_exit_2(tmp_path, clean_environment, monkeypatch, command, problem):
    monkeypatch.setenv(f"{ENV}_CMD", command)
    assert_failed(run_cli("db", "init"), 2, f"environment variable {ENV}_CMD: {problem}", tmp_path, clean_environment)


def test_a_command_whose_output_is_no_url_is_exit_2_without_the_output(tmp_path, clean_environment, monkeypatch):
    monkeypatch.setenv(f"{ENV}_CMD", f"echo postgresql://u:{PASSWORD}@h:port/db")
    message = (
        f"environment variable {ENV}_CMD (its output): invalid value for [database] sql_alchemy_conn: expected a "
        "SQLAlchemy URL such as sqlite:////path/airflow.db (the value is not shown: it may hold a password)"
    )
    assert_failed(run_cli("db", "init"), 2, message, tmp_path, clean_environment)


def test_the_plain_variable_wins_and_no_command_runs(tmp_path, monkeypatch):
    log = tmp_path / "cmd.log"
    monkeypatch.setenv(f"{ENV}_CMD", logging_command(log, "sqlite:////tmp/never.db", "exit 1; "))
    failed = run_cli("config", "show")
    assert failed.exit_code == 3 and logged(log) == ["ran"], failed.output  # alone, it runs (and fails)
    log.unlink()
    monkeypatch.setenv(ENV, "sqlite:////tmp/plain.db")
    _, conn = show()
    assert conn["value"] == "sqlite:////tmp/plain.db" and logged(log) == []
    _, conn = show("--conn", "sqlite:////tmp/override.db")
    assert conn["value"] == "sqlite:////tmp/override.db" and logged(log) == []


def test_only_sensitive_options_have_cmd_forms(tmp_path, monkeypatch):
    """Airflow reads _cmd and _secret for its sensitive options only: a non-sensitive option's is not run."""
    log = tmp_path / "cmd.log"
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA_CMD", logging_command(log, "other"))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS_CMD", logging_command(log, "3"))
    run = run_cli("config", "show", "-o", "json")
    doc = json.loads(run.stdout)["options"]
    assert doc["database"]["sql_alchemy_schema"] == {"value": "", "source": "default"}
    assert doc["state_store"]["default_retention_days"] == {"value": 30, "source": "default"}
    assert logged(log) == []
    assert "unknown option [state_store] default_retention_days_cmd is ignored" in run.stderr  # a warning, as any typo


def test_engine_args_come_from_a_command_too(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_ENGINE_ARGS_CMD", "echo '{\"pool_size\": 2}'")
    run = run_cli("config", "show", "-o", "json")
    engine_args = json.loads(run.stdout)["options"]["database"]["sql_alchemy_engine_args"]
    assert engine_args == {"value": "***", "source": "command AIRFLOW__DATABASE__SQL_ALCHEMY_ENGINE_ARGS_CMD"}
    assert load_settings().engine_args == {"pool_size": 2}


# -- secrets -----------------------------------------------------------------------------------------------------
def secrets_cfg(tmp_path: Path, secrets: dict, database: str, backend: str = BACKEND) -> Path:
    return write_cfg(
        tmp_path / "airflow.cfg",
        f"[database]\n{database}\n\n[secrets]\nbackend = {backend}\nbackend_kwargs = {secrets['kwargs']}\n",
    )


def test_a_secret_names_a_real_store_and_is_masked(tmp_path, secrets):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    db_init(Store.open(load_settings(conn_override=url), create_file=True))
    secrets["store"].write_text(json.dumps({"sql_alchemy_conn": url}))
    cfg = secrets_cfg(tmp_path, secrets, "sql_alchemy_conn_secret = sql_alchemy_conn")
    assert run_cli("--config", str(cfg), "set", *TASK, "job", '"42"').exit_code == 0
    assert run_cli("--conn", url, "get", *TASK, "job").stdout == '"42"\n'
    assert logged(secrets["log"]) == ["eu sql_alchemy_conn"]

    secrets["store"].write_text(json.dumps({"sql_alchemy_conn": f"postgresql://airflow:{PASSWORD}@db/af"}))
    run, conn = show("--config", str(cfg))
    source = f"secret [database] sql_alchemy_conn_secret in {cfg} via {BACKEND}"
    assert conn == {"value": "postgresql://airflow:***@db/af", "source": source}
    assert PASSWORD not in run.stdout + run.stderr


def test_backend_kwarg_variables_win_over_backend_kwargs(tmp_path, monkeypatch, secrets):
    secrets["store"].write_text(json.dumps({"conn": "sqlite:////tmp/x.db"}))
    monkeypatch.setenv(f"{ENV}_SECRET", "conn")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", BACKEND)
    monkeypatch.setenv(
        "AIRFLOW__SECRETS__BACKEND_KWARGS", json.dumps({"path": "/nonexistent", "log": str(secrets["log"])})
    )
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARG__PATH", str(secrets["store"]))
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARG__REGION", "us")
    _, conn = show()
    assert conn == {"value": "sqlite:////tmp/x.db", "source": f"secret {ENV}_SECRET via {BACKEND}"}
    assert logged(secrets["log"]) == ["us conn"]


def test_a_secret_without_a_backend_is_exit_2(tmp_path, clean_environment, monkeypatch):
    monkeypatch.setenv(f"{ENV}_SECRET", "sql_alchemy_conn")
    message = (
        f"environment variable {ENV}_SECRET: a _secret option needs [secrets] backend (AIRFLOW__SECRETS__BACKEND), "
        "the secrets backend class to read it from; set it, or give the option another way"
    )
    assert_failed(run_cli("db", "init"), 2, message, tmp_path, clean_environment)


def test_a_missing_secret_is_exit_2(tmp_path, clean_environment, secrets):
    cfg = secrets_cfg(tmp_path, secrets, "sql_alchemy_conn_secret = no_such_key")
    message = (
        f"[database] sql_alchemy_conn_secret in {cfg}: the secrets backend {BACKEND} has no secret 'no_such_key'; "
        "create it or fix the name"
    )
    assert_failed(run_cli("--config", str(cfg), "db", "init"), 2, message, tmp_path, clean_environment)


def test_a_backend_that_raises_is_exit_3_masked(tmp_path, clean_environment, secrets):
    cfg = secrets_cfg(tmp_path, secrets, "sql_alchemy_conn_secret = raise")
    message = (
        f"[database] sql_alchemy_conn_secret in {cfg}: {BACKEND}.get_config('raise') failed: RuntimeError: vault is "
        "sealed; last URL postgresql://airflow:***@vault/db"
    )
    assert_failed(run_cli("--config", str(cfg), "db", "init"), 3, message, tmp_path, clean_environment)


def test_a_backend_that_cannot_be_made_is_exit_3(tmp_path, clean_environment, secrets):
    cfg = secrets_cfg(tmp_path, secrets, "sql_alchemy_conn_secret = conn", backend="ss_test_secrets.Refuses")
    message = (
        f"{cfg}: [secrets] backend = 'ss_test_secrets.Refuses': cannot create it with [secrets] backend_kwargs: "
        "ValueError: no vault address given"
    )
    assert_failed(run_cli("--config", str(cfg), "db", "init"), 3, message, tmp_path, clean_environment)


@pytest.mark.parametrize(
    "backend, problem",
    [
        (
            "no_such_secrets_mod.Backend",
            "cannot import module 'no_such_secrets_mod' (ModuleNotFoundError: No module named 'no_such_secrets_mod')",
        ),
        ("ss_test_secrets.Missing", "module 'ss_test_secrets' has no attribute 'Missing'"),
        ("ss_test_secrets.not_a_class", "ss_test_secrets.not_a_class is not a class"),
    ],
)
def test_a_backend_that_cannot_be_loaded_is_exit_2(tmp_path, clean_environment, secrets, backend, problem):
    cfg = secrets_cfg(tmp_path, secrets, "sql_alchemy_conn_secret = conn", backend=backend)
    message = f"{cfg}: [secrets] backend = {backend!r}: {problem}"
    assert_failed(run_cli("--config", str(cfg), "db", "init"), 2, message, tmp_path, clean_environment)


@pytest.mark.slow
def test_the_fast_get_path_hands_a_secret_over(tmp_path, monkeypatch, secrets):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    db_init(Store.open(load_settings(conn_override=url), create_file=True))
    assert run_cli("--conn", url, "set", *TASK, "job", '"7"').exit_code == 0
    secrets["store"].write_text(json.dumps({"conn": url}))
    cfg = secrets_cfg(tmp_path, secrets, "sql_alchemy_conn_secret = conn")
    env_path = str(Path(secrets["store"]).parent / "secrets-backend")
    monkeypatch.setenv("PYTHONPATH", env_path)
    got = run_statestore_process("--config", str(cfg), "get", *TASK, "job")
    assert (got.exit_code, got.stdout, got.stderr) == (0, '"7"\n', "")
    assert logged(secrets["log"]) == ["eu conn"]
