"""Behind PgBouncer, as Airflow's Helm chart runs it: nothing of ours outlives our transaction.

A real PgBouncer from the system's package (``pgbouncer_proxy.pgbouncer``) in front of the local PostgreSQL
server, in transaction mode (the chart's), in session mode, and no pooler at all ("direct"), each with
a throwaway database of its own (PgBouncer refuses the URL's ``options``, which select a schema elsewhere in
the suite), which the module's tests take in turn, emptied for each. The pool has few server connections,
which our commands share with other clients, and consecutive transactions of one client go to different
server connections; the commands run as real processes, as a cron job runs them, so what they leave behind
is what the pool keeps after they exit. What another client could inherit on a server connection: a
statement or lock timeout, a prepared statement, an advisory lock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from cli_running import Result, run_statestore_process, start_statestore
from pgbouncer_proxy import PgBouncer, pgbouncer, require_pgbouncer, throwaway_pg_database
from servers import require_server
from sqlalchemy import make_url

from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine
from statestore_cli.ops.cleanup import CleanControl, delete_expired
from statestore_cli.ops.commands import db_init

pytestmark = pytest.mark.slow  # PgBouncer in front of PostgreSQL, a real process for each command

MODES = ("transaction", "session", "direct")
# Server connections per database and user: in transaction mode fewer than the clients, so they take
# turns on them; in session mode a client keeps one while it is connected, so the pool must seat our
# clean (two connections with --exclusive) beside the other clients.
POOL_SIZE = {"transaction": 2, "session": 5}
OTHER_CLIENTS = 2
# What a client sees of its server connection: the timeouts we use, prepared statements, advisory locks.
SEEN = (
    "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
    " current_setting('idle_in_transaction_session_timeout'), (SELECT count(*) FROM pg_prepared_statements),"
    " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())"
)
ANOTHER_CLEAN = "statestore: error: another --exclusive clean is running on "


class Pool(NamedTuple):
    """A store reached through PgBouncer in ``mode`` (or directly), and what other clients use."""

    mode: str
    url: str  # what our commands are given
    server_url: str  # the same database on the server itself, for seeding and looking
    database: str
    bouncer: PgBouncer | None

    def client(self) -> Any:
        """Another client of the pool (of the server, direct), one that prepares nothing itself."""
        if self.bouncer is not None:
            return self.bouncer.connect(self.database)
        import psycopg

        return psycopg.connect(_conninfo(self.server_url), prepare_threshold=None)

    def server_connections(self) -> list[tuple]:
        """What a client sees on each server connection of the pool (direct: on a new session), each
        read inside a transaction of its own held until all are read, so each is a different one."""
        direct = self.bouncer is None
        held = [self.client()] if direct else self.bouncer.pinned(self.database, POOL_SIZE[self.mode])
        try:
            return [tuple(conn.execute(SEEN).fetchone()) for conn in held]
        finally:
            for conn in held:
                conn.rollback()
                conn.close()

    def advisory_locks(self) -> list[tuple]:
        """Advisory locks anyone holds in this database, seen from the server: (pid, state, xid, xmin)."""
        return self.on_server(
            "SELECT l.pid, a.state, a.backend_xid::text, a.backend_xmin::text FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )

    def settle(self, timeout: float = 30) -> None:
        """Wait until no server session of this database is inside a statement or transaction: a client
        killed just after sending its COMMIT leaves the server finishing that batch after the kill."""
        deadline = time.monotonic() + timeout
        busy = (
            "SELECT pid, state FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend' AND state <> 'idle'"
        )
        while self.on_server(busy) or self.advisory_locks():
            assert time.monotonic() < deadline, f"the server still works for a killed client: {self.on_server(busy)}"
            time.sleep(0.05)

    def on_server(self, statement: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(_conninfo(self.server_url), autocommit=True) as conn:
            cursor = conn.execute(statement)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


def _conninfo(url: str) -> str:
    parsed = make_url(url)
    return f"host={parsed.host} port={parsed.port or 5432} dbname={parsed.database} user={parsed.username}"


# A group per mode (``xdist_group``): each mode's tests share its pool on one worker, and the three modes run
# on three workers side by side, not one after another on a single worker.
@pytest.fixture(
    scope="module", params=[pytest.param(mode, marks=pytest.mark.xdist_group(f"pgbouncer-{mode}")) for mode in MODES]
)
def shared_pool(request: pytest.FixtureRequest) -> Iterator[Pool]:
    """One database and one PgBouncer per mode for the mode's tests (on one worker: ``xdist_group``), as a
    pool serves one client after another: each test starts from what the previous one left on its server
    connections, so anything of ours left there fails that test's ``baseline``."""
    admin = require_server("postgresql")
    if request.param != "direct":
        require_pgbouncer()
    with throwaway_pg_database() as database:
        server_url = make_url(admin).set(database=database).render_as_string(hide_password=False)
        db_init(Store.open(load_settings(conn_override=server_url), create_file=True))
        if request.param == "direct":
            yield Pool("direct", server_url, server_url, database, None)
            return
        with pgbouncer(admin, pool_mode=request.param, pool_size=POOL_SIZE[request.param]) as bouncer:
            pool = Pool(request.param, bouncer.url(database), server_url, database, bouncer)
            pool.server_connections()  # opens every server connection of the pool: turns alternate from the start
            yield pool


