"""Generate a state store of N task keys, E of them expired, for the benchmark (see bench/README.md).

    python bench/generate.py --rows 1000000 --expired 500000 --sqlite /tmp/statestore-bench/store.db
    python bench/generate.py --rows 1000000 --expired 500000 --url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python bench/generate.py --url postgresql+psycopg://postgres@127.0.0.1:5432/test --drop ssbench_1a2b3c4d

The schema is created by the library's ``db_init`` (what ``statestore --conn URL db init`` runs); the rows
are then bulk loaded: SQLite with the sqlite3 module (executemany, big transactions, timestamps as the tool
writes them), PostgreSQL with COPY (psycopg 3), MariaDB with multi-row INSERTs (PyMySQL's executemany). With
--url the store goes into a fresh PostgreSQL schema (MariaDB: database) whose name is printed.

Rows are the same for a given --seed except the timestamps, which are relative to the moment of
generation: expired keys expired 1 minute to 90 days ago, live keys expire 1 to 2 years from now
(a cached store stays valid for a year), and a share of the live keys never expires.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from statestore_cli.backends.store import Store
from statestore_cli.db.schema import ASSET_STATE_COLUMNS, task_state_store, writer_columns

# -- layout: every run has the same 40 task instances (16 plain tasks, 4 mapped ones of width 6), 5 keys each
KEYS = ("job_id", "checkpoint", "cursor", "attempt", "external_url")
INSTANCES = [(f"task_{t:02d}", -1) for t in range(16)] + [(f"mapped_{t:02d}", m) for t in range(4) for m in range(6)]
ROWS_PER_RUN = len(INSTANCES) * len(KEYS)
RUNS_PER_DAG = 25
FIRST_RUN = datetime(2026, 1, 1)
_VALUES = (  # JSON as json.dumps writes it, one template per key
    '{{"job_id": "j-{0:08x}", "cluster": "emr-{1}"}}',
    '{{"offset": {0}, "partition": {1}}}',
    '"2026-11-{1:02d}T00:00:00Z"',
    "{1}",
    '"https://jobs.example.invalid/runs/{0}"',
)

DAY = 86400.0
RETENTION = timedelta(days=30)
EXPIRED_SPAN = 90 * DAY  # expired keys expired between 1 minute and 90 days ago
LIVE_MIN, LIVE_SPAN = timedelta(days=365), 365 * DAY  # live keys expire 1 to 2 years from now
UPDATED_SPAN = 90 * DAY

TASK_COLUMNS = tuple(column.name for column in task_state_store.columns)  # id, dag_run_id, ...
CHUNK = 100_000  # rows per transaction (SQLite) or per executemany (MariaDB)
SERVER_BACKENDS = ("postgresql", "mysql", "mariadb")
CLONED_TABLES = ("dag_run", "asset", "asset_active", "task_state_store", "asset_state_store")  # parents first


@dataclass(frozen=True)
class Spec:
    rows: int
    expired: int
    seed: int = 42
    never_fraction: float = 0.05  # share of the live keys that never expire
    assets: int = 10

    def __post_init__(self) -> None:
        if not 0 <= self.expired <= self.rows:
            raise ValueError(f"--expired must be between 0 and --rows ({self.rows}), got {self.expired}")

    @property
    def runs(self) -> int:
        return max(1, math.ceil(self.rows / ROWS_PER_RUN))


@dataclass
class Counts:
    expired: int = 0
    live: int = 0
    never: int = 0
    dag_runs: int = 0
    seconds: float = 0.0


# -- rows ----------------------------------------------------------------------------------------------
def utc_text(moment: datetime) -> str:
    """A naive UTC datetime as the tool stores it on SQLite: ``YYYY-MM-DD HH:MM:SS.ffffff``."""
    return moment.isoformat(" ", "microseconds")


def utcnow_naive() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def run_ids(run: int) -> tuple[str, str]:
    dag, nth = divmod(run, RUNS_PER_DAG)
    return f"dag_{dag:04d}", f"scheduled__{(FIRST_RUN + timedelta(days=nth)).isoformat()}+00:00"


def dag_runs(spec: Spec) -> Iterator[tuple[int, str, str]]:
    for run in range(spec.runs):
        yield (run + 1, *run_ids(run))


def expired_flags(spec: Spec, rng: random.Random) -> bytearray:
    flags = bytearray(spec.rows)
    for index in rng.sample(range(spec.rows), spec.expired):
        flags[index] = 1
    return flags


@contextmanager
def gc_paused() -> Iterator[None]:
    """Millions of short-lived tuples make the cyclic garbage collector run constantly; they have no cycles."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def task_rows(spec: Spec, now: datetime, counts: Counts) -> Iterator[tuple[Any, ...]]:
    """``TASK_COLUMNS`` tuples in id order; timestamps as text, None for a key that never expires."""
    rng = random.Random(spec.seed)
    flags = expired_flags(spec, rng)
    run_of_previous, dag_id, run_id = -1, "", ""
    for index in range(spec.rows):
        run, within = divmod(index, ROWS_PER_RUN)
        if run != run_of_previous:
            run_of_previous, (dag_id, run_id) = run, run_ids(run)
        instance, key = divmod(within, len(KEYS))
        task_id, map_index = INSTANCES[instance]
        updated_at, expires_at = _timestamps(flags[index], rng, now, spec.never_fraction, counts)
        value = _VALUES[key].format(index, index % 7 + 1)
        yield (index + 1, run + 1, task_id, map_index, KEYS[key], dag_id, run_id, value, updated_at, expires_at)


