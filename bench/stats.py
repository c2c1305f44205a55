"""Benchmark ``statestore stats -o json`` against the floor of one ``SELECT count(*)`` (see bench/README.md).

    .venv/bin/python bench/stats.py                       # 1,000,000 and 10,000 rows; SQLite, PostgreSQL, MariaDB
    .venv/bin/python bench/stats.py --quick --engines sqlite

The floor is ``SELECT count(*) FROM task_state_store`` through the engine's own shell (``sqlite3``,
``psql``, ``mysql``; a bare ``python -c`` with the sqlite3 module when there is no ``sqlite3`` shell):
the least any tool does to look at every row once. ``stats`` does more (value bytes, the updated_at range,
per-dag and per-asset groups, the expiry buckets and the per-day histogram), and its process starts
Python, typer and SQLAlchemy, so it is compared two ways: with the floor alone, and with the floor plus
our start-up (``statestore --conn URL db check -o json``, which connects and inspects the schema).
Times are wall-clock seconds of the whole process, the median of --repeat runs, the three commands taking
turns; peak RSS is the stats process's own, at the large store and at the small one.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import generate
import harness
import stores
from floors import libpq_env
from generate import driver_params
from harness import table, turns, verdict
from measure import RSS_METHOD, Sample, median, run_process
from sqlalchemy.engine import make_url

COUNT = "SELECT count(*) FROM task_state_store"
FLOOR, STARTUP, STATS = "count(*) floor", "start-up (db check)", "stats -o json"
LARGEST = "stats --largest 10"  # the same, and the 10 largest values (one more pass, ORDER BY size LIMIT 10)
TIME_TARGET = 2.0  # stats within 2x of the floor plus our start-up
MEMORY_TARGET = 1.10  # peak RSS at the large store within 1.10x of the small store's
QUICK = {"rows": 4000, "small_rows": 400, "repeat": 1}


@dataclass
class Row:
    engine: str
    rows: int
    seconds: dict[str, list[float]] = field(default_factory=dict)
    stats_rss_kb: list[int] = field(default_factory=list)
    floor_how: str = ""

    def median(self, name: str) -> float:
        return median(self.seconds[name])


def count_command(engine: str, url: str) -> tuple[list[str], dict[str, str], str]:
    """The floor's command line, extra environment and how it ran."""
    if engine == "sqlite":
        path = make_url(url).database or ""
        shell = shutil.which("sqlite3")
        if shell:
            return [shell, path, COUNT], {}, "sqlite3 shell"
        script = f"import sqlite3, sys\nprint(sqlite3.connect(sys.argv[1]).execute({COUNT!r}).fetchone()[0])\n"
        return [sys.executable, "-c", script, path], {}, "python -c with the sqlite3 module"
    if engine == "postgresql":
        return ["psql", "-X", "-A", "-t", "-c", COUNT], libpq_env(url), "psql"
    params = driver_params(url)
    argv = ["mysql", "-N", "-B", "-h", params["host"], "-P", str(params.get("port", 3306)), "-u", params["user"]]
    env = {"MYSQL_PWD": params["password"]} if params.get("password") else {}
    return [*argv, params["database"], "-e", COUNT], env, "mysql client"


def measure_store(engine: str, original: stores.Original, repeat: int, env: dict[str, str], scratch: Path) -> Row:
    url, spec = original.url, original.spec
    ours = generate.statestore_executable()
    floor_argv, floor_env, how = count_command(engine, url)
    commands = {
        FLOOR: (floor_argv, {**env, **floor_env}),
        STARTUP: ([ours, "--conn", url, "db", "check", "-o", "json"], env),
        STATS: ([ours, "--conn", url, "stats", "-o", "json"], env),
        LARGEST: ([ours, "--conn", url, "stats", "--largest", "10", "-o", "json"], env),
    }
    row = Row(engine, spec.rows, {name: [] for name in commands}, floor_how=how)
    run_process(commands[STATS][0], env=env, scratch=scratch)  # warm the caches once, not measured
    for name in turns(list(commands), repeat):
        argv, run_env = commands[name]
        sample: Sample = run_process(argv, env=run_env, scratch=scratch)
        row.seconds[name].append(sample.seconds)
        if name == LARGEST and len(json.loads(sample.stdout)["largest"]) != min(10, spec.rows):
            raise SystemExit(f"{engine}: stats --largest 10 did not list {min(10, spec.rows)} values")
        if name == STATS:
            row.stats_rss_kb.append(sample.peak_rss_kb)
            counted = json.loads(sample.stdout)["task"]["rows"]
            if counted != spec.rows:
                raise SystemExit(f"{engine}: stats counted {counted} task rows, the store has {spec.rows}")
        elif name == FLOOR and int(sample.stdout.split()[-1]) != spec.rows:
            raise SystemExit(f"{engine}: the floor counted {sample.stdout.strip()}, expected {spec.rows}")
    return row


