"""Benchmark ``statestore orphans -o json`` against a bare script that finds the same orphans (see bench/README.md).

    .venv/bin/python bench/orphans.py                     # 100,000 referenced objects + 1,000 orphans, SQLite
    .venv/bin/python bench/orphans.py --quick

The store is SQLite; the worker-side backend is the shipped filesystem backend on a local folder. Every
task row holds a reference to one file under the root, and --orphans more files have no row. The floor
is a bare ``python -c`` with only the standard library that walks the root, reads every reference from
the database (the same ``LIKE`` filter and JSON parse) and prints the orphans' count: the least any tool
does for the same answer. ``orphans`` also stats each orphan for its age and starts typer and
SQLAlchemy, so it is compared with the floor plus our start-up (``db check -o json``). Times are the
median of --repeat runs, the three commands taking turns.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import generate
import harness
from harness import turns, verdict
from measure import RSS_METHOD, median, run_process

from statestore_cli.backends.base import REF_MARKER
from statestore_cli.backends.fs_paths import value_path
from statestore_cli.model.scopes import TaskScope

FS = "statestore_cli.backends.filesystem.FilesystemBackend"
FLOOR, STARTUP, OURS = "bare script (floor)", "start-up (db check)", "orphans -o json"
TIME_TARGET = 1.5  # orphans within 1.5x of the floor plus our start-up
QUICK = {"referenced": 2000, "orphans": 20, "repeat": 1}
FLOOR_SCRIPT = """
import json, os, sqlite3, sys
root, db = sys.argv[1], sys.argv[2]
files = set()
for folder, _, names in os.walk(root):
    for name in names:
        files.add(os.path.relpath(os.path.join(folder, name), root))
refs = set()
con = sqlite3.connect(db)
for table in ("task_state_store", "asset_state_store"):
    for (value,) in con.execute(f"SELECT value FROM {table} WHERE value LIKE '%__airflow_state_ref__%'"):
        doc = json.loads(value)
        refs.add(doc["__airflow_state_ref__"])
print(len(files - refs))
"""


def build(workdir: Path, referenced: int, orphans: int, env: dict[str, str]) -> tuple[Path, Path]:
    """A SQLite store with ``referenced`` task rows, each pointing to its file, and ``orphans`` extra files."""
    db, root = workdir / "store.db", workdir / "objects"
    if db.exists() and root.exists() and (workdir / f"built-{referenced}-{orphans}").exists():
        return db, root
    for stale in workdir.glob("built-*"):
        stale.unlink()
    db.unlink(missing_ok=True)
    generate.db_init(f"sqlite:///{db}", env)
    con = sqlite3.connect(db)
    runs = max(1, referenced // 100)
    con.executemany(
        "INSERT INTO dag_run (id, dag_id, run_id) VALUES (?, ?, ?)",
        [(n + 1, "etl_orders_daily", f"scheduled__{n:06d}") for n in range(runs)],
    )
    rows = []
    for n in range(referenced + orphans):
        scope = TaskScope("etl_orders_daily", f"scheduled__{n % runs:06d}", "submit_spark_job", n // runs)
        ref = value_path(scope, "job_id")
        path = root / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"job": "spark-application-1764460800123_0042"}')
        if n < referenced:
            rows.append(
                (
                    n % runs + 1,
                    scope.task_id,
                    scope.map_index,
                    "job_id",
                    scope.dag_id,
                    scope.run_id,
                    json.dumps({REF_MARKER: ref}),
                    "2026-11-30 00:00:00.000000",
                    None,
                )
            )
    con.executemany(
        "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at,"
        " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    con.commit()
    con.close()
    (workdir / f"built-{referenced}-{orphans}").touch()
    return db, root


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(__doc__, repeat=5, workdir="statestore-bench/orphans", quick=QUICK)
    p.add_argument("--referenced", type=int, default=100_000, help="objects a row points to (100000)")
    p.add_argument("--orphans", type=int, default=1_000, help="objects no row points to (1000)")
    args = harness.parse(p, argv)
    workdir = args.workdir
    env = generate.tool_env(workdir / "airflow-home")
    print(f"building {args.referenced:,} referenced + {args.orphans:,} orphaned objects", file=sys.stderr)
    db, root = build(workdir, args.referenced, args.orphans, env)
    url = f"sqlite:///{db}"
    ours = generate.statestore_executable()
    tool_env = {**env, "AIRFLOW__WORKERS__STATE_STORE_BACKEND": FS, "AIRFLOW__STATE_STORE_FILESYSTEM__ROOT": str(root)}
    commands = {
        FLOOR: [sys.executable, "-c", FLOOR_SCRIPT, str(root), str(db)],
        STARTUP: [ours, "--conn", url, "db", "check", "-o", "json"],
        OURS: [ours, "--conn", url, "orphans", "-o", "json"],
    }
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    rss: list[int] = []
    run_process(commands[OURS], env=tool_env, scratch=workdir / "run")  # warm the caches once, not measured
    for name in turns(list(commands), args.repeat):
        sample = run_process(commands[name], env=tool_env, scratch=workdir / "run")
        seconds[name].append(sample.seconds)
        if name == OURS:
            rss.append(sample.peak_rss_kb)
            found = json.loads(sample.stdout)["count"]
        elif name == FLOOR:
            found = int(sample.stdout.split()[-1])
        else:
            continue
        if found != args.orphans:
            raise SystemExit(f"{name} found {found} orphans, expected {args.orphans}")
    floor, startup, total = median(seconds[FLOOR]), median(seconds[STARTUP]), median(seconds[OURS])
    ratio = total / (floor + startup)
    print(f"objects: {args.referenced + args.orphans:,} ({args.orphans:,} orphans), repeat {args.repeat}")
    print(f"{FLOOR}: {floor:.3f} s   {STARTUP}: {startup:.3f} s   {OURS}: {total:.3f} s")
    print(
        f"orphans is {total / floor:.2f}x the floor, {ratio:.2f}x floor + start-up "
        f"(target <= {TIME_TARGET}x): {verdict(ratio <= TIME_TARGET)}"
    )
    print(f"peak RSS of orphans: {max(rss) / 1024:.1f} MB ({RSS_METHOD})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
