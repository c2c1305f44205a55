"""Timing one process: wall-clock seconds and the peak resident set size of that process alone.

The peak RSS is what ``/usr/bin/time -f %M`` reports for the command it runs. Without GNU time it
comes from ``os.wait4`` on the child, which on Linux is never below the RSS of the forked benchmark
process itself (tens of MB), so small figures are then overstated; ``RSS_METHOD`` says which.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else shutil.which("time")
RSS_METHOD = "/usr/bin/time -f %M" if GNU_TIME else "os.wait4 ru_maxrss (includes the forked parent's RSS)"


@dataclass(frozen=True)
class Sample:
    seconds: float
    peak_rss_kb: int
    stdout: str  # empty when stdout went to /dev/null


class ProcessFailed(RuntimeError):
    pass


def run_process(
    cmd: Sequence[str],
    *,
    env: dict[str, str],
    scratch: Path,
    keep_stdout: bool = True,
    timeout: float = 3600.0,
    on_start: Callable[[], None] | None = None,
) -> Sample:
    """Run ``cmd`` to the end; stdout goes to a file in ``scratch`` (or /dev/null), stderr to another."""
    scratch.mkdir(parents=True, exist_ok=True)
    out_path, err_path, rss_path = scratch / "stdout.txt", scratch / "stderr.txt", scratch / "rss.txt"
    argv = [GNU_TIME, "-f", "%M", "-o", str(rss_path), *cmd] if GNU_TIME else list(cmd)
    with open(out_path if keep_stdout else os.devnull, "wb") as out, open(err_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=scratch)
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            if on_start is not None:
                on_start()
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise ProcessFailed(
            f"{_show(cmd)} exited {proc.returncode}: {err_path.read_text(errors='replace').strip()[-2000:]}"
        )
    rss_kb = int(rss_path.read_text().split()[-1]) if GNU_TIME else usage.ru_maxrss
    return Sample(seconds, rss_kb, out_path.read_text() if keep_stdout else "")


def _show(cmd: Sequence[str]) -> str:
    shown = " ".join(cmd)
    return shown if len(shown) < 300 else shown[:300] + "..."


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
