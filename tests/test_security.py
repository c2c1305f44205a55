"""Security: every query parameterised, no password in any output, stored text inert on the terminal.

Runs on SQLite, PostgreSQL and MariaDB (``ALL_ENGINES``) where a store is involved.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from cli_running import run_cli, run_statestore_process
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine

ALL_ENGINES = True

# Quotes, comment and statement separators, LIKE and format wildcards, SQL keywords, backslashes and
# unicode (no trailing spaces: MySQL compares VARCHAR with PAD SPACE, as Airflow's schema does there).
HOSTILE = [
    "O'Brien\"s `key`",
    "'; DROP TABLE task_state_store; --",
    "x' OR '1'='1",
    "100% _done_ %s %(key)s {key} :key ?",
    "SELECT * FROM dag_run WHERE 1=1 /* */ UNION SELECT NULL",
    "back\\slash\\'\\\"",
    "ключ 鍵 🔑 é\u0301 \u00a0nbsp",
    "$1 $$ @@version \\N NULL",
]


def task_args(dag_id: str, run_id: str, task_id: str) -> tuple[str, ...]:
    return ("--dag-id", dag_id, "--run-id", run_id, "--task-id", task_id)


def test_hostile_keys_and_ids_are_stored_and_read_back_verbatim(cli, db_url):
    for i, text in enumerate(HOSTILE):
        scope = task_args(f"dag {text}", f"run {text}", f"task {text}")
        value = json.dumps({"text": text, "i": i})
        assert cli("set", *scope, text, value).exit_code == 0, text
        got = cli("get", *scope, text, "-o", "json")
        assert got.exit_code == 0, got.output
        doc = json.loads(got.stdout)
        assert (doc["dag_id"], doc["run_id"], doc["task_id"], doc["key"]) == (
            f"dag {text}",
            f"run {text}",
            f"task {text}",
            text,
        )
        assert doc["value"] == {"text": text, "i": i}
    listed = json.loads(cli("list", "-o", "json").stdout)
    assert sorted(entry["key"] for entry in listed) == sorted(HOSTILE)
    # Filters are parameters too: each finds exactly its own key.
    for text in HOSTILE:
        only = json.loads(cli("list", "--key", text, "-o", "json").stdout)
        assert [entry["key"] for entry in only] == [text]
        assert json.loads(cli("list", "--dag-id", f"dag {text}", "-o", "json").stdout)[0]["key"] == text
    # Every table is still there, with every row.
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(len(HOSTILE),)]
    assert sql(db_url, "SELECT count(*) FROM dag_run") == [(len(HOSTILE),)]
    for text in HOSTILE:
        assert cli("delete", *task_args(f"dag {text}", f"run {text}", f"task {text}"), text).exit_code == 0
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]


def test_hostile_asset_names_and_clear_and_clean(cli, db_url):
    # Asset names are latin1 text on MySQL/MariaDB, as in Airflow's schema: the ASCII part of the list.
    names = [t for t in HOSTILE if t.isascii()]
    for name in names:
        assert cli("set", "--asset-name", name, name, '"v"').exit_code == 0, name
        got = json.loads(cli("get", "--asset-name", name, name, "-o", "json").stdout)
        assert (got["name"], got["key"], got["value"]) == (name, name, "v")
    text = HOSTILE[1]
    scope = task_args(text, text, text)
    assert cli("set", *scope, "a", "1").exit_code == 0
    assert cli("set", *scope, "b", "1").exit_code == 0
    cleared = cli("clear", *scope, "--yes")
    assert "deleted 2 keys of " in cleared.stdout + cleared.stderr, cleared.output
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope(text, text, text), text, "1", expires_at=datetime.now(UTC) - timedelta(days=1))
    backend.engine.dispose()
    plan = json.loads(cli("clean", "--dry-run", "-o", "json").stdout)
    assert [(r["dag_id"], r["key"]) for r in plan["rows"]] == [(text, text)]
    assert json.loads(cli("clean", "--batch-size", "1", "-o", "json").stdout)["deleted"] == 1
    assert sql(db_url, "SELECT count(*) FROM asset_state_store") == [(len(names),)]


# -- passwords -------------------------------------------------------------------------------------------------
PASSWORD = "Pa55w0rd-S3cret"
FAILING_URLS = [
    f"postgresql+psycopg://airflow:{PASSWORD}@127.0.0.1:9/airflow",
    f"mysql+pymysql://airflow:{PASSWORD}@127.0.0.1:9/airflow",
    f"postgresql+psycopg://airflow@127.0.0.1:9/airflow?password={PASSWORD}&sslmode=disable",
    f"postgresql://airflow:{PASSWORD}@127.0.0.1:notaport/airflow",  # does not even parse
]
TASK = task_args("d", "r", "t")
EVERY_COMMAND = [
    ("db", "init"),
    ("db", "check"),
    ("db", "check", "-o", "json"),
    ("get", *TASK, "k"),
    ("get", *TASK, "k", "-o", "json"),
    ("set", *TASK, "k", "1"),
    ("delete", *TASK, "k"),
    ("clear", *TASK, "--yes"),
    ("list",),
    ("list", "-o", "table"),
    ("stats",),
    ("stats", "-o", "json"),
    ("clean",),
    ("clean", "--dry-run"),
    ("clean", "--dry-run", "-o", "json"),
    ("config", "show"),
    ("config", "show", "-o", "json"),
    ("config", "show", "-o", "table"),
]


@pytest.mark.slow
@pytest.mark.parametrize("url", FAILING_URLS, ids=["pg", "mysql", "pg-query", "unparsable"])
def test_no_command_prints_the_password(url, monkeypatch, tmp_path):
    """Every command, every way the URL can be given, with and without --debug: the password never shows."""
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(f"[database]\nsql_alchemy_conn = {url}\n", encoding="utf-8")
    seen = []
    for args in EVERY_COMMAND:
        seen.append(run_cli(*args, conn=url))
        seen.append(run_cli("--config", str(cfg), *args))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", url)
    seen += [run_cli(*args) for args in EVERY_COMMAND]
    for result in seen:
        assert PASSWORD not in result.stdout + result.stderr, result.output
        assert "Traceback" not in result.stdout + result.stderr, result.output
    for args in EVERY_COMMAND:  # the exception --debug lets through does not carry it either
        result = run_cli("--debug", *args, conn=url)
        assert PASSWORD not in result.stdout + result.stderr + str(result.exception), result.output
    # A process of its own too: anything written to the real stderr (logging, warnings) is caught.
    for args in (("list",), ("db", "check"), ("config", "show"), ("clean",)):
        result = run_statestore_process("--connect-timeout", "2s", "--conn", url, *args, timeout=60)
        assert PASSWORD not in result.stdout + result.stderr, result.output
        assert result.exit_code in (0, 2, 3), result.output


@pytest.mark.slow
def test_debug_tracebacks_do_not_print_the_password(monkeypatch):
    result = run_statestore_process("--debug", "--conn", FAILING_URLS[0], "list", timeout=60)
    assert result.exit_code != 0
    assert PASSWORD not in result.stdout + result.stderr


# -- stored text is inert on the terminal -----------------------------------------------------------------------
MARKUP = "[bold red]boom[/] [link=https://evil.example]x[/link] :warning:"
ESCAPES = "\x1b[2J\x1b]0;title\x07\x1b[31mred\x9b1m\u202egnp.exe\r\bz"


@pytest.mark.parametrize("mode", ["table", "json", "plain"])
def test_markup_and_escapes_in_keys_ids_and_values_are_inert(cli, db_url, monkeypatch, mode):
    monkeypatch.setenv("COLUMNS", "200")
    scope = task_args(f"dag {MARKUP}", f"run {ESCAPES}", "t")
    for key in (MARKUP, ESCAPES):
        assert cli("set", *scope, key, json.dumps(f"{MARKUP} {ESCAPES}")).exit_code == 0
    assert cli("set", "--asset-name", MARKUP, ESCAPES, json.dumps(ESCAPES)).exit_code == 0
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope(f"dag {MARKUP}", "r", "t"), "gone", "1", expires_at=datetime.now(UTC) - timedelta(days=1))
    backend.engine.dispose()
    outputs = {
        "list": cli("list", "-o", mode),
        "get": cli("get", *scope, ESCAPES, "-o", mode),
        "stats": cli("stats", "-o", mode),
        "dry-run": cli("clean", "--dry-run", "-o", mode),
        "missing": cli("get", *scope, f"missing {ESCAPES}", "-o", mode),
    }
    for name, result in outputs.items():
        everything = result.stdout + result.stderr
        for char in ("\x1b", "\x07", "\x9b", "\u202e", "\r", "\b"):
            assert char not in everything, (name, char, result.output)
        assert "boom" not in everything or "[bold red]boom[/]" in everything, (name, result.output)  # not styled
    if mode == "json":
        listed = json.loads(outputs["list"].stdout)
        assert sorted(e["key"] for e in listed) == sorted([MARKUP, ESCAPES, "gone", ESCAPES])
        assert json.loads(outputs["get"].stdout)["value"] == f"{MARKUP} {ESCAPES}"
        assert json.loads(outputs["dry-run"].stdout)["rows"][0]["dag_id"] == f"dag {MARKUP}"
    else:
        assert MARKUP in outputs["list"].stdout  # shown as the literal text it is
    assert outputs["missing"].exit_code == 1
    assert outputs["missing"].stderr.count("\n") == 1  # the error stays one line whatever the key holds
