"""What keeping the keys of unfinished task instances costs a clean, on an Airflow database.

    .venv/bin/python bench/clean_unfinished.py                      # 200,000 rows, 100,000 expired, SQLite
    .venv/bin/python bench/clean_unfinished.py --rows 1000000 --expired 500000

The store is ``generate.py``'s, made an Airflow 3.3 database: Airflow 3.3.2's own ``task_instance`` table
(its DDL and indexes, copied from tests/fixtures/airflow-3.3.2.sqlite) with one row for each task instance
the keys belong to, and ``alembic_version`` at 3.3.2's head. ``--unfinished`` percent of the task instances
(3 by default) are in a state a clean keeps their keys for (spread over running, up_for_retry, deferred,
queued, scheduled and none), the others succeeded or failed.

The floor is ``clean --include-unfinished``: today's selection, every expired key; against it, the clean
that keeps them (a NOT EXISTS on the unfinished task instances), batched and in one statement, and both
dry runs (``-o json`` to /dev/null). Each command runs on its own copy of the store (not timed), they take
turns, and the median of --repeat runs counts. Wall-clock seconds of the whole process.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import generate
import harness
from generate import Spec, statestore_executable, tool_env
from harness import table, turns
from measure import median, run_process

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "airflow-3.3.2.sqlite"
HEAD_332 = "d2f4e1b3c5a7"
UNFINISHED = ("running", "up_for_retry", "deferred", "queued", "scheduled", None)


def make_airflow(path: Path, unfinished_percent: int) -> tuple[int, int]:
    """Turn the generated store at ``path`` into an Airflow 3.3 database; (task instances, unfinished ones)."""
    ddl = sqlite3.connect(FIXTURE).execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'task_instance' AND sql IS NOT NULL ORDER BY type DESC"
    )
    statements = [row[0] for row in ddl]
    db = sqlite3.connect(path)
    with db:
        for statement in statements:
            db.execute(statement)
        db.execute("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        db.execute("INSERT INTO alembic_version VALUES (?)", (HEAD_332,))
        states = " ".join(f"WHEN {n} THEN {'NULL' if s is None else repr(s)}" for n, s in enumerate(UNFINISHED))
        # Every (dag, run, task, map index) the keys name gets a task instance; which ones are unfinished
        # is decided by a hash of the row, so a regenerated store has the same share.
        db.execute(
            "INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, state, try_number, pool, pool_slots) "
            "SELECT lower(hex(randomblob(16))), task_id, dag_id, run_id, map_index, "
            f"CASE WHEN abs(h) % 100 < {unfinished_percent} THEN CASE (abs(h) / 100) % {len(UNFINISHED)} {states} END "
            "WHEN abs(h) % 7 = 0 THEN 'failed' ELSE 'success' END, 1, 'default_pool', 1 "
            "FROM (SELECT DISTINCT dag_id, run_id, task_id, map_index, "
            "(length(dag_id) * 31 + length(run_id) * 17 + unicode(substr(task_id, -1)) * 7 + map_index * 13 "
            "+ unicode(substr(run_id, -9))) * 2654435761 % 1000003 AS h FROM task_state_store)"
        )
    count, unfinished = db.execute(
        "SELECT count(*), sum(state IS NULL OR state NOT IN ('success', 'failed')) FROM task_instance"
    ).fetchone()
    db.close()
    return int(count), int(unfinished)


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(
        __doc__, rows=200_000, expired=True, batch_size=10_000, repeat=3, workdir="statestore-bench-unfinished"
    )
    p.add_argument("--unfinished", type=int, default=3, help="percent of task instances not finished (3)")
    args = harness.parse(p, argv)
    spec = Spec(rows=args.rows, expired=args.expired)
    env = tool_env(args.workdir / "home")
    original = args.workdir / "airflow.db"
    if original.exists():
        original.unlink()
    counts = generate.generate_sqlite(original, spec, env)
    instances, unfinished = make_airflow(original, args.unfinished)
    print(
        f"store: {spec.rows:,} rows, {counts.expired:,} expired; {instances:,} task instances, "
        f"{unfinished:,} unfinished (SQLite, Airflow 3.3 layout)"
    )
    tool = [statestore_executable(), "--conn", ""]
    batch = ["--batch-size", str(args.batch_size)]
    commands = {
        "clean --include-unfinished (floor)": [*tool, "clean", *batch, "--include-unfinished", "-o", "json"],
        "clean (keeps unfinished)": [*tool, "clean", *batch, "-o", "json"],
        "clean --batch-size 0 --include-unfinished": [*tool, "clean", "--batch-size", "0", "--include-unfinished"],
        "clean --batch-size 0 (keeps unfinished)": [*tool, "clean", "--batch-size", "0"],
        "dry run --include-unfinished": [*tool, "clean", "--dry-run", "--include-unfinished", "-o", "json"],
        "dry run (keeps unfinished)": [*tool, "clean", "--dry-run", "-o", "json"],
    }
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for name in turns(list(commands), args.repeat):
        copy = args.workdir / "copy.db"
        shutil.copyfile(original, copy)
        cmd = list(commands[name])
        cmd[2] = f"sqlite:///{copy}"
        sample = run_process(cmd, env=env, scratch=args.workdir / "scratch")
        seconds[name].append(sample.seconds)
    names = list(commands)
    rows = []
    for i, name in enumerate(names):
        floor = median(seconds[names[i - i % 2]])
        ratio = median(seconds[name]) / floor
        rows.append([name, f"{median(seconds[name]):.3f}", "" if i % 2 == 0 else f"{ratio:.2f}x"])
    print(table(["command", "median s", "vs --include-unfinished"], rows, right={1, 2}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
