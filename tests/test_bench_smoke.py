"""The benchmark harness still runs: ``bench/run.py --quick`` end to end, on tiny stores.

SQLite always; PostgreSQL and MariaDB too when they are reachable (the harness skips them otherwise). Only that
every measurement ran and took some time is checked: benchmark figures are never asserted on, so the scripts'
``statestore`` processes are forked by the worker's warm server (``warm.launcher``): the same commands on the
same stores, without an import of the tool each (cold starts are measured by ``test_bench_startup``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm
from paths import REPO
from servers import server_environment

STATESTORE = Path(sys.executable).with_name("statestore")

# What --quick measures on every engine it reaches (batch size 500, 4000 rows, small store 400 rows).
EVERY_ENGINE = {
    ("raw DELETE (floor)", 4000),
    ("clean --batch-size 0", 4000),
    ("clean --batch-size 500", 4000),
    ("bare dry-run script (floor)", 4000),
    ("clean --dry-run -o json", 4000),
    ("clean --dry-run -o table", 4000),
    ("clean --batch-size 500 + writer", 4000),
    ("clean --batch-size 0", 400),
    ("clean --batch-size 500", 400),
    ("clean --dry-run -o json", 400),
    ("clean --dry-run -o table", 400),
}
SQLITE_ONLY = {("bare python get (floor)", 4000), ("get (cold start)", 4000)}
SERVER_ONLY = {("clean --batch-size 500 + open snapshot", 4000)}


@pytest.mark.slow
def test_quick_benchmark_measures_everything(tmp_path: Path) -> None:
    assert STATESTORE.exists(), f"statestore is not installed next to {sys.executable}"
    out = tmp_path / "results.json"
    cmd = [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--workdir", str(tmp_path / "work")]
    env = server_environment() | warm.launcher(tmp_path)  # its server stores go into this worker's databases
    argv = [*cmd, "--json-out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=env)

    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    results = json.loads(out.read_text())
    assert results["problems"] == []
    engines = {m["engine"] for m in results["measurements"]}
    assert "sqlite" in engines
    assert engines - {"sqlite"} <= {"postgresql", "mariadb"}
    for engine in engines:
        found = {(m["name"], m["rows"]) for m in results["measurements"] if m["engine"] == engine}
        expected = EVERY_ENGINE | (SQLITE_ONLY if engine == "sqlite" else SERVER_ONLY)
        assert expected <= found, f"{engine} lacks {expected - found}"
        assert engine in results["writer_latency"]
    for m in results["measurements"]:
        assert m["samples"], m
        assert all(seconds > 0 for seconds in m["samples"]), m
        assert m["seconds"] > 0 and m["peak_rss_mb"] > 0, m
    assert results["targets"], "no target was evaluated"
    assert all(isinstance(t["passed"], bool) for t in results["targets"])
    assert "Targets" in done.stdout


TRANSFER = (
    "bare export script (floor)",
    "export --file",
    "bare import script (floor)",
    "import",
    "diff FILE",
    "diff FILE (shuffled)",
)


@pytest.mark.slow
def test_quick_transfer_benchmark_measures_everything(tmp_path: Path) -> None:
    """``bench/transfer.py --quick``: export and import with their floors (whose files must match byte for byte,
    or the script exits non-zero), on every engine it reaches."""
    out = tmp_path / "transfer.json"
    cmd = [sys.executable, str(REPO / "bench" / "transfer.py"), "--quick", "--workdir", str(tmp_path / "work")]
    env = server_environment() | warm.launcher(tmp_path)  # its server stores go into this worker's databases
    argv = [*cmd, "--json-out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=env)

    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    results = json.loads(out.read_text())
    found = {(m["engine"], m["rows"]) for m in results["measurements"]}
    engines = {engine for engine, _ in found}
    assert "sqlite" in engines and engines <= {"sqlite", "postgresql", "mariadb"}
    assert found == {(engine, rows) for engine in engines for rows in (4000, 400)}
    for m in results["measurements"]:
        assert set(m["samples"]) == set(TRANSFER), m
        assert all(seconds > 0 for samples in m["samples"].values() for seconds in samples), m
        assert all(kb > 0 for samples in m["peak_rss_kb"].values() for kb in samples), m
    assert "export --file at 4,000 rows is" in done.stdout and "import at 4,000 rows is" in done.stdout


@pytest.mark.slow
def test_quick_clean_backup_benchmark_measures_everything(tmp_path: Path) -> None:
    """``bench/clean_backup.py --quick``: the cleans with and without --backup (each must delete the expired rows
    and back up as many lines, or the script exits non-zero), and the fsync figure, on every engine it reaches."""
    out = tmp_path / "backup.json"
    cmd = [sys.executable, str(REPO / "bench" / "clean_backup.py"), "--quick", "--workdir", str(tmp_path / "work")]
    env = os.environ | warm.launcher(tmp_path)
    argv = [*cmd, "--json-out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=env)

    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    results = json.loads(out.read_text())
    assert results["problems"] == []
    measured = {engine: found for engine, found in results["engines"].items() if "skipped" not in found}
    assert "sqlite" in measured and set(measured) <= {"sqlite", "postgresql", "mariadb"}
    for engine, found in measured.items():
        names = {f"clean --batch-size {size}{backup}" for size in (500, 0) for backup in ("", " --backup")}
        floors = {"backup floor (bare script)@4000", "backup floor, one statement@4000"}  # beside the large store
        assert set(found) == {f"{name}@{rows}" for name in names for rows in (4000, 400)} | floors | {"fsync"}, engine
        for name, entry in found.items():
            samples = [*entry["write"], *entry["write+fsync"]] if name == "fsync" else entry["seconds"]
            assert samples and all(seconds > 0 for seconds in samples), (engine, name)
    assert {t["engine"] for t in results["targets"]} == set(measured)
    assert all(isinstance(t["passed"], bool) for t in results["targets"])