def _timestamps(
    expired: int, rng: random.Random, now: datetime, never_fraction: float, counts: Counts
) -> tuple[str, str | None]:
    if expired:
        counts.expired += 1
        expires = now - timedelta(seconds=60 + rng.random() * EXPIRED_SPAN)
        return utc_text(expires - RETENTION), utc_text(expires)
    updated = utc_text(now - timedelta(seconds=rng.random() * UPDATED_SPAN))
    if rng.random() < never_fraction:
        counts.never += 1
        return updated, None
    counts.live += 1
    return updated, utc_text(now + LIVE_MIN + timedelta(seconds=rng.random() * LIVE_SPAN))


def asset_rows(spec: Spec) -> list[tuple[int, str, str]]:
    return [(n + 1, f"asset_{n:02d}", f"s3://bench-bucket/asset_{n:02d}") for n in range(spec.assets)]


def asset_state_rows(spec: Spec, now: datetime) -> list[tuple[Any, ...]]:
    """``ASSET_STATE_COLUMNS`` tuples: one watermark per asset, written by the first run's first task."""
    dag_id, run_id = run_ids(0)
    written_by = writer_columns(kind="task", dag_id=dag_id, run_id=run_id, task_id="task_00", map_index=-1)
    rows = []
    for asset_id, _name, _uri in asset_rows(spec):
        value = f'"2026-11-{asset_id % 28 + 1:02d}T00:00:00Z"'
        row = {"asset_id": asset_id, "key": "watermark", "value": value, "updated_at": utc_text(now), **written_by}
        rows.append(tuple(row[name] for name in ASSET_STATE_COLUMNS))
    return rows


def insert_sql(table: str, columns: Iterable[str], placeholder: str, quote: str = '"') -> str:
    cols = list(columns)
    names = ", ".join(f"{quote}{c}{quote}" for c in cols)
    return f"INSERT INTO {table} ({names}) VALUES ({', '.join([placeholder] * len(cols))})"


def insert_assets(cursor: Any, spec: Spec, now: datetime, placeholder: str, quote: str = '"') -> None:
    assets = asset_rows(spec)
    cursor.executemany(insert_sql("asset", ("id", "name", "uri"), placeholder, quote), assets)
    cursor.executemany(insert_sql("asset_active", ("name", "uri"), placeholder, quote), [a[1:] for a in assets])
    cursor.executemany(
        insert_sql("asset_state_store", ASSET_STATE_COLUMNS, placeholder, quote), asset_state_rows(spec, now)
    )


# -- the statestore tool ----------------------------------------------------------------------------------
def statestore_executable() -> str:
    """The ``statestore`` measured: ``$STATESTORE_BENCH_EXECUTABLE`` if set (another build, or the test suite's
    launcher for its smoke runs), else the one next to the running interpreter (the venv's), else on PATH."""
    chosen = os.environ.get("STATESTORE_BENCH_EXECUTABLE")
    if chosen:
        return chosen
    beside = Path(sys.executable).with_name("statestore")
    found = str(beside) if beside.exists() else shutil.which("statestore")
    if not found:
        raise SystemExit("statestore is not installed next to this Python nor on PATH")
    return found


