"""The start-up benchmark still runs: ``bench/startup.py --quick`` measures every command once.

Only that each command ran and took some time is checked: start-up figures are never asserted on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EVERY_COMMAND = [
    "list",
    "set",
    "get (full CLI)",
    "delete",
    "clear --yes",
    "db check",
    "db init",
    "clean",
    "clean --dry-run",
    "config show",
    "get (fast path)",
    "--help",
    "--version",
    "get --help",
    "clean --help",
    "db --help",
    "get (--api-url)",
    "set (--api-url)",
    "db check (--api-url)",
    "complete (bash)",
]


@pytest.mark.slow
def test_startup_benchmark_measures_every_command(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    cmd = [sys.executable, str(REPO / "bench" / "startup.py"), "--quick", "--json-out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)

    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    results = json.loads(out.read_text())
    assert results["floor"]["seconds"] > 0
    assert all(seconds > 0 for seconds in results["floor"]["samples"])
    rows = {row["command"]: row for row in results["commands"]}
    assert list(rows) == EVERY_COMMAND
    for name, row in rows.items():
        assert row["error"] is None, name
        assert len(row["samples"]) == 1 and row["samples"][0] > 0, name
        assert row["seconds"] > 0 and row["ratio"] > 0, name
        assert isinstance(row["passed"], bool), name
        assert name in done.stdout
    assert "PASS" in done.stdout or "FAIL" in done.stdout
