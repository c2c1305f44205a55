"""Cold start of every ``statestore`` command against the floor ``python -c "import sqlalchemy, typer"``.

    .venv/bin/python bench/startup.py
    .venv/bin/python bench/startup.py --runs 9 --json-out /tmp/statestore-bench/startup.json
    .venv/bin/python bench/startup.py --quick        # a smoke test: every command once, figures not meant to be read

Every command runs as a whole process on a one-key SQLite store in a temporary AIRFLOW_HOME, with
stdout to a pipe (so plain output, as under cron or CI), each run right after a run of the floor in
the same interpreter. A command's ratio is its median over the median of the floor runs paired with
its own, so load that drifts during the benchmark shifts both alike. Bytecode is cached (in the
temporary folder, even under PYTHONDONTWRITEBYTECODE) as for an installed package, and one untimed
run of each command comes first. Commands that touch the database aim at 1.2x the floor; help, the
version, shell completion and commands through the REST API (`--api-url`; here at a port of 127.0.0.1 where
nothing listens, so they exit 3 as soon as they connect), none of which loads SQLAlchemy, at 0.6x.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import harness
from generate import statestore_executable, tool_env
from harness import verdict
from measure import median

FLOOR = ("python", "-c", "import sqlalchemy, typer")
DB_TARGET = 1.2
LIGHT_TARGET = 0.6
TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")
NO_API = ("--api-url", "http://127.0.0.1:1")  # nothing listens: refused at once, on loopback
API_TOKEN = {"STATESTORE_API_TOKEN": "startup-bench"}


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...]
    target: float
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int = 0  # what a run that did its work exits with


# In this order each round: `set` writes k2, which `delete` then removes; `clear` finds nothing to clear.
COMMANDS = (
    Command("list", ("list",), DB_TARGET),
    Command("set", ("set", "k2", '{"a": 1}', *TASK), DB_TARGET),
    Command("get (full CLI)", ("get", "k", *TASK), DB_TARGET, {"STATESTORE_NO_FAST_PATH": "1"}),
    Command("delete", ("delete", "k2", *TASK), DB_TARGET),
    Command("clear --yes", ("clear", "--yes", "--dag-id", "d", "--run-id", "r", "--task-id", "other"), DB_TARGET),
    Command("db check", ("db", "check"), DB_TARGET),
    Command("db init", ("db", "init"), DB_TARGET),
    Command("clean", ("clean",), DB_TARGET),
    Command("clean --dry-run", ("clean", "--dry-run"), DB_TARGET),
    Command("config show", ("config", "show"), DB_TARGET),
    Command("get (fast path)", ("get", "k", *TASK), LIGHT_TARGET),
    Command("--help", ("--help",), LIGHT_TARGET),
    Command("--version", ("--version",), LIGHT_TARGET),
    Command("get --help", ("get", "--help"), LIGHT_TARGET),
    Command("clean --help", ("clean", "--help"), LIGHT_TARGET),
    Command("db --help", ("db", "--help"), LIGHT_TARGET),
    Command("get (--api-url)", (*NO_API, "get", "k", *TASK), LIGHT_TARGET, API_TOKEN, exit_code=3),
    Command("set (--api-url)", (*NO_API, "set", "k", "1", *TASK), LIGHT_TARGET, API_TOKEN, exit_code=3),
    Command("db check (--api-url)", (*NO_API, "db", "check"), LIGHT_TARGET, API_TOKEN, exit_code=3),
    Command(
        "complete (bash)",
        (),
        LIGHT_TARGET,
        {"_STATESTORE_COMPLETE": "complete_bash", "COMP_WORDS": "statestore cl", "COMP_CWORD": "1"},
    ),
)


@dataclass
class Row:
    command: Command
    samples: list[float] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)  # the floor run just before each sample
    error: str | None = None  # the command failed: no figures

    @property
    def seconds(self) -> float | None:
        return median(self.samples) if self.samples else None

    @property
    def floor(self) -> float | None:
        return median(self.floors) if self.floors else None


class Failed(RuntimeError):
    pass


def timed(argv: list[str], env: dict[str, str], exit_code: int = 0) -> float:
    """Wall-clock seconds of one whole process that exits ``exit_code``, stdout to a pipe read to the end.

    The process runs in AIRFLOW_HOME, a small folder: `python -c` searches its working directory first.
    """
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=env["AIRFLOW_HOME"], capture_output=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != exit_code:
        err = done.stderr.decode(errors="replace").strip()[-2000:]
        raise Failed(f"{' '.join(argv)} exited {done.returncode}: {err}")
    return seconds


def one_key_store(env: dict[str, str]) -> None:
    """``db init`` and one task key in the default store of ``env``'s AIRFLOW_HOME."""
    tool = statestore_executable()
    for args in (("db", "init"), ("set", "k", '"v"', *TASK)):
        done = subprocess.run(
            [tool, *args], env=env, cwd=env["AIRFLOW_HOME"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise Failed(f"statestore {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


def measure(
    runs: int, env: dict[str, str], commands: tuple[Command, ...] = COMMANDS, warm: bool = True
) -> tuple[list[float], list[Row]]:
    """``runs`` timed runs of each command, each after a run of the floor; ``warm``: one untimed run of each first,
    which warms the page and bytecode caches. A command that fails is reported, and not run again. Unwarmed
    (``--quick``, the smoke test), one floor run stands for every command: half the processes."""
    tool = statestore_executable()
    floor = [sys.executable, *FLOOR[1:]]
    rows = [Row(c) for c in commands]
    if warm:
        timed(floor, env)
        for row in rows:
            _command(row, tool, env)
    shared = None if warm else timed(floor, env)
    for _ in range(runs):
        for row in rows:
            if row.error is None:
                floor_seconds = timed(floor, env) if shared is None else shared
                seconds = _command(row, tool, env)
                if seconds is not None:
                    row.floors.append(floor_seconds)
                    row.samples.append(seconds)
    return [f for row in rows for f in row.floors], rows


def _command(row: Row, tool: str, env: dict[str, str]) -> float | None:
    """One run of the row's command: its seconds, or None with the failure as the row's error."""
    try:
        return timed([tool, *row.command.args], {**env, **row.command.env}, row.command.exit_code)
    except Failed as exc:
        row.error = str(exc)
        return None


def report(floor: float, floor_runs: int, rows: list[Row], runs: int) -> tuple[str, list[dict[str, Any]]]:
    lines, doc = [], []
    for row in rows:
        ratio = None if row.seconds is None or row.floor is None else row.seconds / row.floor
        passed = ratio is not None and ratio <= row.command.target
        lines.append(
            [
                row.command.name,
                "-" if row.seconds is None else f"{row.seconds:.3f}",
                "-" if row.floor is None else f"{row.floor:.3f}",
                "-" if ratio is None else f"{ratio:.2f}x",
                f"<= {row.command.target:.1f}x",
                verdict(passed),
            ]
        )
        doc.append(
            {
                "command": row.command.name,
                "argv": ["statestore", *row.command.args],
                "env": row.command.env,
                "samples": row.samples,
                "seconds": row.seconds,
                "floor_samples": row.floors,
                "floor_seconds": row.floor,
                "ratio": ratio,
                "target": row.command.target,
                "passed": passed,
                "error": row.error,
            }
        )
    head = [
        f"statestore start-up: median of {runs} runs per command, one-key SQLite store, stdout to a pipe",
        f'floor `python -c "import sqlalchemy, typer"`: {floor:.3f} s (median of {floor_runs} runs); '
        "each ratio is to the median of the floor runs paired with that command's runs",
        "",
    ]
    errors = [f"{row.command.name}: {row.error}" for row in rows if row.error]
    header = ["command", "median s", "floor s", "ratio", "target", "result"]
    table_text = harness.table(header, lines, right={1, 2, 3, 4})
    return "\n".join([*head, table_text, *errors]), doc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = harness.arguments(__doc__, workdir=None, json_out=True)
    p.add_argument("--runs", type=int, default=5, help="runs of each command (and of the floor before each); 5")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: one run of each command, no untimed run first, the installed package's own bytecode",
    )
    return harness.parse(p, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = 1 if args.quick else max(1, args.runs)
    with tempfile.TemporaryDirectory(prefix="statestore-startup-") as home:
        env = tool_env(Path(home) / "airflow-home")
        for name in ("STATESTORE_NO_FAST_PATH", "PYTHONDONTWRITEBYTECODE", "NO_COLOR", "FORCE_COLOR", "TERM"):
            env.pop(name, None)
        if not args.quick:  # bytecode is cached, as in an installed package, but here, away from the source tree
            env["PYTHONPYCACHEPREFIX"] = str(Path(home) / "pycache")
        try:
            one_key_store(env)
            floors, rows = measure(runs, env, warm=not args.quick)
        except Failed as exc:
            print(f"startup benchmark failed: {exc}", file=sys.stderr)
            return 1
    floor = median(floors)
    text, doc = report(floor, len(floors), rows, runs)
    print(text)
    failed = [d["command"] for d in doc if not d["passed"]]
    if args.json_out:
        meta = {
            "date": datetime.now().isoformat(timespec="seconds"),
            "python": sys.version.split()[0],
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "runs": runs,
        }
        floor_doc = {"argv": list(FLOOR), "samples": floors, "seconds": floor}
        document = {"meta": meta, "floor": floor_doc, "commands": doc, "failed": failed}
        harness.write_json(args.json_out, document)
    return 1 if any(row.error for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