def tool_env(airflow_home: Path | None = None) -> dict[str, str]:
    """The environment for every process we start: no AIRFLOW_* of the developer's, a private AIRFLOW_HOME, and
    the package's bytecode compiled and read as an installed package's is (pip compiles it when it installs):
    under ``PYTHONDONTWRITEBYTECODE``, set on some machines, an editable checkout would compile every module of
    ours in every command measured (0.05-0.15 s each)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "PYTHONDONTWRITEBYTECODE"}
    if airflow_home is not None:
        airflow_home.mkdir(parents=True, exist_ok=True)
        env["AIRFLOW_HOME"] = str(airflow_home)
    _compile_package(env)
    return env


_COMPILED: set[tuple[str, str]] = set()


def _compile_package(env: dict[str, str]) -> None:
    """Bytecode for every module of the package the measured ``statestore`` imports, where that environment
    reads it (once per process; quick when it is there already)."""
    import statestore_cli

    folder = str(Path(statestore_cli.__file__).parent)
    where = env.get("PYTHONPYCACHEPREFIX", "")
    if (folder, where) in _COMPILED:
        return
    subprocess.run([sys.executable, "-m", "compileall", "-q", folder], env=env, check=True, stdout=subprocess.DEVNULL)
    _COMPILED.add((folder, where))


def db_init(url: str, env: dict[str, str]) -> None:
    """The store's tables, made by the library's own ``db_init`` (what ``statestore --conn URL db init`` runs) in
    this process: setup, not a measurement, so no CLI start is paid for each store and copy."""
    from statestore_cli import load_settings
    from statestore_cli.ops.commands import db_init as library_db_init

    library_db_init(Store.open(load_settings(conn_override=url, environ=env), create_file=True))


# -- SQLite ------------------------------------------------------------------------------------------------
def generate_sqlite(path: Path, spec: Spec, env: dict[str, str] | None = None) -> Counts:
    """A new SQLite store at ``path`` (replacing any file there)."""
    start = time.perf_counter()
    for stale in (path, path.with_name(path.name + "-journal"), path.with_name(path.name + "-wal")):
        stale.unlink(missing_ok=True)
    db_init(f"sqlite:///{path.resolve()}", env or tool_env())
    counts = Counts()
    now = utcnow_naive()
    con = sqlite3.connect(path, isolation_level=None)
    try:
        with gc_paused():
            _fill_sqlite(con, spec, now, counts)
    finally:
        con.close()
    counts.dag_runs = spec.runs
    counts.seconds = time.perf_counter() - start
    return counts


def _fill_sqlite(con: sqlite3.Connection, spec: Spec, now: datetime, counts: Counts) -> None:
    for pragma in ("journal_mode = OFF", "synchronous = OFF", "cache_size = -262144"):
        con.execute(f"PRAGMA {pragma}")
    con.execute("BEGIN")
    con.executemany(insert_sql("dag_run", ("id", "dag_id", "run_id"), "?"), dag_runs(spec))
    insert_assets(con, spec, now, "?")
    con.execute("COMMIT")
    indexes = _drop_indexes(con, "task_state_store")  # building them afterwards is several times faster
    rows = task_rows(spec, now, counts)
    for _ in range(0, spec.rows, CHUNK):
        con.execute("BEGIN")
        con.executemany(insert_sql("task_state_store", TASK_COLUMNS, "?"), islice(rows, CHUNK))
        con.execute("COMMIT")
    for create in indexes:
        con.execute(create)


def _drop_indexes(con: sqlite3.Connection, table: str) -> list[str]:
    """Drop the table's named indexes (not those of its constraints); the statements that recreate them."""
    found = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", (table,)
    ).fetchall()
    for name, _sql in found:
        con.execute(f'DROP INDEX "{name}"')
    return [sql for _name, sql in found]


# -- PostgreSQL and MariaDB ------------------------------------------------------------------------------
def backend_of(url: str) -> str:
    return make_url(url).get_backend_name()


def is_postgresql(url: str) -> bool:
    return backend_of(url) == "postgresql"


