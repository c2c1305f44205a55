"""What only shows across engines: identical round trips, concurrency, time zones and lock timeouts.

The PostgreSQL and MariaDB tests need the servers of the development and CI machines (see servers.py);
without them they are skipped with a message that says how to start one, and fail under CI=true.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from cli_running import run_cli
from servers import require_server
from sqlalchemy import insert, make_url
from stores import isolated_database, sql

from statestore_cli import MetastoreBackend, TaskScope, TaskStateStoreAccessor
from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine
from statestore_cli.db.schema import task_state_store
from statestore_cli.ops.cleanup import CleanControl, delete_expired
from statestore_cli.ops.commands import db_init

SERVERS = ("postgresql", "mariadb")
NOW = datetime.now(UTC).replace(microsecond=123456)


def _cli(url: str, *args: str):
    result = run_cli(*args, conn=url)
    assert result.exit_code == 0, result.output
    return result


def _fill(url: str) -> None:
    """The same keys on every engine, through the tool, with a fixed write clock."""
    backend = MetastoreBackend(make_engine(url))
    keys = [
        "\u00fc" * 512,  # 512 characters, 1024 UTF-8 bytes
        "\U0001f600" * 512,  # outside the Basic Multilingual Plane: 2048 UTF-8 bytes
        "\u6f22\u5b57-key",
        "Key",
        "key",
    ]
    for index, key in enumerate(keys):
        scope = TaskScope("dag", "run", "task", map_index=index - 1)
        acc = TaskStateStoreAccessor(scope, backend, clock=lambda: NOW)
        acc.set(key, {"i": index, "text": key[:3]}, retention=timedelta(microseconds=index + 1))
    big = "x" * (65535 - 2)  # a JSON string exactly at max_value_storage_bytes
    TaskStateStoreAccessor(TaskScope("dag", "run", "big"), backend, clock=lambda: NOW).set("big", big)
    backend.engine.dispose()


def _dump(url: str) -> list[dict]:
    docs = json.loads(_cli(url, "list", "-o", "json").stdout)
    out = []
    for doc in docs:
        args = ["--dag-id", doc["dag_id"], "--run-id", doc["run_id"], "--task-id", doc["task_id"]]
        value = json.loads(
            _cli(url, "get", *args, "--map-index", str(doc["map_index"]), doc["key"], "-o", "json").stdout
        )
        out.append({**doc, "value": value["value"], "updated_at": None})  # updated_at is the server's write time
    return sorted(out, key=lambda d: (d["task_id"], d["map_index"], d["key"]))


@pytest.mark.slow  # on the database servers
def test_every_engine_reads_back_exactly_what_was_written(tmp_path):
    dumps = {}
    for name in ("sqlite", *SERVERS):
        with isolated_database(name, tmp_path) as url:
            db_init(Store.open(load_settings(conn_override=url), create_file=True))
            _fill(url)
            dumps[name] = _dump(url)
    assert dumps["postgresql"] == dumps["sqlite"]
    assert dumps["mariadb"] == dumps["sqlite"]
    rows = dumps["sqlite"]
    assert len(rows) == 6
    assert {r["key"] for r in rows} >= {"\u00fc" * 512, "\U0001f600" * 512, "Key", "key"}
    expiries = sorted(r["expires_at"] for r in rows if r["task_id"] == "task")
    assert expiries[0] == (NOW + timedelta(microseconds=1)).isoformat()  # microseconds survive every engine
    assert expiries[-1] == (NOW + timedelta(microseconds=5)).isoformat()
    assert next(r for r in rows if r["key"] == "big")["value"] == "x" * 65533


# -- concurrency -------------------------------------------------------------------------------------------
def _run_threads(count: int, work) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def runner(index: int) -> None:
        try:
            barrier.wait()
            work(index)
        except BaseException as exc:  # collected and reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_concurrent_writers_of_one_key_never_fail_and_the_last_write_wins(db_url):
    scope = TaskScope("dag", "run", "task")
    written: list[int] = []

    def writer(index: int) -> None:
        backend = MetastoreBackend(make_engine(db_url))
        for round_ in range(20):
            value = index * 100 + round_
            backend.set(scope, "shared", json.dumps(value))
            written.append(value)
        backend.engine.dispose()

    errors = _run_threads(8, writer)
    assert errors == []
    assert len(written) == 160
    [(count,)] = sql(db_url, "SELECT count(*) FROM task_state_store")
    assert count == 1
    backend = MetastoreBackend(make_engine(db_url))
    assert json.loads(backend.get(scope, "shared")) in written
    backend.set(scope, "shared", '"final"')
    assert backend.get(scope, "shared") == '"final"'
    assert sql(db_url, "SELECT count(*) FROM dag_run") == [(1,)]


def _bulk_expired(url: str, count: int) -> None:
    backend = MetastoreBackend(make_engine(url))
    backend.set(TaskScope("dag", "run", "task"), "seed", "1")
    [(run_id,)] = sql(url, "SELECT id FROM dag_run")
    rows = [
        {
            "dag_run_id": run_id,
            "task_id": "task",
            "map_index": i % 7,
            "key": f"k{i}",
            "dag_id": "dag",
            "run_id": "run",
            "value": "1",
            "updated_at": NOW - timedelta(days=2),
            "expires_at": NOW - timedelta(days=1, seconds=i),
        }
        for i in range(count)
    ]
    with backend.engine.begin() as conn:
        conn.execute(insert(task_state_store), rows)
    backend.engine.dispose()


@pytest.mark.parametrize("batch_size", [0, 50])
@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_two_cleans_at_once_share_the_work_exactly(db_url, batch_size):
    _bulk_expired(db_url, 2000)
    cutoff = datetime.now(UTC)
    reports = []

    def cleaner(_index: int) -> None:
        engine = make_engine(db_url, lock_timeout=60)
        reports.append(delete_expired(engine, cutoff, batch_size, CleanControl()))
        engine.dispose()

    errors = _run_threads(2, cleaner)
    assert errors == []
    assert sum(r.deleted for r in reports) == 2000
    assert sql(db_url, "SELECT {key} FROM task_state_store") == [("seed",)]


# -- time zones ---------------------------------------------------------------------------------------------
@pytest.mark.slow  # on the database servers
def test_postgresql_session_time_zone_does_not_change_what_expires(tmp_path):
    with isolated_database("postgresql", tmp_path) as url:
        db_init(Store.open(load_settings(conn_override=url), create_file=True))
        options = make_url(url).query["options"]
        tokyo = make_url(url).update_query_dict({"options": f"{options} -ctimezone=Asia/Tokyo"})
        tokyo_url = tokyo.render_as_string(hide_password=False)
        assert sql(tokyo_url, "SHOW timezone") == [("Asia/Tokyo",)]
        _check_time_zone_independence(tokyo_url, url)


@pytest.mark.slow  # on the database servers
def test_mariadb_server_time_zone_does_not_change_what_expires(tmp_path):
    """A server whose time zone is not UTC: every session starts in it. The session is started in it by the
    connection's init_command, not by SET GLOBAL, which would reach every other test's sessions too."""
    with isolated_database("mariadb", tmp_path) as url:
        db_init(Store.open(load_settings(conn_override=url), create_file=True))
        tokyo = make_url(url).update_query_dict({"init_command": "SET time_zone = '+09:00'"})
        tokyo_url = tokyo.render_as_string(hide_password=False)
        assert sql(tokyo_url, "SELECT @@session.time_zone") == [("+09:00",)]
        expired_at = _check_time_zone_independence(tokyo_url, tokyo_url)
        [(stored,)] = sql(url, "SELECT CAST(expires_at AS CHAR) FROM task_state_store WHERE {key} = 'expired'")
        assert stored.endswith(expired_at.astimezone(UTC).strftime("%H:%M:%S.%f"))  # naive UTC on disk


def _check_time_zone_independence(write_url: str, read_url: str) -> datetime:
    """Write a key that expired ten minutes ago and one that expires in ten (in UTC+5), then check that only
    the first is planned for deletion; returns when the first expired. The instants are taken now, not
    when the module was imported: a run can reach this test more than ten minutes after that."""
    expired_at = datetime.now(timezone(timedelta(hours=5))) - timedelta(minutes=10)
    backend = MetastoreBackend(make_engine(write_url))
    scope = TaskScope("d", "r", "t")
    backend.set(scope, "expired", "1", expires_at=expired_at)
    backend.set(scope, "alive", "1", expires_at=expired_at + timedelta(minutes=20))
    backend.engine.dispose()
    for url in (write_url, read_url):
        plan = json.loads(_cli(url, "clean", "--dry-run", "-o", "json").stdout)
        assert [(r["key"], r["expires_at"]) for r in plan["rows"]] == [
            ("expired", expired_at.astimezone(UTC).isoformat())
        ]
    return expired_at


def test_statement_timeout_that_sqlite_cannot_apply_is_said(cli, db_url):
    result = cli("clean", "--statement-timeout", "5s")
    assert result.exit_code == 0, result.output
    assert (
        result.stderr.splitlines()[0]
        == "statestore: note: SQLite has no statement timeout; --statement-timeout was not applied"
    )


@pytest.mark.parametrize(
    "engine, drivername",
    [
        ("postgresql", "postgresql"),
        ("postgresql", "postgresql+psycopg2"),
        ("mariadb", "mysql"),
        ("mariadb", "mysql+mysqldb"),
    ],
)
def test_url_forms_airflow_users_have_work(engine, drivername):
    url = make_url(require_server(engine)).set(drivername=drivername).render_as_string(hide_password=False)
    result = run_cli("db", "check", "-o", "json", conn=url)
    doc = json.loads(result.stdout)
    assert doc["engine"] in ("postgresql", "mysql", "mariadb")
    assert "password" not in result.stdout
