"""What keeping the keys of unfinished task instances costs a clean, on an Airflow database.

    .venv/bin/python bench/clean_unfinished.py                      # 200,000 rows, 100,000 expired, SQLite
    .venv/bin/python bench/clean_unfinished.py --rows 1000000 --expired 500000 --engines sqlite,postgresql,mariadb

The store is ``generate.py``'s, made an Airflow 3.3 database: Airflow 3.3.2's own ``task_instance`` table
(its DDL and indexes, taken from the Airflow 3.3.2 schemas in tests/fixtures/: the SQLite file, the
PostgreSQL and MariaDB dumps) with one row for each task instance the keys belong to, and ``alembic_version``
at 3.3.2's head. ``--unfinished`` percent of the task instances
(3 by default) are in a state a clean keeps their keys for (spread over running, up_for_retry, deferred,
queued, scheduled and none), the others succeeded or failed.

The floor is ``clean --include-unfinished``: today's selection, every expired key; against it, the clean
that keeps them (a NOT EXISTS on the unfinished task instances), batched and in one statement, and both
dry runs (``-o json`` to /dev/null). Each command runs on its own copy of the store (not timed; on a server
the task instances are added to each copy, and the server's statistics refreshed), they take turns, and the
median of --repeat runs counts. Wall-clock seconds of the whole process.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import generate
import harness
import stores
from generate import Spec, statestore_executable, tool_env
from harness import table, turns
from measure import median, run_process

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
FIXTURE = FIXTURES / "airflow-3.3.2.sqlite"
HEAD_332 = "d2f4e1b3c5a7"
UNFINISHED = ("running", "up_for_retry", "deferred", "queued", "scheduled", None)


def _states_case(unfinished_percent: int, hashed: str) -> str:
    """The state of the task instance whose hash is ``hashed``: ``unfinished_percent`` of them unfinished
    (spread over ``UNFINISHED``), a seventh of the rest failed, the others succeeded."""
    states = " ".join(f"WHEN {n} THEN {'NULL' if s is None else repr(s)}" for n, s in enumerate(UNFINISHED))
    return (
        f"CASE WHEN {hashed} % 100 < {unfinished_percent} THEN CASE ({hashed} / 100) % {len(UNFINISHED)} {states} END "
        f"WHEN {hashed} % 7 = 0 THEN 'failed' ELSE 'success' END"
    )


def _hash(length: str, code: str, last: str, mod: str) -> str:
    """A stable hash of a task instance's identity in SQL (each engine names length, code point and the
    last characters of a text apart: ``last`` formats column and count), so a regenerated store has the
    same share of unfinished task instances on every engine."""
    h = (
        f"(({length}(dag_id) * 31 + {length}(run_id) * 17 + {code}({last.format('task_id', 1)}) * 7 "
        f"+ map_index * 13 + {code}({last.format('run_id', 9)})) * 2654435761)"
    )
    return mod.format(h)


def _ti_ddl_sqlite() -> list[str]:
    ddl = sqlite3.connect(FIXTURE).execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'task_instance' AND sql IS NOT NULL ORDER BY type DESC"
    )
    return [row[0] for row in ddl]


def _ti_ddl_postgresql() -> list[str]:
    """``task_instance``'s table, unique keys and indexes from the pg_dump (no foreign keys: the tables they
    name are not in a generated store), for the schema on the search path."""
    dump = (FIXTURES / "airflow-3.3.2-postgres-schema.sql").read_text()
    table = re.search(r"CREATE TABLE public\.task_instance \(.*?\);", dump, re.S)
    key = r"ALTER TABLE ONLY public\.task_instance\s+ADD CONSTRAINT \w+ (?:UNIQUE|PRIMARY KEY) [^;]*;"
    keys = re.findall(key, dump)
    indexes = re.findall(r"CREATE INDEX \w+ ON public\.task_instance USING [^;]*;", dump)
    assert table is not None and keys and indexes
    return [statement.replace("public.", "") for statement in [table.group(0), *keys, *indexes]]


def _ti_ddl_mariadb() -> list[str]:
    """``task_instance``'s table from the MariaDB dump, its keys and indexes included, its foreign keys left out.
    The columns a key is paired with its task instance by take the generated store's character set (utf8mb4):
    in Airflow's own database both tables have the same one (utf8mb3), and a join across two character sets
    could use no index. ``state`` becomes ASCII (its values are), or the index on dag, task, run and state
    would be longer than InnoDB allows."""
    dump = (FIXTURES / "airflow-3.3.2-mysql-schema.sql").read_text()
    table = re.search(r"CREATE TABLE `task_instance` \(.*?\) ENGINE=[^;]*;", dump, re.S)
    assert table is not None
    lines = [_store_charset(line) for line in table.group(0).splitlines() if "FOREIGN KEY" not in line]
    body = "\n".join(lines)
    return [re.sub(r",\s*\)\s*ENGINE", "\n) ENGINE", body)]


def _store_charset(line: str) -> str:
    paired = any(line.strip().startswith(f"`{name}`") for name in ("dag_id", "run_id", "task_id"))
    if line.strip().startswith("`state` varchar(20)"):
        return line.replace("varchar(20)", "varchar(20) CHARACTER SET ascii")
    return line.replace("utf8mb3", "utf8mb4") if paired else line


TI_COLUMNS = "id, task_id, dag_id, run_id, map_index, state, try_number, pool, pool_slots"
SOURCES = "SELECT DISTINCT dag_id, run_id, task_id, map_index FROM task_state_store"


def make_airflow(path: Path, unfinished_percent: int) -> tuple[int, int]:
    """Turn the generated SQLite store at ``path`` into an Airflow 3.3 database; (task instances, unfinished)."""
    db = sqlite3.connect(path)
    with db:
        for statement in _ti_ddl_sqlite():
            db.execute(statement)
        db.execute("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        db.execute("INSERT INTO alembic_version VALUES (?)", (HEAD_332,))
        hashed = _hash("length", "unicode", "substr({}, -{})", "(abs({}) % 1000003)")
        db.execute(
            f"INSERT INTO task_instance ({TI_COLUMNS}) SELECT lower(hex(randomblob(16))), task_id, dag_id, run_id, "
            f"map_index, {_states_case(unfinished_percent, 'h')}, 1, 'default_pool', 1 "
            f"FROM (SELECT *, {hashed} AS h FROM ({SOURCES}))"
        )
    counted = db.execute(_COUNT).fetchone()
    db.close()
    return int(counted[0]), int(counted[1])


_COUNT = (
    "SELECT count(*), sum(CASE WHEN state IS NULL OR state NOT IN ('success', 'failed') THEN 1 ELSE 0 END) "
    "FROM task_instance"
)


def make_airflow_server(url: str, unfinished_percent: int) -> tuple[int, int]:
    """The same for the generated store at ``url`` on PostgreSQL or MariaDB, then fresh statistics."""
    postgresql = generate.is_postgresql(url)
    conn = generate.connect(url)
    try:
        with conn.cursor() as cur:
            for statement in _ti_ddl_postgresql() if postgresql else _ti_ddl_mariadb():
                cur.execute(statement)
            cur.execute("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
            cur.execute("INSERT INTO alembic_version VALUES (%s)", (HEAD_332,))
            if postgresql:
                hashed, new_id = _hash("length", "ascii", "right({}, {})", "(abs({} % 1000003))"), "gen_random_uuid()"
            else:
                hashed, new_id = _hash("char_length", "ord", "right({}, {})", "(abs({} % 1000003))"), "uuid()"
            cur.execute(
                f"INSERT INTO task_instance ({TI_COLUMNS}) SELECT {new_id}, task_id, dag_id, run_id, map_index, "
                f"{_states_case(unfinished_percent, 'h')}, 1, 'default_pool', 1 "
                f"FROM (SELECT s.*, {hashed} AS h FROM ({SOURCES}) AS s) AS hashed"
            )
            cur.execute(_COUNT)
            counted = cur.fetchone()
        conn.commit()
    finally:
        conn.close()
    analyze = generate.connect(url, autocommit=True)
    try:
        with analyze.cursor() as cur:
            cur.execute("VACUUM ANALYZE task_instance" if postgresql else "ANALYZE TABLE task_instance")
            if not postgresql:
                cur.fetchall()
    finally:
        analyze.close()
    return int(counted[0]), int(counted[1])


COMMANDS = {
    "clean --include-unfinished (floor)": ["clean", "--include-unfinished", "-o", "json"],
    "clean (keeps unfinished)": ["clean", "-o", "json"],
    "clean --batch-size 0 --include-unfinished": ["clean", "--batch-size", "0", "--include-unfinished"],
    "clean --batch-size 0 (keeps unfinished)": ["clean", "--batch-size", "0"],
    "dry run --include-unfinished": ["clean", "--dry-run", "--include-unfinished", "-o", "json"],
    "dry run (keeps unfinished)": ["clean", "--dry-run", "-o", "json"],
}


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(
        __doc__,
        rows=200_000,
        expired=True,
        batch_size=10_000,
        repeat=3,
        engines=True,
        workdir="statestore-bench-unfinished",
    )
    p.add_argument("--unfinished", type=int, default=3, help="percent of task instances not finished (3)")
    args = harness.parse(p, argv)
    if "--engines" not in (argv if argv is not None else sys.argv):
        args.engines = "sqlite"
    spec = Spec(rows=args.rows, expired=args.expired)
    env = tool_env(args.workdir / "home")
    results: list[list[str]] = []

    def measure(engine: str, store: stores.Stores) -> None:
        original = store.original(spec)
        counts = _airflow_counts(store, original, args.unfinished)
        print(
            f"{engine}: {spec.rows:,} rows, {spec.expired:,} expired; {counts[0]:,} task instances, "
            f"{counts[1]:,} unfinished (Airflow 3.3 layout)",
            flush=True,
        )
        seconds: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for name in turns(list(COMMANDS), args.repeat):
            with store.fresh(original) as url:
                if engine != "sqlite":
                    make_airflow_server(url, args.unfinished)
                cmd = [statestore_executable(), "--conn", url, *COMMANDS[name]]
                if "--batch-size" not in cmd and not name.startswith("dry run"):
                    cmd += ["--batch-size", str(args.batch_size)]
                seconds[name].append(run_process(cmd, env=env, scratch=args.workdir / "scratch").seconds)
        names = list(COMMANDS)
        for i, name in enumerate(names):
            ratio = median(seconds[name]) / median(seconds[names[i - i % 2]])
            results.append([engine, name, f"{median(seconds[name]):.3f}", "" if i % 2 == 0 else f"{ratio:.2f}x"])

    harness.each_engine(args, env, measure, regenerate=True)  # the SQLite original is made an Airflow database in place
    print(table(["engine", "command", "median s", "vs --include-unfinished"], results, right={2, 3}))
    return 0


def _airflow_counts(store: stores.Stores, original: stores.Original, unfinished: int) -> tuple[int, int]:
    """A SQLite original is made an Airflow database once (its copies are too); a server's copies are made
    one each, so here only the counts are learnt, on a copy."""
    if isinstance(store, stores.SqliteStores):
        return make_airflow(Path(original.name), unfinished)
    with store.fresh(original) as url:
        return make_airflow_server(url, unfinished)


if __name__ == "__main__":
    sys.exit(main())