@pytest.fixture
def pool(shared_pool: Pool) -> Pool:
    """The mode's pool, its store emptied (new tables, ids from 1) on the server, not through the pool."""
    shared_pool.settle()
    tables = ", ".join(name for (name,) in shared_pool.on_server(STORE_TABLES))
    shared_pool.on_server(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    return shared_pool


STORE_TABLES = "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"


def seed(pool: Pool, expired: int, live: int = 0) -> None:
    """``expired`` task keys that expired a day ago and ``live`` ones that never expire, in one dag run."""
    with pool.client() as conn:
        conn.execute("INSERT INTO dag_run (id, dag_id, run_id) VALUES (1, 'etl', 'manual__1') ON CONFLICT DO NOTHING")
        conn.execute(
            "INSERT INTO task_state_store (dag_run_id, dag_id, run_id, task_id, map_index, key, value, updated_at,"
            " expires_at) SELECT 1, 'etl', 'manual__1', 't', -1, 'k' || g, '1', now(),"
            " CASE WHEN g <= %s THEN now() - interval '1 day' END FROM generate_series(1, %s) g",
            (expired, expired + live),
        )


def rows(pool: Pool) -> tuple[int, int]:
    """(expired, live) task keys in the store."""
    [(expired, live)] = pool.on_server(
        "SELECT count(*) FILTER (WHERE expires_at < now()), count(*) FILTER (WHERE expires_at IS NULL)"
        " FROM task_state_store"
    )
    return expired, live


def statestore(pool: Pool, *args: str) -> Result:
    return run_statestore_process("--conn", pool.url, *args)


class OtherClients:
    """Clients of the pool that run short transactions until stopped, each looking at what it is given:
    anything that differs from what a client saw before (a timeout, a prepared statement or an advisory
    lock of ours) or an error is kept."""

    def __init__(self, pool: Pool, baseline: tuple) -> None:
        self.pool, self.baseline = pool, baseline
        self.stop = threading.Event()
        self.seen: list[tuple] = []
        self.errors: list[str] = []
        self.transactions = 0
        self.threads = [threading.Thread(target=self._run) for _ in range(OTHER_CLIENTS)]

    def _run(self) -> None:
        try:
            with self.pool.client() as conn:
                while not self.stop.is_set():
                    with conn.transaction():
                        seen = tuple(conn.execute(SEEN).fetchone())
                    self.transactions += 1
                    if seen != self.baseline:
                        self.seen.append(seen)
                    time.sleep(0.002)
        except Exception as exc:  # whatever goes wrong for another client is what the test reports
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> OtherClients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def baseline(pool: Pool) -> tuple:
    seen = set(pool.server_connections())
    assert len(seen) == 1, f"the server connections differ before our command ran: {seen}"
    return seen.pop()


def assert_nothing_left(pool: Pool, before: tuple) -> None:
    assert pool.advisory_locks() == []
    assert pool.server_connections() == [before] * (POOL_SIZE.get(pool.mode, 1))


# -- a long batched clean among other clients ------------------------------------------------------------
def test_batched_clean_of_hundreds_of_batches_beside_other_clients(pool):
    """Hundreds of batches, each its own transaction and so each on whichever server connection the pool
    gives it; meanwhile other clients never see our timeouts, prepared statements or lock."""
    seed(pool, expired=30_000, live=5_000)
    before = baseline(pool)
    with OtherClients(pool, before) as others:
        result = statestore(
            pool, "clean", "--batch-size", "100", "--statement-timeout", "2s", "--exclusive", "-o", "json"
        )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["deleted"], report["batches"], report["complete"]) == (30_000, 300, True)
    assert rows(pool) == (0, 5_000)
    assert others.errors == []
    assert others.transactions > 0
    assert others.seen == []
    assert_nothing_left(pool, before)


def test_clean_with_a_backup_beside_other_clients_and_its_restore(pool, tmp_path):
    """--backup reads each batch's rows on a second session on the batch's snapshot (or, where it cannot have
    one, with the batch's own COPY): through the pool too, and nothing of it is left on a server connection;
    the import puts every key back."""
    seed(pool, expired=5_000, live=500)
    before = baseline(pool)
    backup = tmp_path / "clean.jsonl"
    with OtherClients(pool, before) as others:
        args = ("clean", "--batch-size", "100", "--exclusive", "--backup", str(backup), "-o", "json")
        result = statestore(pool, *args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["deleted"], report["batches"], report["backup"]["lines"]) == (5_000, 50, 5_000)
    assert rows(pool) == (0, 500)
    assert (others.errors, others.seen) == ([], [])
    restored = statestore(pool, "import", str(backup))
    assert restored.exit_code == 0, restored.output
    assert rows(pool) == (5_000, 500)
    assert_nothing_left(pool, before)


