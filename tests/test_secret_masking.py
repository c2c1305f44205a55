"""No password in any message: each path a message takes, with a password planted where a user would put it,
on every engine. The planted password appears nowhere in stdout or stderr, as written or URL-quoted, and the
message still says what was wrong.

Two passwords are planted: ``PASSWORD``, plain, and ``ODD``, which needs quoting in a URL (``@``, ``:``, ``/``)
and is planted both quoted and not. Every form of either holds ``Pl4nted``, so one substring check finds any
of them, or any part a mask that stopped too early left behind.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from cli_running import Result, run_cli
from servers import require_server
from sqlalchemy.engine import make_url
from stores import sql

from statestore_cli.masking import mask_text, register_secret

ALL_ENGINES = True

PASSWORD = "Pl4nted-S3cret"
ODD = "p@ss:w/rd-Pl4nted"
QUOTED = quote(ODD, safe="")  # p%40ss%3Aw%2Frd-Pl4nted
LEAKS = ("Pl4nted", "S3cret", "p@ss", "p%40ss")
TASK = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract")
ENV = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
FS = "statestore_cli.backends.filesystem.FilesystemBackend"


def assert_hidden(result: Result, code: int, *said: str) -> None:
    """``result`` exited ``code``, its stderr says each of ``said``, and no form of a planted password shows."""
    assert result.exit_code == code, result.output
    shown = result.stdout + result.stderr
    for leak in LEAKS:
        assert leak not in shown, shown
    for words in said:
        assert words in result.stderr, result.stderr


SERVERS = pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)


def with_password(url: str, password: str = PASSWORD, **changes: object) -> str:
    return make_url(url).set(password=password, **changes).render_as_string(hide_password=False)


# -- a URL that does not parse: the password in its userinfo or in its query --------------------------------------
SCHEMES = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg", "mariadb": "mysql+pymysql"}
UNPARSABLE = {
    "userinfo": "{scheme}://airflow:{pw}@db.internal:5432x/airflow",
    "userinfo-quoted": "{scheme}://airflow:{quoted}@db.internal:5432x/airflow",
    "userinfo-unquoted-odd": "{scheme}://airflow:{odd}@db.internal:5432x/airflow",
    "query-password": "{scheme}://db.internal:5432x/airflow?user=airflow&password={pw}",
    "query-password-quoted": "{scheme}://db.internal:5432x/airflow?user=airflow&PASSWORD={quoted}&sslmode=require",
    "query-sslpassword": "{scheme}://db.internal:5432x/airflow?sslpassword={pw}",
    "query-token": "{scheme}://db.internal:5432x/airflow?Token={pw}",
    "query-api-key": "{scheme}://db.internal:5432x/airflow?api_key={pw}",
    "query-access-key": "{scheme}://db.internal:5432x/airflow?aws_secret_access_key={pw}",
    "query-credentials": "{scheme}://db.internal:5432x/airflow?credentials={pw}",
    "query-in-a-quote": "{scheme}://db.internal:5432x/airflow?passwd={pw}'",
}


@pytest.mark.parametrize("engine", list(SCHEMES))
@pytest.mark.parametrize("shape", list(UNPARSABLE))
@pytest.mark.parametrize("given", ["--conn", "env"])
def test_a_url_that_does_not_parse(monkeypatch, engine, shape, given):
    conn = UNPARSABLE[shape].format(scheme=SCHEMES[engine], pw=PASSWORD, quoted=QUOTED, odd=ODD)
    if given == "env":
        monkeypatch.setenv(ENV, conn)
        result = run_cli("list")
        where = f"environment variable {ENV}"
    else:
        result = run_cli("list", conn=conn)
        where = "--conn"
    said = (
        f"{where}: invalid value ",
        f"{SCHEMES[engine]}://",
        "for [database] sql_alchemy_conn: expected a SQLAlchemy URL",
    )
    assert_hidden(result, 2, *said)
    assert "db.internal:5432x/airflow" in result.stderr  # which URL it was, all but its password


# -- what a server answers: a wrong password, an unreachable host, a missing database -----------------------------
def server_failures(engine: str) -> dict[str, str]:
    server = require_server(engine)
    return {
        # PostgreSQL here trusts every local user: a role that does not exist is its refusal
        "wrong-password": with_password(server, username="no_such_role" if engine == "postgresql" else "root"),
        "wrong-odd-password": with_password(server, ODD, username="no_such_role" if engine == "postgresql" else "root"),
        "unreachable": with_password(server, port=9),
        "missing-database": with_password(server, database="no_such_db_here"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["postgresql", "mariadb"])
@pytest.mark.parametrize("case", ["wrong-password", "wrong-odd-password", "unreachable", "missing-database"])
def test_what_a_server_answers(engine, case):
    conn = server_failures(engine)[case]
    result = run_cli("--connect-timeout", "5s", "list", conn=conn)
    assert_hidden(result, 3, "database error on ", ":***@127.0.0.1:")
    checked = run_cli("--connect-timeout", "5s", "db", "check", "-o", "json", conn=conn)
    assert_hidden(checked, 3)
    report = json.loads(checked.stdout)
    assert report["ok"] is False and report["error"].startswith("database error on ")


def test_a_missing_sqlite_store(tmp_path):
    conn = f"sqlite:///{tmp_path / 'missing.db'}?password={PASSWORD}&api_key={QUOTED}"
    result = run_cli("list", conn=conn)
    assert_hidden(result, 3, f"no state store at {tmp_path / 'missing.db'}: the file does not exist")
    assert "?password=<password>&api_key=<password>' db init" in result.stderr  # the db init to run, to fill in


# -- commands and secrets: a failing command's stderr, their values in later errors -------------------------------
@pytest.mark.parametrize(
    "stderr",
    [f"vault error: token {PASSWORD} expired", f"cannot reach postgresql://svc:{QUOTED}@vault/", f"{ODD} rejected"],
    ids=["free-text", "url", "odd"],
)
def test_a_failing_command_shows_no_stderr(monkeypatch, stderr):
    monkeypatch.setenv(f"{ENV}_CMD", f"sh -c \"echo '{stderr}' >&2; exit 5\"")
    result = run_cli("list")
    assert_hidden(
        result,
        3,
        f"environment variable {ENV}_CMD: the command failed (exit status 5); its output is not shown",
        "run the command yourself to see it",
    )


def boom_module(folder: Path, name: str, text: str) -> None:
    """A module ``name`` in ``folder`` whose import raises ``RuntimeError(text)``."""
    (folder / f"{name}.py").write_text(f"raise RuntimeError({text!r})\n", encoding="utf-8")


@pytest.fixture
def plugins(monkeypatch, tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in [n for n in sys.modules if n.startswith("ss_mask_")]:
        sys.modules.pop(name)


@SERVERS  # a SQLite URL has no password to plant
def test_a_command_value_is_masked_in_a_later_error(monkeypatch, plugins, db_url):
    """The password a ``_cmd`` gave is masked wherever it shows later, bare, with no URL around it."""
    monkeypatch.setenv(f"{ENV}_CMD", f"echo '{with_password(db_url, ODD, username='svc')}'")
    boom_module(plugins, "ss_mask_later", f"vault login for svc with {ODD} or {QUOTED} refused")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "ss_mask_later.Backend")
    result = run_cli("list")
    assert_hidden(result, 2, "cannot import module 'ss_mask_later' (RuntimeError: vault login for svc with *** or ***")


SECRETS_MODULE = """
class Secrets:
    def __init__(self, conn):
        self.conn = conn

    def get_config(self, key):
        return self.conn


