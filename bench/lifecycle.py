"""Benchmark ``statestore clear --dag-id`` (a whole dag) and ``statestore assets sweep`` on SQLite
against the floor of one raw ``DELETE`` in the ``sqlite3`` shell (see bench/README.md).

    .venv/bin/python bench/lifecycle.py                 # 500,000 task keys in the dag cleared, 200,000 asset keys swept
    .venv/bin/python bench/lifecycle.py --quick

The store holds two dags of the same size (one is cleared, the other must stay) and assets half of
which are inactive. Every measured command runs on a fresh copy of the store; times are wall-clock
seconds of the whole process, the median of --repeat runs. Our process also starts Python, typer and
SQLAlchemy, so each command is compared with the floor alone and with the floor plus our start-up
(``statestore db check -o json``).
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import generate
import harness
from harness import table, verdict
from measure import median, run_process

TIME_TARGET = 2.0  # within 2x of the floor plus our start-up
QUICK = {"task_keys": 10_000, "asset_keys": 4_000, "repeat": 1, "batch_size": 1_000}
DAG = "etl_orders_daily"
OTHER = "ml_feature_store_refresh"
STAMP = "2026-11-29 10:15:30.000000"
FLOOR_CLEAR = f"DELETE FROM task_state_store WHERE dag_id = '{DAG}'"
FLOOR_SWEEP = (
    "DELETE FROM asset_state_store WHERE NOT EXISTS (SELECT 1 FROM asset JOIN asset_active "
    "ON asset_active.name = asset.name AND asset_active.uri = asset.uri WHERE asset.id = asset_state_store.asset_id)"
)


def build(path: Path, task_keys: int, asset_keys: int) -> None:
    """``task_keys`` keys in each of two dags (runs of 200 keys), ``asset_keys`` keys over 100 assets, half inactive."""
    generate.db_init(f"sqlite:///{path}", generate.tool_env())
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN")
    runs = max(1, task_keys // 200)
    for number, dag in enumerate((DAG, OTHER)):
        for run in range(runs):
            run_pk = number * runs + run + 1
            run_id = f"scheduled__2026-{run:06d}"
            con.execute("INSERT INTO dag_run (id, dag_id, run_id) VALUES (?, ?, ?)", (run_pk, dag, run_id))
            con.executemany(
                "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, "
                "updated_at, expires_at) VALUES (?, ?, -1, ?, ?, ?, '1', ?, NULL)",
                ((run_pk, f"task_{k // 5:02d}", f"key_{k % 5}", dag, run_id, STAMP) for k in range(200)),
            )
    per_asset = max(1, asset_keys // 100)
    for asset_id in range(1, 101):
        name = f"s3://warehouse/asset_{asset_id:03d}"
        con.execute("INSERT INTO asset (id, name, uri) VALUES (?, ?, ?)", (asset_id, name, name))
        if asset_id % 2:
            con.execute("INSERT INTO asset_active (name, uri) VALUES (?, ?)", (name, name))
        con.executemany(
            "INSERT INTO asset_state_store (asset_id, key, value, updated_at) VALUES (?, ?, '1', ?)",
            ((asset_id, f"partition_{k:07d}", STAMP) for k in range(per_asset)),
        )
    con.execute("COMMIT")
    con.close()


def main(argv: list[str] | None = None) -> None:
    p = harness.arguments(__doc__, repeat=3, batch_size=10_000, workdir=None, quick=QUICK)
    p.add_argument("--task-keys", type=int, default=500_000, help="keys of the cleared dag (the other has as many)")
    p.add_argument("--asset-keys", type=int, default=200_000, help="asset keys, half of them of inactive assets")
    args = harness.parse(p, argv)
    shell = shutil.which("sqlite3")
    if shell is None:
        raise SystemExit("the sqlite3 shell is needed for the floor")
    work = Path(tempfile.mkdtemp(prefix="statestore-lifecycle-"))
    template, store = work / "template.db", work / "store.db"
    env = generate.tool_env(work / "airflow-home")
    print(f"building {args.task_keys:,} x 2 task keys, {args.asset_keys:,} asset keys ...", file=sys.stderr)
    build(template, args.task_keys, args.asset_keys)
    ours = generate.statestore_executable()
    url = f"sqlite:///{store}"
    batch = str(args.batch_size)
    commands = {
        "start-up (db check)": [ours, "--conn", url, "db", "check", "-o", "json"],
        "clear floor": [shell, str(store), FLOOR_CLEAR],
        "clear --dag-id, one statement": [ours, "--conn", url, "clear", "--dag-id", DAG, "--yes", "--batch-size", "0"],
        f"clear --dag-id, batches of {batch}": [
            ours,
            "--conn",
            url,
            "clear",
            "--dag-id",
            DAG,
            "--yes",
            "--batch-size",
            batch,
        ],
        "sweep floor": [shell, str(store), FLOOR_SWEEP],
        "assets sweep, one statement": [ours, "--conn", url, "assets", "sweep", "--yes", "--batch-size", "0"],
        f"assets sweep, batches of {batch}": [ours, "--conn", url, "assets", "sweep", "--yes", "--batch-size", batch],
    }
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, argv_ in commands.items():
            shutil.copyfile(template, store)
            seconds[name].append(run_process(argv_, env=env, scratch=work / "scratch").seconds)
            left = (
                sqlite3.connect(store)
                .execute(
                    f"SELECT (SELECT count(*) FROM task_state_store WHERE dag_id = '{DAG}'), "
                    "(SELECT count(*) FROM asset_state_store)"
                )
                .fetchone()
            )
            if ("clear" in name and left[0] != 0) or ("sweep" in name and left[1] != args.asset_keys // 2):
                raise SystemExit(f"{name}: left {left} rows")
    startup = median(seconds["start-up (db check)"])
    swept = args.asset_keys // 2
    print(f"SQLite, {args.task_keys:,} task keys cleared of {2 * args.task_keys:,}; {swept:,} asset keys swept")
    print(table(["command", "median s"], [[name, f"{median(values):.3f}"] for name, values in seconds.items()], {1}))
    for name in commands:
        if name.startswith(("clear --", "assets sweep")):
            floor = median(seconds["clear floor" if name.startswith("clear") else "sweep floor"])
            ratio = median(seconds[name]) / (floor + startup)
            print(f"{name}: {ratio:.2f}x floor + start-up (target <= {TIME_TARGET}x): {verdict(ratio <= TIME_TARGET)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