# -- what another client could inherit after each writing command -----------------------------------------
def _import_file(tmp_path: Path) -> str:
    path = tmp_path / "keys.jsonl"
    line = {"store": "task", "dag_id": "etl", "run_id": "manual__1", "task_id": "t", "map_index": -1}
    moment = datetime(2026, 11, 30, tzinfo=UTC).isoformat()
    with path.open("w", encoding="utf-8") as out:
        for i in range(12):  # one transaction each: the same statements a dozen times
            key = {"key": f"imported{i}", "value": i, "updated_at": moment, "expires_at": None}
            out.write(json.dumps({**line, **key}) + "\n")
    return str(path)


COMMANDS = {
    "set": lambda _tmp: ("set", "--dag-id", "etl", "--run-id", "manual__1", "--task-id", "t", "k1", '"new"'),
    "import": lambda tmp: ("import", "--batch-size", "1", _import_file(tmp)),
    "clear": lambda _tmp: ("clear", "--dag-id", "etl", "--batch-size", "5", "--yes"),
    "clean": lambda _tmp: ("clean", "--batch-size", "5", "--statement-timeout", "2s", "--exclusive"),
    "clean --backup": lambda tmp: ("clean", "--batch-size", "5", "--backup", str(tmp / "clean.jsonl")),
    "clean --backup, one statement": lambda tmp: ("clean", "--batch-size", "0", "--backup", str(tmp / "all.jsonl")),
    "clear --backup": lambda tmp: (
        "clear",
        "--dag-id",
        "etl",
        "--batch-size",
        "5",
        "--backup",
        str(tmp / "c.jsonl"),
        "--yes",
    ),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_nothing_of_ours_is_left_for_the_next_client(pool, command, tmp_path):
    seed(pool, expired=40, live=10)
    before = baseline(pool)
    result = statestore(pool, *COMMANDS[command](tmp_path))
    assert result.exit_code == 0, result.output
    assert_nothing_left(pool, before)


# -- --exclusive through the pool ------------------------------------------------------------------------
def test_exclusive_refuses_a_second_clean_while_the_first_runs_and_frees_the_next_at_once(pool):
    seed(pool, expired=50)
    before = baseline(pool)
    during: list[Result] = []
    holders: list[list[tuple]] = []

    def second_clean() -> None:  # the first clean holds its lock and has not deleted anything yet
        holders.append(pool.advisory_locks())
        during.append(statestore(pool, "clean", "--exclusive"))
        during.append(statestore(pool, "clean", "--exclusive"))  # on another server connection of the pool

    engine = make_engine(pool.url)
    try:
        first = delete_expired(engine, datetime.now(UTC), 10, CleanControl(exclusive=True, on_connected=second_clean))
    finally:
        engine.dispose()
    for refused in during:
        assert refused.exit_code == 3, refused.output
        assert refused.stderr.startswith(ANOTHER_CLEAN), refused.output
    assert first.deleted == 50
    # The lock was one idle transaction that held no snapshot and no transaction id: it keeps vacuum
    # from nothing the clean deleted.
    [[(_pid, state, xid, xmin)]] = holders
    assert (state, xid, xmin) == ("idle in transaction", None, None)
    seed(pool, expired=5)
    after = statestore(pool, "clean", "--exclusive", "-o", "json")
    assert after.exit_code == 0, after.output
    assert json.loads(after.stdout)["deleted"] == 5
    assert_nothing_left(pool, before)


def test_a_killed_exclusive_clean_leaves_no_lock_behind(pool):
    seed(pool, expired=100_000)
    before = baseline(pool)
    proc = start_statestore(
        "--conn",
        pool.url,
        "clean",
        "--exclusive",
        "--batch-size",
        "20",
        "-o",
        "json",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (pool.advisory_locks() and rows(pool)[0] < 100_000) and proc.poll() is None:
            assert time.monotonic() < deadline, "the clean neither took its lock nor deleted anything"
            time.sleep(0.05)
        assert proc.poll() is None, f"the clean ended before it was killed: {proc.communicate()}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    pool.settle()
    left = rows(pool)[0]
    assert 0 < left < 100_000
    nxt = statestore(pool, "clean", "--exclusive", "-o", "json")
    assert nxt.exit_code == 0, nxt.output
    assert json.loads(nxt.stdout)["deleted"] == left
    assert_nothing_left(pool, before)
