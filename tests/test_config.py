"""Configuration: lookup order, file discovery, every option of options.toml, backend classes, `config show`.

Everything runs on real INI files in tmp_path and real environment variables (monkeypatch); nothing of
statestore is mocked. The autouse ``clean_environment`` fixture (conftest) clears AIRFLOW_* and points
AIRFLOW_HOME at a fresh ``tmp_path/airflow-home``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from cli_running import Result, run_cli
from paths import REPO

from statestore_cli.backends.loader import load_backend_class
from statestore_cli.config import BUILTIN_BACKEND, is_builtin_backend, load_option_specs, load_settings
from statestore_cli.errors import ConfigError

TASK = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract")
ALL_OPTIONS = {(spec.section, spec.option) for spec in load_option_specs()}

INT_EXPECTED = "a whole number from 0 to 2147483647"
BOOL_EXPECTED = "a boolean (true/false, yes/no, on/off, 1/0)"
CLASS_EXPECTED = "a dotted path such as mypackage.module.ClassName"
URL_EXPECTED = "a SQLAlchemy URL such as sqlite:////path/airflow.db"
DURATION_EXPECTED = "0 or a duration such as 12h, 2d, 1d12h or P1D"
TIMEOUT_EXPECTED = "a positive duration such as 10s, 2m or PT30S"
HTTP_URL_EXPECTED = "an http:// or https:// URL without a user or password, such as https://airflow.example.com"
TEXT_EXPECTED = "text without control characters"
SCHEMA_EXPECTED = "a schema name of at most 63 characters, without control characters"
IMPORT_EXPECTED = "an import path such as airflow_local_settings.connect_args"
ENGINE_ARGS_EXPECTED = 'a JSON object such as {"pool_size": 5}'
KWARGS_EXPECTED = 'a JSON object such as {"connections_prefix": "airflow/connections"}'
NOT_SHOWN = " (the value is not shown: it may hold a password)"


def write_cfg(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def env_var(section: str, option: str) -> str:
    return f"AIRFLOW__{section.upper()}__{option.upper()}"


def value(section: str, option: str, **kwargs) -> object:
    return load_settings(**kwargs).setting(section, option).value


def source(section: str, option: str, **kwargs) -> str:
    return load_settings(**kwargs).setting(section, option).source


def assert_one_line_usage_error(run: Result, message: str | None = None) -> None:
    assert run.exit_code == 2, run.output
    assert run.stdout == "", run.output
    assert run.stderr.startswith("statestore: error: "), run.output
    assert run.stderr.endswith("\n") and run.stderr.count("\n") == 1, run.output
    assert "Traceback" not in run.stderr
    if message is not None:
        assert run.stderr == f"statestore: error: {message}\n"


# -- defaults -----------------------------------------------------------------------------------------------
EXPECTED_DEFAULTS = {
    ("state_store", "backend"): BUILTIN_BACKEND,
    ("state_store", "default_retention_days"): 30,
    ("state_store", "dag_run_default_retention_days"): 30,
    ("state_store", "clear_on_success"): False,
    ("state_store", "state_cleanup_batch_size"): 0,
    ("state_store", "state_cleanup_older_than"): "0",
    ("state_store", "max_value_storage_bytes"): 65535,
    ("state_store", "connect_timeout"): "10s",
    ("state_store", "lock_timeout"): "30s",
    ("workers", "state_store_backend"): "",
    ("state_store", "command_timeout"): "30s",
    ("state_store", "api_url"): "",
    ("state_store", "api_token"): "",
    ("state_store", "api_username"): "",
    ("state_store", "api_password"): "",
    ("state_store", "api_ca_bundle"): "",
    ("state_store", "api_concurrency"): 8,
    ("database", "sql_alchemy_schema"): "",
    ("database", "sql_alchemy_connect_args"): "",
    ("database", "sql_alchemy_engine_args"): "",
    ("secrets", "backend"): "",
    ("secrets", "backend_kwargs"): "",
}


def test_the_defaults_are_the_documented_ones(clean_environment):
    """No file, no env: every option has the default docs/reference/configuration.md documents and says so."""
    settings = load_settings()
    assert settings.config_file is None
    assert settings.airflow_home == clean_environment
    for (section, option), expected in EXPECTED_DEFAULTS.items():
        setting = settings.setting(section, option)
        assert (setting.value, setting.source) == (expected, "default"), (section, option)
    assert settings.sql_alchemy_conn == f"sqlite:///{clean_environment}/airflow.db"
    assert settings.setting("database", "sql_alchemy_conn").source == "default"
    # the typed accessors agree
    assert (settings.default_retention_days, settings.clear_on_success) == (30, False)
    assert (settings.state_cleanup_batch_size, settings.max_value_storage_bytes) == (0, 65535)
    assert settings.state_cleanup_older_than == timedelta(0)
    assert (settings.backend, settings.worker_backend) == (BUILTIN_BACKEND, "")
    assert settings.uses_builtin_backend
    assert (settings.connect_timeout, settings.lock_timeout) == (10.0, 30.0)
    page = (REPO / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    for (section, option), expected in EXPECTED_DEFAULTS.items():
        shown = "(none)" if expected == "" else f"`{str(expected).lower() if isinstance(expected, bool) else expected}`"
        assert f"(#{section}-{option}) | {shown} | `AIRFLOW__" in page, (section, option)
    assert "(#database-sql_alchemy_conn) | `sqlite:///$AIRFLOW_HOME/airflow.db` |" in page


def test_every_option_of_options_toml_is_covered_here():
    """A new option in options.toml must get its default, valid and invalid cases in this file."""
    assert set(EXPECTED_DEFAULTS) | {("database", "sql_alchemy_conn")} == ALL_OPTIONS
    assert {(s, o) for s, o, _, _ in VALID} == ALL_OPTIONS
    assert {(s, o) for s, o, _, _ in INVALID} == ALL_OPTIONS


# -- file discovery -----------------------------------------------------------------------------------------
def test_airflow_home_defaults_to_tilde_airflow(monkeypatch, tmp_path):
    """Without AIRFLOW_HOME: ~/airflow is the home, its airflow.cfg the file, its airflow.db the database."""
    monkeypatch.delenv("AIRFLOW_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = load_settings()
    assert settings.airflow_home == tmp_path / "airflow"
    assert settings.config_file is None  # ~/airflow/airflow.cfg does not exist yet: skipped
    assert settings.sql_alchemy_conn == f"sqlite:///{tmp_path}/airflow/airflow.db"

    cfg = write_cfg(tmp_path / "airflow" / "airflow.cfg", "[state_store]\ndefault_retention_days = 3\n")
    settings = load_settings()
    assert settings.config_file == cfg
    assert settings.default_retention_days == 3
    assert settings.setting("state_store", "default_retention_days").source == f"file {cfg}"


def test_airflow_home_cfg_is_read(clean_environment):
    cfg = write_cfg(clean_environment / "airflow.cfg", "[state_store]\nclear_on_success = true\n")
    settings = load_settings()
    assert settings.config_file == cfg
    assert settings.clear_on_success is True


def test_airflow_config_wins_over_airflow_home_cfg(monkeypatch, tmp_path, clean_environment):
    write_cfg(clean_environment / "airflow.cfg", "[state_store]\ndefault_retention_days = 1\n")
    other = write_cfg(tmp_path / "elsewhere" / "my.cfg", "[state_store]\ndefault_retention_days = 2\n")
    monkeypatch.setenv("AIRFLOW_CONFIG", str(other))
    settings = load_settings()
    assert settings.config_file == other
    assert settings.default_retention_days == 2


def test_explicit_config_wins_over_airflow_config(monkeypatch, tmp_path, clean_environment):
    write_cfg(clean_environment / "airflow.cfg", "[state_store]\ndefault_retention_days = 1\n")
    monkeypatch.setenv(
        "AIRFLOW_CONFIG", str(write_cfg(tmp_path / "a.cfg", "[state_store]\ndefault_retention_days = 2\n"))
    )
    explicit = write_cfg(tmp_path / "b.cfg", "[state_store]\ndefault_retention_days = 3\n")
    settings = load_settings(config_path=explicit)
    assert settings.config_file == explicit
    assert settings.default_retention_days == 3


def test_airflow_config_naming_a_missing_file_is_skipped(monkeypatch, tmp_path, clean_environment):
    """$AIRFLOW_CONFIG names the file; when it is not there, nothing is read (not even airflow.cfg)."""
    write_cfg(clean_environment / "airflow.cfg", "[state_store]\ndefault_retention_days = 1\n")
    monkeypatch.setenv("AIRFLOW_CONFIG", str(tmp_path / "nope.cfg"))
    settings = load_settings()
    assert settings.config_file is None
    assert settings.default_retention_days == 30
    assert [str(note) for note in settings.warnings] == [
        f"$AIRFLOW_CONFIG names {tmp_path / 'nope.cfg'}, which does not exist (or is not a file): "
        "using the environment and the defaults; fix the path or unset AIRFLOW_CONFIG"
    ]


def test_explicit_config_that_does_not_exist_is_an_error(tmp_path):
    missing = tmp_path / "missing.cfg"
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(config_path=missing)
    run = run_cli("--config", str(missing), "config", "show")
    assert_one_line_usage_error(run, f"config file {missing} does not exist; pass an existing file to --config")


def test_explicit_config_that_is_a_directory_is_an_error(tmp_path):
    assert_one_line_usage_error(
        run_cli("--config", str(tmp_path), "config", "show"),
        f"config file {tmp_path} is not a file; pass an airflow.cfg-style file to --config",
    )


# -- lookup order -------------------------------------------------------------------------------------------
def test_lookup_order_conn_then_env_then_file_then_default(monkeypatch, tmp_path):
    cfg = write_cfg(tmp_path / "airflow.cfg", "[database]\nsql_alchemy_conn = sqlite:////from/file.db\n")
    assert (value("database", "sql_alchemy_conn"), source("database", "sql_alchemy_conn")) == (
        f"sqlite:///{tmp_path}/airflow-home/airflow.db",
        "default",
    )
    assert value("database", "sql_alchemy_conn", config_path=cfg) == "sqlite:////from/file.db"
    assert source("database", "sql_alchemy_conn", config_path=cfg) == f"file {cfg}"

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:////from/env.db")
    assert value("database", "sql_alchemy_conn", config_path=cfg) == "sqlite:////from/env.db"
    assert source("database", "sql_alchemy_conn", config_path=cfg) == "env AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"

    kwargs = {"config_path": cfg, "conn_override": "sqlite:////from/conn.db"}
    assert value("database", "sql_alchemy_conn", **kwargs) == "sqlite:////from/conn.db"
    assert source("database", "sql_alchemy_conn", **kwargs) == "conn_override"


def test_env_beats_file_for_state_store_options(monkeypatch, tmp_path):
    cfg = write_cfg(
        tmp_path / "airflow.cfg",
        """
        [state_store]
        default_retention_days = 5
        max_value_storage_bytes = 100
        """,
    )
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "9")
    settings = load_settings(config_path=cfg)
    assert settings.default_retention_days == 9  # env
    assert settings.max_value_storage_bytes == 100  # file, no env for it
    assert settings.state_cleanup_batch_size == 0  # neither: default


def test_an_invalid_lower_priority_value_is_ignored_when_overridden(monkeypatch, tmp_path):
    """Only the value that wins is validated: a bad file value overridden by env is not an error."""
    cfg = write_cfg(tmp_path / "airflow.cfg", "[state_store]\ndefault_retention_days = abc\n")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "4")
    assert load_settings(config_path=cfg).default_retention_days == 4


def test_only_the_state_store_section_is_read_not_task_state_store(tmp_path):
    """The section is [state_store], as in Airflow, not [task_state_store]; other Airflow sections are ignored."""
    cfg = write_cfg(
        tmp_path / "airflow.cfg",
        """
        [core]
        dags_folder = /opt/dags
        executor = LocalExecutor

        [task_state_store]
        default_retention_days = 5

        [state_store]
        clear_on_success = yes
        """,
    )
    settings = load_settings(config_path=cfg)
    assert settings.default_retention_days == 30
    assert settings.clear_on_success is True


# -- every option: valid values from the file and from the environment --------------------------------------
VALID = [
    ("state_store", "backend", "mypkg.backends.S3Backend", "mypkg.backends.S3Backend"),
    ("state_store", "default_retention_days", "7", 7),
    ("state_store", "default_retention_days", "0", 0),
    ("state_store", "dag_run_default_retention_days", "3", 3),
    ("state_store", "dag_run_default_retention_days", "0", 0),
    ("state_store", "clear_on_success", "true", True),
    ("state_store", "state_cleanup_batch_size", "500", 500),
    ("state_store", "state_cleanup_older_than", "1d12h", "1d12h"),
    ("state_store", "state_cleanup_older_than", "P2D", "P2D"),
    ("state_store", "state_cleanup_older_than", "0", "0"),
    ("state_store", "max_value_storage_bytes", "0", 0),
    ("state_store", "max_value_storage_bytes", "1048576", 1048576),
    ("state_store", "connect_timeout", "30s", "30s"),
    ("state_store", "connect_timeout", "1m30s", "1m30s"),
    ("state_store", "connect_timeout", "PT2.5S", "PT2.5S"),
    ("state_store", "lock_timeout", "1s", "1s"),
    ("state_store", "lock_timeout", "2m", "2m"),
    ("state_store", "lock_timeout", "PT0.5S", "PT0.5S"),
    ("state_store", "lock_timeout", "2147483s", "2147483s"),
    ("workers", "state_store_backend", "mypkg.workers.RefBackend", "mypkg.workers.RefBackend"),
    (
        "database",
        "sql_alchemy_conn",
        "postgresql+psycopg2://u:p@db:5432/airflow",
        "postgresql+psycopg2://u:p@db:5432/airflow",
    ),
    ("state_store", "command_timeout", "5s", "5s"),
    ("state_store", "api_url", "https://airflow.example.com/", "https://airflow.example.com"),
    ("state_store", "api_url", "http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("state_store", "api_token", "eyJhbGciOi.payload.sig", "eyJhbGciOi.payload.sig"),
    ("state_store", "api_username", "ops-bot", "ops-bot"),
    ("state_store", "api_password", "s3cret!", "s3cret!"),
    ("state_store", "api_ca_bundle", "/etc/ssl/corp-ca.pem", "/etc/ssl/corp-ca.pem"),
    ("state_store", "api_concurrency", "1", 1),
    ("state_store", "api_concurrency", "64", 64),
    ("database", "sql_alchemy_schema", "airflow", "airflow"),
    ("database", "sql_alchemy_schema", "", ""),
    ("database", "sql_alchemy_connect_args", "local_settings.connect_args", "local_settings.connect_args"),
    ("database", "sql_alchemy_engine_args", '{"pool_size": 3}', '{"pool_size": 3}'),
    ("database", "sql_alchemy_engine_args", "", ""),
    ("secrets", "backend", "mypkg.secrets.VaultBackend", "mypkg.secrets.VaultBackend"),
    ("secrets", "backend_kwargs", '{"url": "http://127.0.0.1:8200"}', '{"url": "http://127.0.0.1:8200"}'),
]


@pytest.mark.parametrize("where", ["file", "env"])
@pytest.mark.parametrize("section, option, raw, expected", VALID)
def test_valid_value(monkeypatch, tmp_path, where, section, option, raw, expected):
    if where == "file":
        cfg = write_cfg(tmp_path / "airflow.cfg", f"[{section}]\n{option} = {raw}\n")
        setting = load_settings(config_path=cfg).setting(section, option)
        assert setting.source == f"file {cfg}"
    else:
        monkeypatch.setenv(env_var(section, option), raw)
        setting = load_settings().setting(section, option)
        assert setting.source == f"env {env_var(section, option)}"
    assert setting.value == expected
    assert type(setting.value) is type(expected)


@pytest.mark.parametrize(
    "raw, expected",
    [
        *[(s, True) for s in ("True", "true", "TRUE", "1", "yes", "Yes", "on", "ON")],
        *[(s, False) for s in ("False", "false", "FALSE", "0", "no", "No", "off", "OFF")],
    ],
)
def test_boolean_spellings(monkeypatch, tmp_path, raw, expected):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS", raw)
    assert load_settings().clear_on_success is expected
    monkeypatch.delenv("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS")
    cfg = write_cfg(tmp_path / "airflow.cfg", f"[state_store]\nclear_on_success = {raw}\n")
    assert load_settings(config_path=cfg).clear_on_success is expected


def test_surrounding_whitespace_in_env_values_is_ignored(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", " 12 ")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS", " on\n")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "  mypkg.mod.Backend ")
    settings = load_settings()
    assert (settings.default_retention_days, settings.clear_on_success) == (12, True)
    assert settings.backend == "mypkg.mod.Backend"


# -- every option: each invalid form --------------------------------------------------------------------------
INVALID = [
    # int >= 0: wrong type, negative, fraction, empty
    ("state_store", "default_retention_days", "abc", INT_EXPECTED),
    ("state_store", "default_retention_days", "-1", INT_EXPECTED),
    ("state_store", "default_retention_days", "1.5", INT_EXPECTED),
    ("state_store", "default_retention_days", "7d", INT_EXPECTED),
    ("state_store", "default_retention_days", "", INT_EXPECTED),
    ("state_store", "dag_run_default_retention_days", "-1", INT_EXPECTED),
    ("state_store", "dag_run_default_retention_days", "2d", INT_EXPECTED),
    ("state_store", "state_cleanup_batch_size", "ten", INT_EXPECTED),
    ("state_store", "state_cleanup_batch_size", "-5", INT_EXPECTED),
    ("state_store", "max_value_storage_bytes", "64k", INT_EXPECTED),
    ("state_store", "max_value_storage_bytes", "-1", INT_EXPECTED),
    # bool
    ("state_store", "clear_on_success", "maybe", BOOL_EXPECTED),
    ("state_store", "clear_on_success", "2", BOOL_EXPECTED),
    ("state_store", "clear_on_success", "", BOOL_EXPECTED),
    # dotted paths
    ("state_store", "backend", "NoDots", CLASS_EXPECTED),
    ("state_store", "backend", "my pkg.Backend", CLASS_EXPECTED),
    ("state_store", "backend", "mypkg..Backend", CLASS_EXPECTED),
    ("state_store", "backend", "mypkg.Backend.", CLASS_EXPECTED),
    ("state_store", "backend", "1pkg.Backend", CLASS_EXPECTED),
    ("state_store", "backend", "mypkg/mod.Backend", CLASS_EXPECTED),
    ("workers", "state_store_backend", "mypkg.mod:Backend", CLASS_EXPECTED),
    # durations
    ("state_store", "connect_timeout", "10", TIMEOUT_EXPECTED),
    ("state_store", "connect_timeout", "0s", TIMEOUT_EXPECTED),
    ("state_store", "connect_timeout", "soon", TIMEOUT_EXPECTED),
    ("state_store", "connect_timeout", "", TIMEOUT_EXPECTED),
    ("state_store", "lock_timeout", "30", TIMEOUT_EXPECTED),
    ("state_store", "lock_timeout", "0s", TIMEOUT_EXPECTED),
    ("state_store", "lock_timeout", "-5s", TIMEOUT_EXPECTED),
    ("state_store", "lock_timeout", "forever", TIMEOUT_EXPECTED),
    ("state_store", "lock_timeout", "", TIMEOUT_EXPECTED),
    ("state_store", "lock_timeout", "2147484s", "at most 2147483 seconds"),
    # URL
    ("database", "sql_alchemy_conn", "", URL_EXPECTED),
    # duration >= 0
    ("state_store", "state_cleanup_older_than", "-1d", DURATION_EXPECTED),
    ("state_store", "state_cleanup_older_than", "1 day", DURATION_EXPECTED),
    ("state_store", "state_cleanup_older_than", "", DURATION_EXPECTED),
    ("state_store", "command_timeout", "0s", TIMEOUT_EXPECTED),
    ("state_store", "command_timeout", "soon", TIMEOUT_EXPECTED),
    # the REST API
    ("state_store", "api_url", "ftp://airflow.example.com", HTTP_URL_EXPECTED),
    ("state_store", "api_url", "https://", HTTP_URL_EXPECTED),
    ("state_store", "api_url", "airflow.example.com", HTTP_URL_EXPECTED),
    ("state_store", "api_url", "https://airflow.example.com:http", HTTP_URL_EXPECTED),
    ("state_store", "api_token", "tok\x01en", TEXT_EXPECTED),
    ("state_store", "api_username", "a\x7fb", TEXT_EXPECTED),
    ("state_store", "api_password", "pass\x1fword", TEXT_EXPECTED),
    ("state_store", "api_ca_bundle", "ca\x1b.pem", "a file path"),
    ("state_store", "api_concurrency", "0", "a whole number from 1 to 64"),
    ("state_store", "api_concurrency", "65", "a whole number from 1 to 64"),
    # [database] and [secrets] options Airflow shares
    ("database", "sql_alchemy_schema", "s" * 64, SCHEMA_EXPECTED),
    ("database", "sql_alchemy_schema", "a\x01b", SCHEMA_EXPECTED),
    ("database", "sql_alchemy_connect_args", "connect_args", IMPORT_EXPECTED),
    ("database", "sql_alchemy_connect_args", "my settings.connect_args", IMPORT_EXPECTED),
    (
        "database",
        "sql_alchemy_engine_args",
        "{not json",
        f"{ENGINE_ARGS_EXPECTED} (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
    ),
    ("database", "sql_alchemy_engine_args", "[1, 2]", f"{ENGINE_ARGS_EXPECTED}, not an array"),
    ("database", "sql_alchemy_engine_args", "5", f"{ENGINE_ARGS_EXPECTED}, not a number"),
    ("secrets", "backend", "vault", CLASS_EXPECTED),
    ("secrets", "backend_kwargs", '"url"', f"{KWARGS_EXPECTED}, not a string"),
]


def invalid_message(where: str, section: str, option: str, raw: str, expected: str) -> str:
    """The error of an invalid value; a secret option's value is not shown (a URL's is, its password masked)."""
    spec = next(spec for spec in load_option_specs() if (spec.section, spec.option) == (section, option))
    if spec.secret and spec.type != "url":
        return f"{where}: invalid value for [{section}] {option}: expected {expected}{NOT_SHOWN}"
    return f"{where}: invalid value {raw!r} for [{section}] {option}: expected {expected}"


@pytest.mark.parametrize("section, option, raw, expected", INVALID)
def test_invalid_value_from_file(tmp_path, section, option, raw, expected):
    cfg = write_cfg(tmp_path / "airflow.cfg", f"[{section}]\n{option} = {raw}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=cfg)
    assert str(caught.value) == invalid_message(str(cfg), section, option, raw, expected)


@pytest.mark.parametrize("section, option, raw, expected", INVALID)
def test_invalid_value_from_env(monkeypatch, section, option, raw, expected):
    monkeypatch.setenv(env_var(section, option), raw)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    where = f"environment variable {env_var(section, option)}"
    assert str(caught.value) == invalid_message(where, section, option, raw, expected)


def test_blank_url_from_env_and_empty_conn_are_errors(monkeypatch):
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "   ")
    with pytest.raises(
        ConfigError, match=r"^environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: invalid value '   '"
    ):
        load_settings()
    with pytest.raises(ConfigError) as caught:
        load_settings(conn_override="")
    assert str(caught.value) == (
        f"conn_override: invalid value '' for [database] sql_alchemy_conn: expected {URL_EXPECTED}"
    )


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql://user:s3cret@host:notaport/db", "postgresql://user:***@host:notaport/db"),
        ("user:s3cret@host/db", "user:***@host/db"),  # scheme forgotten
        ("mysql://user:s3c@ret@host:port/db", "mysql://user:***@host:port/db"),  # unencoded @ in the password
        ("not a url", "not a url"),
    ],
)
@pytest.mark.parametrize("where", ["file", "env"])
def test_unparsable_url_is_an_error_naming_its_source_without_the_password(monkeypatch, tmp_path, where, url, shown):
    """A URL SQLAlchemy cannot parse fails at load time, says where it came from and hides the password."""
    if where == "file":
        cfg = write_cfg(tmp_path / "airflow.cfg", f"[database]\nsql_alchemy_conn = {url}\n")
        origin = str(cfg)
    else:
        monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", url)
        cfg, origin = None, "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=cfg)
    assert (
        str(caught.value)
        == f"{origin}: invalid value {shown!r} for [database] sql_alchemy_conn: expected {URL_EXPECTED}"
    )
    assert "s3c" not in str(caught.value)


@pytest.mark.parametrize(
    "setup, message",
    [
        (
            {"AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS": "abc"},
            "environment variable AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS: invalid value 'abc' "
            f"for [state_store] default_retention_days: expected {INT_EXPECTED}",
        ),
        (
            {"AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS": "maybe"},
            "environment variable AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS: invalid value 'maybe' "
            f"for [state_store] clear_on_success: expected {BOOL_EXPECTED}",
        ),
        (
            {"AIRFLOW__WORKERS__STATE_STORE_BACKEND": "not a path"},
            "environment variable AIRFLOW__WORKERS__STATE_STORE_BACKEND: invalid value 'not a path' "
            f"for [workers] state_store_backend: expected {CLASS_EXPECTED}",
        ),
        (
            # a newline in an env value stays on one line (repr)
            {"AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES": "10\n20"},
            "environment variable AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES: invalid value '10\\n20' "
            f"for [state_store] max_value_storage_bytes: expected {INT_EXPECTED}",
        ),
    ],
)
def test_invalid_env_value_through_the_cli(monkeypatch, setup, message):
    for name, raw in setup.items():
        monkeypatch.setenv(name, raw)
    assert_one_line_usage_error(run_cli("config", "show"), message)


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "[state_store]\nstate_cleanup_batch_size = -5\n",
            "invalid value '-5' for [state_store] state_cleanup_batch_size",
        ),
        ("[state_store]\nbackend = mypkg..Backend\n", "invalid value 'mypkg..Backend' for [state_store] backend"),
        ("[database]\nsql_alchemy_conn =\n", "invalid value '' for [database] sql_alchemy_conn"),
    ],
)
@pytest.mark.parametrize("how", ["--config", "AIRFLOW_CONFIG", "AIRFLOW_HOME"])
def test_invalid_file_value_through_the_cli(monkeypatch, tmp_path, clean_environment, body, message, how):
    cfg = write_cfg((clean_environment if how == "AIRFLOW_HOME" else tmp_path) / "airflow.cfg", body)
    if how == "AIRFLOW_CONFIG":
        monkeypatch.setenv("AIRFLOW_CONFIG", str(cfg))
    run = run_cli(*(["--config", str(cfg)] if how == "--config" else []), "config", "show")
    assert_one_line_usage_error(run)
    assert run.stderr.startswith(f"statestore: error: {cfg}: {message}: expected ")


# -- the INI file itself --------------------------------------------------------------------------------------
def test_file_without_section_header_is_a_one_line_error(tmp_path):
    cfg = write_cfg(tmp_path / "airflow.cfg", "default_retention_days = 5\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=cfg)
    assert (
        str(caught.value)
        == f"cannot read config file {cfg}: line 1 comes before any [section] header: 'default_retention_days = 5'"
    )
    assert_one_line_usage_error(
        run_cli("--config", str(cfg), "config", "show"),
        f"cannot read config file {cfg}: line 1 comes before any [section] header: 'default_retention_days = 5'",
    )


@pytest.mark.parametrize(
    "body, problem",
    [
        ("[state_store]\njust some words\n", "line 2 is neither '[section]' nor 'option = value': 'just some words'"),
        ("[state_store\nbackend = a.B\n", "line 1 is an unclosed [section] header: '[state_store'"),
    ],
    ids=["line-without-equals", "unclosed-section"],
)
def test_malformed_file_is_a_one_line_error_naming_the_file(tmp_path, body, problem):
    cfg = write_cfg(tmp_path / "airflow.cfg", body)
    run = run_cli("--config", str(cfg), "config", "show")
    assert_one_line_usage_error(run, f"cannot read config file {cfg}: {problem}")


def test_file_that_is_not_utf8_is_a_one_line_error(tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_bytes(b"[state_store]\nbackend = caf\xe9.Backend\n")
    run = run_cli("--config", str(cfg), "config", "show")
    assert_one_line_usage_error(run)
    assert run.stderr.startswith(f"statestore: error: cannot read config file {cfg}: ")


def test_percent_signs_in_a_file_url_survive(tmp_path):
    """No interpolation: percent-encoded passwords and literal %(...)s reach SQLAlchemy unchanged."""
    url = "postgresql://user:p%40ss%25w%(x)s@host/db"
    cfg = write_cfg(tmp_path / "airflow.cfg", f"[database]\nsql_alchemy_conn = {url}\n")
    assert load_settings(config_path=cfg).sql_alchemy_conn == url


# -- backend classes ------------------------------------------------------------------------------------------
NOT_A_BACKEND = (
    "is not a subclass of statestore_cli.BaseStoreBackend or of Airflow's airflow.sdk.state.BaseStoreBackend"
)


def backend_setting(monkeypatch, path: str, section: str = "state_store", option: str = "backend"):
    monkeypatch.setenv(env_var(section, option), path)
    return load_settings().setting(section, option)


def test_valid_custom_backend_class_loads(monkeypatch, backends):
    cls = load_backend_class(backend_setting(monkeypatch, f"{backends}.DictBackend"))
    assert cls.__name__ == "DictBackend" and cls.__module__ == backends
    assert not load_settings().uses_builtin_backend


def test_builtin_backend_class_loads(monkeypatch):
    from statestore_cli.backends.metastore import MetastoreBackend

    assert load_backend_class(load_settings().setting("state_store", "backend")) is MetastoreBackend


@pytest.mark.parametrize(
    "path, reason",
    [
        (
            "no_such_module_xyz.Backend",
            "cannot import module 'no_such_module_xyz' (ModuleNotFoundError: No module named 'no_such_module_xyz')",
        ),
        ("ss_test_backends.Missing", "module 'ss_test_backends' has no class 'Missing'"),
        (
            "ss_test_backends.NotABackend",
            f"ss_test_backends.NotABackend {NOT_A_BACKEND}",
        ),
        (
            "ss_test_backends.not_a_class",
            f"ss_test_backends.not_a_class {NOT_A_BACKEND}",
        ),
        ("ss_test_broken.Backend", "cannot import module 'ss_test_broken' (RuntimeError: boom at import)"),
    ],
    ids=["unknown-module", "missing-class", "not-a-subclass", "not-a-class", "import-fails"],
)
@pytest.mark.parametrize("section, option", [("state_store", "backend"), ("workers", "state_store_backend")])
def test_bad_backend_class_is_a_one_line_config_error(monkeypatch, backends, section, option, path, reason):
    setting = backend_setting(monkeypatch, path, section, option)
    with pytest.raises(ConfigError) as caught:
        load_backend_class(setting)
    assert str(caught.value) == (
        f"environment variable {env_var(section, option)}: [{section}] {option} = {path!r}: {reason}"
    )


def test_bad_backend_class_from_a_file_names_the_file(tmp_path, backends):
    cfg = write_cfg(tmp_path / "airflow.cfg", f"[state_store]\nbackend = {backends}.NotABackend\n")
    with pytest.raises(ConfigError) as caught:
        load_backend_class(load_settings(config_path=cfg).setting("state_store", "backend"))
    assert str(caught.value).startswith(f"{cfg}: [state_store] backend = '{backends}.NotABackend': ")


@pytest.mark.parametrize(
    "path, builtin",
    [
        ("", True),
        (BUILTIN_BACKEND, True),
        ("statestore_cli.MetastoreBackend", True),  # the same class through the package's public name
        ("airflow.state.metastore.MetastoreBackend", True),  # copied from an Airflow deployment's airflow.cfg
        ("airflow.providers.x.state.MetastoreBackend", True),
        ("airflow.state.metastore.OtherBackend", False),
        ("airflow_plugins.MetastoreBackend", False),
        ("mypkg.MetastoreBackend", False),
        ("mypkg.backends.S3Backend", False),
    ],
)
def test_is_builtin_backend(path, builtin):
    assert is_builtin_backend(path) is builtin


def test_airflow_metastore_path_uses_the_builtin_store(monkeypatch, cli):
    """airflow.state.metastore.MetastoreBackend (Airflow not installed) works like the built-in one."""
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "airflow.state.metastore.MetastoreBackend")
    assert load_settings().uses_builtin_backend
    assert cli("set", *TASK, "k", "[1, 2]").exit_code == 0
    run = cli("get", *TASK, "k")
    assert (run.exit_code, json.loads(run.stdout)) == (0, [1, 2]), run.output
    run = cli("clean", "--output", "json")
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["deleted"] == 0  # really cleaned, not skipped


def test_package_level_metastore_path_uses_the_builtin_store(monkeypatch, cli):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "statestore_cli.MetastoreBackend")
    assert cli("set", *TASK, "k", '"v"').exit_code == 0
    run = cli("clean", "--output", "json")
    assert run.exit_code == 0, run.output
    assert "skipped" not in json.loads(run.stdout)


def test_clean_with_a_valid_custom_backend_is_skipped(monkeypatch, cli, backends):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", f"{backends}.DictBackend")
    run = cli("clean")
    assert run.exit_code == 0, run.output
    assert run.stderr.startswith(f"skipped: [state_store] backend is {backends}.DictBackend, not the metastore")
    run = cli("clean", "--output", "json")
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert (doc["dry_run"], doc["skipped"]) == (False, True)
    assert f"{backends}.DictBackend" in doc["reason"]
    run = cli("clean", "--dry-run", "--output", "json")
    assert run.exit_code == 0, run.output
    assert (json.loads(run.stdout)["dry_run"], json.loads(run.stdout)["skipped"]) == (True, True)


@pytest.mark.parametrize("path", ["no_such_module_xyz.Backend", "ss_test_backends.NotABackend"])
@pytest.mark.parametrize(
    "command",
    [
        ("set", *TASK, "k", "1"),
        ("get", *TASK, "k"),
        ("clean",),
        ("clean", "--dry-run"),
        ("clean", "--output", "json"),
    ],
)
def test_command_with_an_invalid_backend_exits_2(monkeypatch, cli, backends, path, command):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", path)
    run = cli(*command)
    assert_one_line_usage_error(run)
    assert run.stderr.startswith(
        f"statestore: error: environment variable AIRFLOW__STATE_STORE__BACKEND: [state_store] backend = {path!r}: "
    )


def test_set_with_an_invalid_worker_backend_exits_2(monkeypatch, cli, backends):
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", f"{backends}.NotABackend")
    run = cli("set", *TASK, "k", "1")
    assert_one_line_usage_error(
        run,
        f"environment variable AIRFLOW__WORKERS__STATE_STORE_BACKEND: [workers] state_store_backend = "
        f"'{backends}.NotABackend': {backends}.NotABackend {NOT_A_BACKEND}",
    )


# -- config show ----------------------------------------------------------------------------------------------
def test_config_show_json_structure_and_sources(monkeypatch, tmp_path, clean_environment):
    cfg = write_cfg(
        tmp_path / "airflow.cfg",
        """
        [state_store]
        default_retention_days = 7
        clear_on_success = no
        """,
    )
    monkeypatch.setenv("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS", "on")
    run = run_cli("--config", str(cfg), "--conn", "sqlite:////data/store.db", "config", "show", "--output", "json")
    assert (run.exit_code, run.stderr) == (0, ""), run.output
    doc = json.loads(run.stdout)
    assert doc == {
        "config_file": str(cfg),
        "airflow_home": str(clean_environment),
        "options": {
            "state_store": {
                "backend": {"value": BUILTIN_BACKEND, "source": "default"},
                "default_retention_days": {"value": 7, "source": str(cfg)},
                "dag_run_default_retention_days": {"value": 30, "source": "default"},
                "clear_on_success": {
                    "value": True,
                    "source": "environment variable AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS",
                },
                "state_cleanup_batch_size": {"value": 0, "source": "default"},
                "state_cleanup_older_than": {"value": "0", "source": "default"},
                "max_value_storage_bytes": {"value": 65535, "source": "default"},
                "connect_timeout": {"value": "10s", "source": "default"},
                "lock_timeout": {"value": "30s", "source": "default"},
                "command_timeout": {"value": "30s", "source": "default"},
                "api_url": {"value": "", "source": "--conn"},
                "api_token": {"value": "", "source": "default"},
                "api_username": {"value": "", "source": "default"},
                "api_password": {"value": "", "source": "default"},
                "api_ca_bundle": {"value": "", "source": "default"},
                "api_concurrency": {"value": 8, "source": "default"},
            },
            "workers": {"state_store_backend": {"value": "", "source": "default"}},
            "database": {
                "sql_alchemy_conn": {"value": "sqlite:////data/store.db", "source": "--conn"},
                "sql_alchemy_schema": {"value": "", "source": "default"},
                "sql_alchemy_connect_args": {"value": "", "source": "default"},
                "sql_alchemy_engine_args": {"value": "", "source": "default"},
            },
            "secrets": {
                "backend": {"value": "", "source": "default"},
                "backend_kwargs": {"value": "", "source": "default"},
            },
        },
    }


def test_config_show_json_without_a_file(clean_environment):
    run = run_cli("config", "show", "-o", "json")
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert doc["config_file"] is None
    assert doc["options"]["database"]["sql_alchemy_conn"] == {
        "value": f"sqlite:///{clean_environment}/airflow.db",
        "source": "default",
    }
    assert {(s, o) for s, opts in doc["options"].items() for o in opts} == ALL_OPTIONS


def test_config_show_plain_exact_output(monkeypatch, tmp_path, clean_environment):
    cfg = write_cfg(
        tmp_path / "airflow.cfg",
        """
        [state_store]
        default_retention_days = 0
        state_cleanup_batch_size = 1000

        [workers]
        state_store_backend = mypkg.workers.RefBackend
        """,
    )
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "1024")
    run = run_cli("--config", str(cfg), "config", "show", "--output", "plain")
    assert (run.exit_code, run.stderr) == (0, ""), run.output
    assert run.stdout == (
        f"state_store.backend\t{BUILTIN_BACKEND}\tdefault\n"
        f"state_store.default_retention_days\t0\t{cfg}\n"
        "state_store.dag_run_default_retention_days\t30\tdefault\n"
        "state_store.clear_on_success\tfalse\tdefault\n"
        f"state_store.state_cleanup_batch_size\t1000\t{cfg}\n"
        "state_store.state_cleanup_older_than\t0\tdefault\n"
        "state_store.max_value_storage_bytes\t1024\t"
        "environment variable AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES\n"
        "state_store.connect_timeout\t10s\tdefault\n"
        "state_store.lock_timeout\t30s\tdefault\n"
        "state_store.command_timeout\t30s\tdefault\n"
        "state_store.api_url\t\tdefault\n"
        "state_store.api_token\t\tdefault\n"
        "state_store.api_username\t\tdefault\n"
        "state_store.api_password\t\tdefault\n"
        "state_store.api_ca_bundle\t\tdefault\n"
        "state_store.api_concurrency\t8\tdefault\n"
        f"workers.state_store_backend\tmypkg.workers.RefBackend\t{cfg}\n"
        f"database.sql_alchemy_conn\tsqlite:///{clean_environment}/airflow.db\tdefault\n"
        "database.sql_alchemy_schema\t\tdefault\n"
        "database.sql_alchemy_connect_args\t\tdefault\n"
        "database.sql_alchemy_engine_args\t\tdefault\n"
        "secrets.backend\t\tdefault\n"
        "secrets.backend_kwargs\t\tdefault\n"
    )


def test_config_show_table_names_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "300")
    cfg = write_cfg(tmp_path / "airflow.cfg", "[state_store]\ndefault_retention_days = 11\n")
    run = run_cli("--config", str(cfg), "config", "show", "--output", "table")
    assert (run.exit_code, run.stderr) == (0, ""), run.output
    assert f"config file: {cfg}" in run.stdout
    row = next(line for line in run.stdout.splitlines() if "default_retention_days" in line)
    assert "11" in row and row.rstrip(" │").endswith("config file"), "named once, above the table"
    assert "config file: none found" in run_cli("config", "show", "-o", "table").stdout


SECRET_URL = "postgresql://user:s3cret@host/db"


@pytest.mark.parametrize("mode", ["json", "plain", "table"])
@pytest.mark.parametrize("where", ["file", "env", "--conn"])
def test_config_show_masks_the_password(monkeypatch, tmp_path, mode, where):
    monkeypatch.setenv("COLUMNS", "300")
    args: list[str] = []
    if where == "file":
        cfg = write_cfg(tmp_path / "airflow.cfg", f"[database]\nsql_alchemy_conn = {SECRET_URL}\n")
        args = ["--config", str(cfg)]
    elif where == "env":
        monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", SECRET_URL)
    else:
        args = ["--conn", SECRET_URL]
    run = run_cli(*args, "config", "show", "--output", mode)
    assert run.exit_code == 0, run.output
    assert "s3cret" not in run.stdout + run.stderr
    assert "postgresql://user:***@host/db" in run.stdout
    if mode == "json":
        assert json.loads(run.stdout)["options"]["database"]["sql_alchemy_conn"]["value"] == (
            "postgresql://user:***@host/db"
        )


def test_config_show_masks_a_percent_encoded_password(tmp_path):
    cfg = write_cfg(tmp_path / "airflow.cfg", "[database]\nsql_alchemy_conn = mysql://me:p%40ss%25word@db/airflow\n")
    for mode in ("json", "plain", "table"):
        run = run_cli("--config", str(cfg), "config", "show", "-o", mode)
        assert run.exit_code == 0, run.output
        for leak in ("p%40ss", "p@ss", "ss%25word", "ss%word"):
            assert leak not in run.stdout + run.stderr, (mode, leak)


@pytest.mark.parametrize("mode", ["json", "plain", "table"])
def test_config_show_with_an_unparsable_url_fails_without_leaking_the_password(monkeypatch, mode):
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://user:s3cret@host:notaport/db")
    run = run_cli("config", "show", "--output", mode)
    assert_one_line_usage_error(run)
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in run.stderr
    assert "s3cret" not in run.stdout + run.stderr


@pytest.mark.parametrize(
    "option, env",
    [
        ("default_retention_days", "AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS"),
        ("state_cleanup_batch_size", "AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE"),
        ("max_value_storage_bytes", "AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES"),
    ],
)
def test_numbers_beyond_what_a_database_integer_holds_are_config_errors(monkeypatch, option, env):
    monkeypatch.setenv(env, "2147483648")
    assert_one_line_usage_error(
        run_cli("config", "show"),
        f"environment variable {env}: invalid value '2147483648' for [state_store] {option}: "
        "expected a whole number from 0 to 2147483647",
    )
    monkeypatch.setenv(env, "2147483647")
    assert run_cli("config", "show").exit_code == 0


@pytest.mark.parametrize("mode", ["json", "plain", "table"])
def test_password_in_the_query_string_is_masked_too(mode):
    run = run_cli("--conn", "postgresql://u@h/db?password=s3cret&sslmode=require", "config", "show", "-o", mode)
    assert run.exit_code == 0, run.output
    assert "s3cret" not in run.stdout + run.stderr
    assert "sslmode=require" in run.stdout.replace("\n", "").replace(" ", "").replace("│", "") or mode == "table"


def test_default_retention_reaching_past_year_9999_is_refused_at_write(monkeypatch, cli):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "2147483647")
    result = cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", "k", "1")
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "statestore: error: [state_store] default_retention_days = 2147483647 reaches past the year 9999; "
        "lower it, or use 0 for keys that never expire\n"
    )


# A class named like Airflow's base, defined outside Airflow: the loader must go by Airflow's module, not the name.
LOOKALIKE = """
class BaseStoreBackend:
    pass