class Sealed:
    def __init__(self, url, vault_token):
        raise PermissionError(f"vault at {url} refused token {vault_token}")
"""


@SERVERS  # a SQLite URL has no password to plant
def test_a_secret_value_is_masked_in_a_later_error(monkeypatch, plugins, db_url):
    (plugins / "ss_mask_secrets.py").write_text(SECRETS_MODULE, encoding="utf-8")
    monkeypatch.setenv(f"{ENV}_SECRET", "conn")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "ss_mask_secrets.Secrets")
    conn = with_password(db_url, PASSWORD, username="svc")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARGS", json.dumps({"conn": conn}))
    boom_module(plugins, "ss_mask_worker", f"the worker backend's token {PASSWORD} was revoked")
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "ss_mask_worker.Backend")
    result = run_cli("get", *TASK, "k")
    assert_hidden(result, 2, "cannot import module 'ss_mask_worker' (RuntimeError: the worker backend's token ***")


def test_a_secrets_backends_token_is_masked_in_its_own_error(monkeypatch, plugins):
    (plugins / "ss_mask_secrets.py").write_text(SECRETS_MODULE, encoding="utf-8")
    monkeypatch.setenv(f"{ENV}_SECRET", "conn")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "ss_mask_secrets.Sealed")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARGS", json.dumps({"url": "https://vault:8200"}))
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARG__VAULT_TOKEN", ODD)
    result = run_cli("list")
    said = "PermissionError: vault at https://vault:8200 refused token ***"
    assert_hidden(result, 3, "cannot create it with [secrets] backend_kwargs: ", said)


# -- a backend whose module raises at import ------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["AIRFLOW__STATE_STORE__BACKEND", "AIRFLOW__WORKERS__STATE_STORE_BACKEND"])
def test_a_backend_module_that_raises_at_import(monkeypatch, plugins, db_url, option):
    boom_module(plugins, "ss_mask_import", f"cannot reach postgresql://svc:{QUOTED}@vault:8200/v1?token={PASSWORD}")
    monkeypatch.setenv(option, "ss_mask_import.Backend")
    result = run_cli("get", *TASK, "k", conn=db_url)
    # a parameter's value runs to the end of the word: the ")" after it goes with it (over-masked, not leaked)
    said = (
        "cannot import module 'ss_mask_import' (RuntimeError: cannot reach postgresql://svc:***@vault:8200/v1?token=***"
    )
    assert_hidden(result, 2, said)


# -- a filesystem backend root with credentials -----------------------------------------------------------------------
@pytest.mark.parametrize("password", [PASSWORD, QUOTED], ids=["plain", "quoted"])
def test_a_filesystem_root_with_credentials_in_gets_not_found(monkeypatch, db_url, password):
    fsspec = pytest.importorskip("fsspec")
    host = f"host-{uuid.uuid4().hex[:8]}"
    root = f"memory://svc:{password}@{host}/prefix"
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", FS)
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", root)
    assert run_cli("set", *TASK, "k", '{"id": 1}', conn=db_url).exit_code == 0
    [(stored,)] = sql(db_url, "SELECT value FROM task_state_store")
    assert "Pl4nted" not in stored  # the reference is relative to the root
    memory = fsspec.filesystem("memory")
    memory.rm(f"/svc:{password}@{host}", recursive=True)  # the object is gone, its reference is not
    result = run_cli("get", *TASK, "k", conn=db_url)
    assert_hidden(result, 3, f"has no object task/etl/manual__1/extract/-1/k.json under memory://svc:***@{host}/prefix")


# -- what commands print: config show, db check -----------------------------------------------------------------------
@pytest.mark.parametrize("engine", list(SCHEMES))
def test_config_show(monkeypatch, engine):
    conn = f"{SCHEMES[engine]}://svc:{QUOTED}@db.internal:5432/airflow?api_key={PASSWORD}&sslmode=require"
    monkeypatch.setenv(ENV, conn)
    monkeypatch.setenv(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_ENGINE_ARGS_CMD", f"""echo '{{"connect_args": {{"x": "{ODD}"}}}}'"""
    )
    for mode in ("json", "plain", "table"):
        result = run_cli("config", "show", "-o", mode)
        assert_hidden(result, 0)
        assert "svc:***@db.internal:5432/airflow?api_key=***&sslmode=require" in result.stdout


@SERVERS  # a SQLite URL has no password to plant
def test_db_check(monkeypatch, db_url):
    """A store whose URL, from a command, carries a password: PostgreSQL's trusted user, MariaDB's refused one."""
    conn = with_password(db_url, PASSWORD, username=make_url(db_url).username or "svc")
    monkeypatch.setenv(f"{ENV}_CMD", f"echo '{conn}'")
    for mode in ("json", "plain"):
        result = run_cli("db", "check", "-o", mode)
        assert_hidden(result, 0 if make_url(db_url).get_backend_name() != "mysql" else 3)
        assert ":***@" in result.stdout


# -- the masking itself ----------------------------------------------------------------------------------------------
def test_a_registered_value_is_masked_quoted_or_not():
    register_secret(f"postgresql://svc:{QUOTED}@db/af?sslpassword={PASSWORD}&sslmode=require")
    assert mask_text(f"a {ODD} b {QUOTED} c {PASSWORD} d") == "a *** b *** c *** d"
    assert mask_text("sslmode=require; db/af") == "sslmode=require; db/af"  # the rest of the URL is not secret


def test_data_shaped_like_userinfo_is_not_a_password():
    assert mask_text("no key 'email:bob@example.com' for dag_id=etl") == "no key 'email:bob@example.com' for dag_id=etl"
    assert mask_text("user:pw@host/db", url=True) == "user:***@host/db"  # a URL value without its scheme


def test_a_value_holding_a_url_is_registered_whole():
    args = json.dumps({"connect_args": {"dsn": f"postgresql://svc:{PASSWORD}@db/af"}, "pool_size": 5})
    register_secret(args)
    assert mask_text(f"engine args {args} refused") == "engine args *** refused"


def test_a_short_value_is_masked_only_by_its_place():
    register_secret("ab")
    assert mask_text("tab stop, postgresql://u:ab@h/db") == "tab stop, postgresql://u:***@h/db"


def test_every_error_and_warning_line_is_masked_as_it_is_written(capsys):
    """The last line of defence: a message built without masking is masked where it is written."""
    from statestore_cli.cli.failure import report, warn

    register_secret(ODD)
    assert report(f"cannot reach sftp://svc:{PASSWORD}@files/x?auth={PASSWORD} as {ODD}", 3) == 3
    warn(f"login as svc with {QUOTED} failed")
    assert capsys.readouterr().err == (
        "statestore: error: cannot reach sftp://svc:***@files/x?auth=*** as ***\n"
        "statestore: warning: login as svc with *** failed\n"
    )
