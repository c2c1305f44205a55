"""A store that is not there: the message says where it looked and why there, and a `db init` that
repeats the --conn / --config given (a password left out); `db init` on SQLite says what it created."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_running import run_cli
from sqlalchemy.engine import make_url
from stores import isolated_database


def _error(result) -> str:
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_the_default_path_names_airflow_home_and_the_config_search(clean_environment: Path):
    home = clean_environment
    line = _error(run_cli("clean"))
    assert line == (
        f"statestore: error: no state store at {home}/airflow.db: the file does not exist; the URL is the default, "
        "$AIRFLOW_HOME/airflow.db ($AIRFLOW_HOME), as AIRFLOW__DATABASE__SQL_ALCHEMY_CONN is not set and no config "
        f"file was found (no --config; $AIRFLOW_CONFIG not set; {home}/airflow.cfg ($AIRFLOW_HOME/airflow.cfg) does "
        "not exist); if the store is elsewhere, point AIRFLOW_HOME, --config or --conn at it; to create it here, "
        "run `statestore db init`"
    )
    assert not (home / "airflow.db").exists()


def test_a_path_from_the_config_file_names_it_and_the_hint_repeats_config(tmp_path: Path):
    cfg = tmp_path / "etc airflow.cfg"
    store = tmp_path / "prod" / "airflow.db"
    cfg.write_text(f"[database]\nsql_alchemy_conn = sqlite:///{store}\n")
    line = _error(run_cli("--config", str(cfg), "list", "--dag-id", "etl_orders_daily"))
    assert line == (
        f"statestore: error: no state store at {store}: the file does not exist; the URL comes from [database] "
        f"sql_alchemy_conn in {cfg} (--config); if the store is elsewhere, fix it there or give --conn; to create "
        f"it here, run `statestore --config '{cfg}' db init`"
    )


def test_a_path_from_the_environment_names_the_variable(tmp_path: Path, monkeypatch):
    store = tmp_path / "airflow.db"
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{store}")
    line = _error(run_cli("get", "--dag-id", "etl_orders_daily", "--run-id", "manual__1", "--task-id", "t", "k"))
    assert line.endswith(
        "; the URL comes from environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN; fix or unset "
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN; to create it here, run `statestore db init`"
    )


@pytest.mark.slow  # on the database servers
def test_postgresql_without_tables_repeats_conn_with_a_password_placeholder(tmp_path: Path):
    with isolated_database("postgresql", tmp_path) as url:
        typed = make_url(url).set(password="s3cr3t-pw").render_as_string(hide_password=False)  # trust: ignored
        line = _error(run_cli("list", conn=typed))
        assert "s3cr3t-pw" not in line
        shown = make_url(typed).render_as_string(hide_password=True)
        placeholder = typed.replace(":s3cr3t-pw@", ":<password>@")
        assert line == (
            f"statestore: error: the state store tables are missing in {shown}; the URL is the one --conn gave; "
            f"if the store is elsewhere, fix --conn; to create them here, run `statestore --conn '{placeholder}' "
            "db init`"
        )


def test_db_check_of_an_empty_file_names_the_init_with_its_conn(tmp_path: Path):
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    result = run_cli("db", "check", "-o", "json", conn=f"sqlite:///{empty}")
    assert result.exit_code == 3
    assert result.stderr.endswith(f"to create them here, run `statestore --conn sqlite:///{empty} db init`\n")


def test_db_init_on_sqlite_says_where_it_created_the_file(clean_environment: Path):
    result = run_cli("db", "init", "-o", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        f"statestore: created the SQLite file {clean_environment}/airflow.db (the URL is the default, "
        "$AIRFLOW_HOME/airflow.db ($AIRFLOW_HOME), as AIRFLOW__DATABASE__SQL_ALCHEMY_CONN is not set"
    )
    again = run_cli("db", "init", "-o", "json")  # the file is there now: nothing to say
    assert again.exit_code == 0 and again.stderr == ""