class LooksLikeAirflows(BaseStoreBackend):
    pass
"""


@pytest.mark.parametrize("command", [("get", *TASK, "k"), ("clean",), ("backend", "check", "-o", "json")])
@pytest.mark.parametrize("name", ["ss_test_backends.NotABackend", "ss_test_lookalike.LooksLikeAirflows"])
def test_a_class_neither_ours_nor_airflows_is_refused_naming_both_bases(
    monkeypatch, tmp_path, cli, backends, name, command
):
    """On SQLite without Airflow installed: the one-line refusal names both base classes, and loading
    a class that is not ours never imports Airflow."""
    (tmp_path / "plugins" / "ss_test_lookalike.py").write_text(LOOKALIKE, encoding="utf-8")
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", name)
    if command == ("clean",):
        monkeypatch.delenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND")
        monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", name)
    try:
        run = cli(*command)
    finally:
        sys.modules.pop("ss_test_lookalike", None)
    assert not any(m == "airflow" or m.startswith("airflow.") for m in sys.modules)
    if command[0] == "backend":
        assert run.exit_code == 3, run.output
        assert json.loads(run.stdout)["checks"][0]["detail"].endswith(f"{name} {NOT_A_BACKEND}")
        return
    section, option = ("state_store", "backend") if command == ("clean",) else ("workers", "state_store_backend")
    assert_one_line_usage_error(
        run, f"environment variable {env_var(section, option)}: [{section}] {option} = {name!r}: {name} {NOT_A_BACKEND}"
    )


def test_a_backends_option_of_a_dotted_section_reads_airflows_variable(tmp_path, monkeypatch):
    """A provider's section (``[common.io]``) has Airflow's variable with the dot as an underscore:
    AIRFLOW__COMMON_IO__..., over the file's value."""
    cfg = write_cfg(tmp_path / "airflow.cfg", "[common.io]\nstate_store_objectstorage_path = file:///from/file\n")
    assert load_settings(config_path=cfg).extra_option("common.io", "state_store_objectstorage_path") == (
        "file:///from/file",
        str(cfg),
    )
    monkeypatch.setenv("AIRFLOW__COMMON_IO__STATE_STORE_OBJECTSTORAGE_PATH", "file:///from/env")
    found = load_settings(config_path=cfg).extra_option("common.io", "state_store_objectstorage_path")
    assert found == ("file:///from/env", "environment variable AIRFLOW__COMMON_IO__STATE_STORE_OBJECTSTORAGE_PATH")
