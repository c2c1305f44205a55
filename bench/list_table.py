"""Benchmark ``statestore list`` drawn as a terminal table against ``list -o plain``.

    .venv/bin/python bench/list_table.py                      # 1,000,000 keys (and 10,000 for memory)
    .venv/bin/python bench/list_table.py --quick              # 4,000 and 400 keys, one run each

On the SQLite stores ``bench/run.py`` generates (cached in ``$TMPDIR/statestore-bench``, generated on
first use), ``statestore --conn URL list -o table`` runs with ``COLUMNS=100`` and stdout on a pipe that
this script drains. Measured: the time until the first ``--lines`` lines are on the pipe (the first
screen), the whole run's wall time beside ``list -o plain`` on the same store, and peak RSS at both
sizes. The median of ``--repeat`` runs counts. Targets (PASS/FAIL is printed, the exit code is 0
unless a command fails): table within 2x of plain, first screen under 1 s, peak RSS of the large store
at most 1.10x the small one's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import generate
import harness
import stores
from generate import Spec
from harness import table, verdict
from measure import GNU_TIME, RSS_METHOD, median

TARGET_RATIO = 2.0
TARGET_FIRST_SCREEN = 1.0
TARGET_RSS_GROWTH = 1.10
QUICK = {"rows": 4000, "small_rows": 400, "repeat": 1}


@dataclass(frozen=True)
class Run:
    first_screen: float  # seconds until the first N lines were on the pipe
    seconds: float
    lines: int
    peak_rss_kb: int


def run_piped(cmd: list[str], env: dict[str, str], scratch: Path, lines: int) -> Run:
    """Run ``cmd`` with stdout on a pipe, reading it as it comes; the peak RSS is the command's own."""
    scratch.mkdir(parents=True, exist_ok=True)
    rss_path = scratch / "rss.txt"
    argv = [GNU_TIME, "-f", "%M", "-o", str(rss_path), *cmd] if GNU_TIME else cmd
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    seen, first = 0, None
    fd = proc.stdout.fileno()
    while chunk := os.read(fd, 1 << 16):
        seen += chunk.count(b"\n")
        if first is None and seen >= lines:
            first = time.perf_counter() - start
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    errors = proc.stderr.read().decode(errors="replace")
    proc.stdout.close()
    proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {errors.strip()[-2000:]}")
    rss_kb = int(rss_path.read_text().split()[-1]) if GNU_TIME else usage.ru_maxrss
    return Run(first if first is not None else seconds, seconds, seen, rss_kb)


def measure(url: str, mode: str, args: argparse.Namespace, env: dict[str, str], scratch: Path) -> list[Run]:
    cmd = [generate.statestore_executable(), "--conn", url, "list", "-o", mode]
    runs = []
    for _ in range(args.repeat):
        runs.append(run_piped(cmd, {**env, "COLUMNS": str(args.columns)}, scratch, args.lines))
    return runs


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(__doc__, rows=1_000_000, small_rows=10_000, repeat=3, quick=QUICK)
    p.add_argument("--lines", type=int, default=50, help="lines that make the first screen (50)")
    p.add_argument("--columns", type=int, default=100, help="the terminal's width, COLUMNS (100)")
    p.add_argument("--regenerate", action="store_true", help="generate the SQLite stores even when cached")
    args = harness.parse(p, argv)
    env = generate.tool_env(args.workdir / "airflow-home")
    cache = stores.SqliteStores(args.workdir, env, args.regenerate)
    scratch = args.workdir / "run" / "list-table"
    results: dict[tuple[int, str], list[Run]] = {}
    for rows in (args.rows, args.small_rows):
        original = cache.original(Spec(rows, rows // 2))  # the store bench/run.py uses too
        for mode in ("plain", "table"):
            print(f"list -o {mode} on {rows:,} keys ...", file=sys.stderr, flush=True)
            results[(rows, mode)] = measure(original.url, mode, args, env, scratch)

    def med(rows: int, mode: str, field: str) -> float:
        return median([getattr(run, field) for run in results[(rows, mode)]])

    print(f"statestore list on SQLite, COLUMNS={args.columns}, stdout a pipe; median of {args.repeat}")
    print(f"peak RSS: {RSS_METHOD}")
    header = ["command", "keys", f"first {args.lines} lines", "total", "lines", "peak RSS"]
    table_rows = [
        [
            f"list -o {mode}",
            f"{rows:,}",
            f"{med(rows, mode, 'first_screen'):.3f} s",
            f"{med(rows, mode, 'seconds'):.2f} s",
            f"{results[(rows, mode)][0].lines:,}",
            f"{med(rows, mode, 'peak_rss_kb') / 1024:.1f} MB",
        ]
        for rows in (args.rows, args.small_rows)
        for mode in ("plain", "table")
    ]
    print(table(header, table_rows, right={1, 2, 3, 4, 5}))
    ratio = med(args.rows, "table", "seconds") / med(args.rows, "plain", "seconds")
    first = med(args.rows, "table", "first_screen")
    growth = med(args.rows, "table", "peak_rss_kb") / med(args.small_rows, "table", "peak_rss_kb")
    print()
    print(
        f"table / plain total at {args.rows:,} keys: {ratio:.2f}x (target <= {TARGET_RATIO}x) "
        f"{verdict(ratio <= TARGET_RATIO)}"
    )
    print(
        f"table first screen at {args.rows:,} keys: {first:.3f} s (target < {TARGET_FIRST_SCREEN} s) "
        f"{verdict(first < TARGET_FIRST_SCREEN)}"
    )
    print(
        f"table peak RSS {args.rows:,} / {args.small_rows:,} keys: {growth:.2f}x (target <= {TARGET_RSS_GROWTH}x) "
        f"{verdict(growth <= TARGET_RSS_GROWTH)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
