"""What ``clean --metrics-file`` and ``clean --older-than`` cost, against the same clean without them.

    .venv/bin/python bench/clean_metrics.py                      # 200,000 rows, 100,000 expired, SQLite
    .venv/bin/python bench/clean_metrics.py --rows 1000000 --expired 500000

The floor is ``statestore clean --batch-size B`` on a fresh copy of the store: the same work with
neither option. ``--metrics-file`` adds a count of the expired rows left (one indexed range count), a
write of a ~1.5 KB file with fsync and rename, and the import of ``statestore_cli.ops.metrics``;
``--older-than 0`` adds nothing but its parsing (its selection is the floor's). Every command runs on
its own copy of the store (the copy is not timed), the three take turns, and the median of --repeat
runs counts. Wall-clock seconds of the whole process, so start-up is in every figure.
"""

from __future__ import annotations

import shutil
import sys

import generate
import harness
from generate import Spec, statestore_executable, tool_env
from harness import table, turns, verdict
from measure import median, run_process

FLOOR, METRICS, BOTH = "clean (floor)", "clean --metrics-file", "clean --metrics-file --older-than 0"
TARGET = 1.10  # each within 1.10x of the floor


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(
        __doc__, rows=200_000, expired=True, batch_size=10_000, repeat=5, workdir="statestore-bench-metrics"
    )
    args = harness.parse(p, argv)
    spec = Spec(rows=args.rows, expired=args.expired)
    env = tool_env(args.workdir / "home")
    original = args.workdir / "original.db"
    counts = generate.generate_sqlite(original, spec, env)
    print(f"store: {spec.rows:,} rows, {counts.expired:,} expired (SQLite, generated in {counts.seconds:.1f}s)")
    base = [statestore_executable(), "--conn", "", "clean", "--batch-size", str(args.batch_size), "-o", "json"]
    metrics = ["--metrics-file", str(args.workdir / "statestore_clean.prom")]
    commands = {FLOOR: base, METRICS: base + metrics, BOTH: base + metrics + ["--older-than", "0"]}
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for name in turns(list(commands), args.repeat):
        copy = args.workdir / "copy.db"
        shutil.copyfile(original, copy)
        cmd = list(commands[name])
        cmd[2] = f"sqlite:///{copy}"
        sample = run_process(cmd, env=env, scratch=args.workdir / "scratch")
        if f'"deleted": {counts.expired},' not in sample.stdout:
            print(f"{name} deleted the wrong number of rows: {sample.stdout}", file=sys.stderr)
            return 1
        seconds[name].append(sample.seconds)
    floor = median(seconds[FLOOR])
    rows = []
    for name, values in seconds.items():
        ratio = median(values) / floor
        target = "" if name == FLOOR else f"<= {TARGET:.2f}x {verdict(ratio <= TARGET)}"
        rows.append([name, f"{median(values):.3f}", f"{ratio:.2f}x", target])
    print(table(["command", "median s", "vs floor", "target"], rows, right={1, 2}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