def store_url(admin_url: str, name: str) -> str:
    """The URL of the store in schema (PostgreSQL) or database (MariaDB) ``name`` of the server at ``admin_url``."""
    url = make_url(admin_url)
    if is_postgresql(admin_url):
        url = url.update_query_dict({"options": f"-csearch_path={name}"})
    else:
        url = url.set(database=name)
    return url.render_as_string(hide_password=False)


def driver_params(url: str) -> dict[str, Any]:
    """Keyword arguments of ``psycopg.connect`` or ``pymysql.connect`` for a SQLAlchemy URL."""
    parsed = make_url(url)
    params: dict[str, Any] = {"host": parsed.host or "localhost", "user": parsed.username}
    if parsed.port:
        params["port"] = parsed.port
    if parsed.password:
        params["password"] = parsed.password
    if is_postgresql(url):
        params["dbname"] = parsed.database
        if "options" in parsed.query:
            params["options"] = parsed.query["options"]
    else:
        params.update(database=parsed.database, charset="utf8mb4")
    return {k: v for k, v in params.items() if v is not None}


def connect(url: str, *, autocommit: bool = False, **extra: Any) -> Any:
    """A DB-API connection with the session in UTC; ``extra``: more keyword arguments of the driver's connect."""
    params = {**driver_params(url), **extra}
    if is_postgresql(url):
        import psycopg

        conn = psycopg.connect(**params, autocommit=autocommit)
        conn.execute("SET TIME ZONE 'UTC'")
        return conn
    import pymysql

    conn = pymysql.connect(**params, autocommit=autocommit)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    return conn


def new_store_name() -> str:
    return f"ssbench_{uuid.uuid4().hex[:10]}"


def create_store(admin_url: str, name: str, env: dict[str, str]) -> str:
    """Create the empty schema or database ``name`` and its tables (``db_init``); its URL."""
    kind = "SCHEMA" if is_postgresql(admin_url) else "DATABASE"
    conn = connect(admin_url, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE {kind} {name}")
    finally:
        conn.close()
    url = store_url(admin_url, name)
    db_init(url, env)
    return url


def drop_store(admin_url: str, name: str) -> None:
    statement = (
        f"DROP SCHEMA IF EXISTS {name} CASCADE" if is_postgresql(admin_url) else f"DROP DATABASE IF EXISTS {name}"
    )
    conn = connect(admin_url, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def generate_server(admin_url: str, spec: Spec, name: str, env: dict[str, str] | None = None) -> tuple[str, Counts]:
    """A new store in schema/database ``name`` on the server at ``admin_url``: its URL and what it holds."""
    start = time.perf_counter()
    url = create_store(admin_url, name, env or tool_env())
    counts = Counts()
    now = utcnow_naive()
    conn = connect(url)
    try:
        fill = _fill_postgresql if is_postgresql(url) else _fill_mariadb
        with gc_paused():
            fill(conn, spec, now, counts)
        conn.commit()
    finally:
        conn.close()
    analyze(url)
    counts.dag_runs = spec.runs
    counts.seconds = time.perf_counter() - start
    return url, counts


def _fill_postgresql(conn: Any, spec: Spec, now: datetime, counts: Counts) -> None:
    with conn.cursor() as cur:
        _copy(cur, "dag_run", ("id", "dag_id", "run_id"), dag_runs(spec))
        restore = pg_detach_indexes(cur, "task_state_store")
        _copy(cur, "task_state_store", TASK_COLUMNS, task_rows(spec, now, counts))
        for statement in restore:
            cur.execute(statement)
        insert_assets(cur, spec, now, "%s")
        fix_sequences(cur)


def pg_detach_indexes(cur: Any, table: str) -> list[str]:
    """Drop the table's constraints and indexes; the statements that restore them exactly.

    Loading a million rows into a bare table and building each index once afterwards is about
    twice as fast as maintaining four B-trees row by row.
    """
    cur.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
        "ORDER BY contype = 'f', conname",
        (table,),
    )
    constraints = cur.fetchall()
    for name, _definition in reversed(constraints):
        cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    cur.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = %s", (table,)
    )
    indexes = cur.fetchall()
    for name, _definition in indexes:
        cur.execute(f"DROP INDEX {name}")
    return [f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}" for name, definition in constraints] + [
        definition for _name, definition in indexes
    ]