def report(rows: list[Row], large: int, small: int) -> str:
    header = ["engine", "rows", FLOOR, STARTUP, STATS, "x floor", "x (floor+start-up)", "peak RSS", LARGEST, "x stats"]
    lines = []
    for r in rows:
        floor, startup, ours = r.median(FLOOR), r.median(STARTUP), r.median(STATS)
        lines.append(
            [
                r.engine,
                f"{r.rows:,}",
                f"{floor:.3f} s",
                f"{startup:.3f} s",
                f"{ours:.3f} s",
                f"{ours / floor:.1f}x",
                f"{ours / (floor + startup):.2f}x",
                f"{max(r.stats_rss_kb) / 1024:.1f} MB",
                f"{r.median(LARGEST):.3f} s",
                f"{r.median(LARGEST) / ours:.2f}x",
            ]
        )
    out = [table(header, lines, right=set(range(2, len(header)))), ""]
    for engine in dict.fromkeys(r.engine for r in rows):
        big = next((r for r in rows if r.engine == engine and r.rows == large), None)
        little = next((r for r in rows if r.engine == engine and r.rows == small), None)
        if big is None:
            continue
        ratio = big.median(STATS) / (big.median(FLOOR) + big.median(STARTUP))
        out.append(
            f"{engine}: stats at {large:,} rows is {ratio:.2f}x floor + start-up (target <= {TIME_TARGET}x): "
            f"{verdict(ratio <= TIME_TARGET)}"
        )
        if little is not None:
            memory = max(big.stats_rss_kb) / max(little.stats_rss_kb)
            out.append(
                f"{engine}: peak RSS at {large:,} rows is {memory:.2f}x that at {small:,} "
                f"(target <= {MEMORY_TARGET}x): {verdict(memory <= MEMORY_TARGET)}"
            )
    floors_used = sorted({f"{r.engine}: {r.floor_how}" for r in rows})
    out.append(f"floors: {'; '.join(floors_used)}; peak RSS: {RSS_METHOD}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(
        __doc__, rows=1_000_000, small_rows=10_000, repeat=5, engines=True, json_out=True, quick=QUICK
    )
    args = harness.parse(p, argv)
    env = generate.tool_env(args.workdir / "airflow-home")
    rows: list[Row] = []

    def measure(engine: str, store: stores.Stores) -> None:
        for original in harness.large_and_small(engine, store, args):
            rows.append(measure_store(engine, original, args.repeat, env, args.workdir / "run" / engine))

    skipped = harness.each_engine(args, env, measure)
    print(report(rows, args.rows, args.small_rows))
    harness.print_skipped(skipped)
    if args.json_out:
        doc = {
            "rows": args.rows,
            "small_rows": args.small_rows,
            "repeat": args.repeat,
            "rss_method": RSS_METHOD,
            "skipped": skipped,
            "measurements": [
                {
                    "engine": r.engine,
                    "rows": r.rows,
                    "floor": r.floor_how,
                    "median_seconds": {name: round(r.median(name), 4) for name in r.seconds},
                    "samples": r.seconds,
                    "stats_peak_rss_kb": r.stats_rss_kb,
                }
                for r in rows
            ],
        }
        harness.write_json(args.json_out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
