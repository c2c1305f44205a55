"""Apache Airflow 3.3.2 in a virtual environment of its own, shared by the modules marked ``airflow``.

The venv is created in a cache directory kept between runs (``~/.cache/statestore-tests/airflow-3.3.2``,
or ``$STATESTORE_AIRFLOW_VENV``) with ``apache-airflow==3.3.2``, the PostgreSQL drivers Airflow uses and
the common-io provider. Where it cannot be installed a test is skipped with the reason, except under
``CI=true``, where that fails it. The fixtures using it (``airflow_python``, ``migrated_sqlite``) are in
``conftest.py``.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

AIRFLOW_VERSION = "3.3.2"
VENV = Path(
    os.environ.get(
        "STATESTORE_AIRFLOW_VENV", Path.home() / ".cache" / "statestore-tests" / f"airflow-{AIRFLOW_VERSION}"
    )
)

# Airflow, the two PostgreSQL drivers it uses (psycopg2 for its sessions, asyncpg for its async engine),
# and the provider whose object-storage state store backend the tool must load.
REQUIREMENTS = (
    f"apache-airflow=={AIRFLOW_VERSION}",
    "psycopg2-binary",
    "asyncpg",
    "apache-airflow-providers-common-io",
)


def _unavailable(reason: str) -> None:
    message = f"apache-airflow=={AIRFLOW_VERSION} is not available: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _installed(python: Path) -> bool:
    probe = "import airflow, psycopg2, asyncpg, airflow.providers.common.io; print(airflow.__version__)"
    if not python.exists():
        return False
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    return done.returncode == 0 and done.stdout.strip() == AIRFLOW_VERSION


def _install(python: Path) -> None:
    """Install what is missing into the venv (created first when there is none); a fresh venv whose
    install failed is removed, so the next run starts over."""
    fresh = not python.exists()
    if fresh:
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True)
    started = time.monotonic()
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *REQUIREMENTS],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if done.returncode != 0:
        if fresh:
            shutil.rmtree(VENV, ignore_errors=True)
        lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        _unavailable(f"pip install failed: {lines[-1] if lines else done.returncode}")
    (VENV / "install-seconds").write_text(f"{time.monotonic() - started:.0f}\n")


def airflow_venv_python() -> Path:
    """The Python of a venv with Airflow installed, installing it on first use (one install at a time)."""
    python = VENV / "bin" / "python"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f".{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing into the same cache
        if not _installed(python):
            _install(python)
    if not _installed(python):
        _unavailable(f"{python} cannot import airflow {AIRFLOW_VERSION}")
    return python


def airflow_env(home: Path, conn: str) -> dict[str, str]:
    """The environment of an Airflow process on the database ``conn``: none of the caller's AIRFLOW_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    home.mkdir(parents=True, exist_ok=True)
    (home / "dags").mkdir(exist_ok=True)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=conn,
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        PYTHONWARNINGS="ignore",
    )
    return env


def airflow(python: Path, env: dict[str, str], *args: str) -> str:
    """Run ``airflow ARGS`` (as ``python -m airflow``: the venv may have been moved) and return its stdout."""
    done = subprocess.run(
        [str(python), "-m", "airflow", *args], env=env, capture_output=True, text=True, check=False, timeout=900
    )
    assert done.returncode == 0, f"airflow {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# Run by Airflow's interpreter for AirflowOps: the script (its first argument) once per line of stdin, with
# that line as its argument, as `python -c SCRIPT OPS` would run it; what the script prints is sent back
# as one JSON line on the process's own stdout, which nothing else writes to (fd 1 goes to stderr).
_SERVE = """
import contextlib, io, json, os, sys, traceback
script = compile(sys.argv[1], "<ops script>", "exec")
replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
for line in sys.stdin:
    out = io.StringIO()
    sys.argv = ["-c", line.rstrip("\\n")]
    try:
        with contextlib.redirect_stdout(out):
            exec(script, {"__name__": "__main__"})
        reply = {"stdout": out.getvalue()}
    except BaseException:
        reply = {"stdout": out.getvalue(), "error": traceback.format_exc()}
    replies.write(json.dumps(reply) + "\\n")
    replies.flush()
"""


# Run by Airflow's interpreter for ``StatestoreIn``: ``statestore ARGS`` (its JSON argument's ``args``) as the
# command's own ``python -m statestore_cli`` runs it (``__main__.main``, the fast path of ``get`` included),
# with stdin, stdout, stderr and the environment (plus the argument's ``env``) isolated as a process has them;
# it prints the exit code and both outputs as one JSON line. A traceback is printed to that stderr, as a
# process would print it.
_STATESTORE = """
import json, sys, traceback
from click.testing import CliRunner
from statestore_cli.__main__ import main

request = json.loads(sys.argv[1])
with CliRunner().isolation(env=request["env"]) as (stdout, stderr, _):
    sys.argv = ["statestore", *request["args"]]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\\n")
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
print(json.dumps({"code": code, "stdout": out, "stderr": err}))
"""


class StatestoreIn:
    """``statestore ARGS`` run by ``python`` (Airflow's) with ``env``, every call in one interpreter (an
    ``AirflowOps``, started at the first call, ended by ``close``) as ``python -m statestore_cli ARGS`` would
    run it: the command, its exit code, stdout and stderr. Importing Airflow's provider costs seconds of CPU
    in each new process."""

    def __init__(self, python: Path, env: dict[str, str], folder: Path) -> None:
        self.ops = AirflowOps(python, env, _STATESTORE, folder, name="statestore")

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        reply = self.ops({"args": list(args), "env": env or {}})
        assert isinstance(reply, dict)
        return subprocess.CompletedProcess(["statestore", *args], reply["code"], reply["stdout"], reply["stderr"])

    def close(self) -> None:
        self.ops.close()


class AirflowOps:
    """``script`` run on each call's JSON argument (the ops), as ``python -c SCRIPT OPS`` would run it, by one
    Airflow interpreter (started at the first call, ended by ``close``): starting Airflow takes seconds of CPU
    each time. Each call runs the script afresh, in an interpreter that has run it before, as a long-lived
    Airflow process (a worker, the API server) runs one request after another. Returns what the script's last
    line of stdout says (JSON)."""

    def __init__(self, python: Path, env: dict[str, str], script: str, folder: Path, name: str = "airflow-ops") -> None:
        self.python, self.env, self.script = python, env, script
        self.stderr_path = folder / f"{name}.stderr"
        self.proc: subprocess.Popen[str] | None = None

    def __call__(self, ops: object) -> Any:
        if self.proc is None:
            self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.stderr_path, "w") as stderr:
                self.proc = subprocess.Popen(
                    [str(self.python), "-c", _SERVE, self.script],
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(ops) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 300)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise AssertionError(f"Airflow's interpreter gave no answer:\n{self.stderr_path.read_text()}")
        reply = json.loads(line)
        assert "error" not in reply, f"{reply['error']}\n{self.stderr_path.read_text()}"
        return json.loads(reply["stdout"].strip().splitlines()[-1])

    def close(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