def _copy(cur: Any, table: str, columns: Iterable[str], rows: Iterable[tuple[Any, ...]]) -> None:
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def fix_sequences(cur: Any) -> None:
    """After loading explicit ids on PostgreSQL: the id sequences continue after the largest id."""
    for table in ("dag_run", "asset", "task_state_store"):
        cur.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), max(id)) FROM {table} HAVING max(id) IS NOT NULL"
        )


def _fill_mariadb(conn: Any, spec: Spec, now: datetime, counts: Counts) -> None:
    # PyMySQL's executemany sends an INSERT ... VALUES as multi-row INSERTs of up to 1 MB each.
    with conn.cursor() as cur:
        cur.execute("SET SESSION foreign_key_checks = 0, unique_checks = 0")
        cur.executemany(insert_sql("dag_run", ("id", "dag_id", "run_id"), "%s", "`"), list(dag_runs(spec)))
        insert_assets(cur, spec, now, "%s", "`")
        rows = task_rows(spec, now, counts)
        sql = insert_sql("task_state_store", TASK_COLUMNS, "%s", "`")
        for _ in range(0, spec.rows, CHUNK):
            cur.executemany(sql, list(islice(rows, CHUNK)))


def clone_store(admin_url: str, template: str, name: str, env: dict[str, str] | None = None) -> str:
    """A fresh schema/database ``name`` holding a copy of the store ``template`` (same server); its URL."""
    url = create_store(admin_url, name, env or tool_env())
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            restore = pg_detach_indexes(cur, "task_state_store") if is_postgresql(url) else []
            if not is_postgresql(url):
                cur.execute("SET SESSION foreign_key_checks = 0, unique_checks = 0")
            for table in CLONED_TABLES:
                cur.execute(f"INSERT INTO {table} SELECT * FROM {template}.{table}")
            for statement in restore:
                cur.execute(statement)
            if is_postgresql(url):
                fix_sequences(cur)
        conn.commit()
    finally:
        conn.close()
    analyze(url)
    return url


def analyze(url: str) -> None:
    """Fresh planner statistics, as autovacuum or a DBA would have them on a live server."""
    conn = connect(url, autocommit=True)
    try:
        with conn.cursor() as cur:
            if is_postgresql(url):
                cur.execute(f"VACUUM ANALYZE {', '.join(CLONED_TABLES)}")
                _checkpoint(cur)
            else:
                cur.execute(f"ANALYZE TABLE {', '.join(CLONED_TABLES)}")
                cur.fetchall()
    finally:
        conn.close()


def _checkpoint(cur: Any) -> None:
    """Write the load's dirty pages now, not during a measurement (needs superuser or pg_checkpoint)."""
    import psycopg

    with suppress(psycopg.errors.InsufficientPrivilege):
        cur.execute("CHECKPOINT")


# -- command line ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="task keys in total (default 1000000)")
    parser.add_argument("--expired", type=int, default=None, help="of which expired (default half)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--never-fraction", type=float, default=0.05, help="share of live keys that never expire")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--sqlite", type=Path, metavar="PATH", help="write a SQLite store to this file (replaced)")
    target.add_argument("--url", metavar="URL", help="SQLAlchemy URL of a PostgreSQL or MariaDB server")
    parser.add_argument("--schema", help="with --url: name of the new schema/database (default ssbench_<random>)")
    parser.add_argument("--drop", metavar="NAME", help="with --url: drop this schema/database and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.url and backend_of(args.url) not in SERVER_BACKENDS:
        raise SystemExit(f"--url must be a PostgreSQL or MariaDB URL, got {backend_of(args.url)}")
    if args.drop:
        if not args.url:
            raise SystemExit("--drop needs --url")
        drop_store(args.url, args.drop)
        print(f"dropped {args.drop}", file=sys.stderr)
        return
    expired = args.rows // 2 if args.expired is None else args.expired
    spec = Spec(rows=args.rows, expired=expired, seed=args.seed, never_fraction=args.never_fraction)
    if args.sqlite:
        counts = generate_sqlite(args.sqlite, spec)
        where = str(args.sqlite)
    else:
        where, counts = generate_server(args.url, spec, args.schema or new_store_name())
    print(
        f"{spec.rows} task keys ({counts.expired} expired, {counts.live} live, {counts.never} never expire) "
        f"in {counts.dag_runs} dag runs, {spec.assets} asset keys; generated in {counts.seconds:.1f} s",
        file=sys.stderr,
    )
    print(where)


if __name__ == "__main__":
    main()
