"""What a walk through Airflow's REST API costs (``--api-url``): ``list --dag-id``, ``clean --dry-run``, ``clean``
and ``import`` (of the dag's keys) with --runs x --tasks task instances, beside the same commands on the database
behind the api-server.

    .venv/bin/python bench/api_walk.py                      # 100 runs x 100 tasks: 10,000 task instances
    .venv/bin/python bench/api_walk.py --quick              # 5 x 20
    .venv/bin/python bench/api_walk.py --concurrency 1,8,16
    .venv/bin/python bench/api_walk.py --rtt-ms 20          # the api-server 20 ms away, behind TLS (far_api.py)

Airflow 3.3.2 from the test suite's venv (``$STATESTORE_AIRFLOW_VENV``, else
``~/.cache/statestore-tests/airflow-3.3.2``; ``--airflow-python``): a SQLite database ``airflow db migrate`` made,
a dag of --tasks tasks, its --runs dag runs made by Airflow's own ``create_dagrun`` (their task instances finished:
success), one key per task instance (half of them expired) imported by statestore, and the api-server on
127.0.0.1 with the simple auth manager and --server-workers workers. Measured (median of --repeat): wall time,
peak RSS and the requests the command reports; the database's figures are the floor. No target: the figures are
for the operator's estimate (keys per second) and for the next change to compare against.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import generate
import harness
from far_api import serve_far
from harness import table
from measure import RSS_METHOD, median, run_process

DAG_ID = "etl_wide_daily"
PASSWORD = "bench-admin-password"


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, repeat=3, workdir=None, quick={"runs": 5, "tasks": 20, "repeat": 1})
    parser.add_argument("--runs", type=int, default=100, help="dag runs (100)")
    parser.add_argument("--tasks", type=int, default=100, help="tasks per run (100)")
    parser.add_argument("--concurrency", default="8", help="[state_store] api_concurrency values, comma-separated")
    parser.add_argument("--server-workers", type=int, default=1, help="the api-server's --workers (1)")
    parser.add_argument("--rtt-ms", type=float, default=0, help="put the api-server this far away, behind TLS")
    parser.add_argument("--airflow-python", type=Path, default=_venv_python(), help="Airflow 3.3.2's interpreter")
    args = harness.parse(parser, argv)
    if not args.airflow_python.exists():
        print(f"no Airflow venv at {args.airflow_python}: run the test suite once, or give --airflow-python")
        return 2
    with tempfile.TemporaryDirectory(prefix="statestore-api-bench-") as scratch:
        folder = Path(scratch)
        env, database = _airflow(args.airflow_python, folder, args.runs, args.tasks)
        _keys(database, args.runs, args.tasks, folder)
        port = _free_port()
        server = _serve(args.airflow_python, env, port, folder / "api-server.log", args.server_workers)
        far = None
        try:
            url, extra = f"http://127.0.0.1:{port}", {}
            if args.rtt_ms > 0:
                listen = _free_port()
                far, bundle = serve_far(folder, listen, port, args.rtt_ms)
                url = f"https://127.0.0.1:{listen}"
                extra = {"AIRFLOW__STATE_STORE__API_CA_BUNDLE": str(bundle)}
            rows = _measure(args, database, url, folder, f"http://127.0.0.1:{port}", extra)
        finally:
            if far is not None:
                far.kill()
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    instances = args.runs * args.tasks
    print(f"API walk, {args.runs} runs x {args.tasks} tasks = {instances:,} task instances, one key each;")
    away = f", {args.rtt_ms:g} ms away behind TLS" if args.rtt_ms > 0 else ""
    print(f"the api-server with {args.server_workers} worker(s){away}")
    print(f"(peak RSS: {RSS_METHOD})")
    print(table(["command", "through", "seconds", "keys/s", "requests", "peak MB"], rows, right={2, 3, 4, 5}))
    return 0


def _venv_python() -> Path:
    home = os.environ.get("STATESTORE_AIRFLOW_VENV", str(Path.home() / ".cache/statestore-tests/airflow-3.3.2"))
    return Path(home) / "bin" / "python"


def _airflow(python: Path, folder: Path, runs: int, tasks: int) -> tuple[dict[str, str], Path]:
    home, database = folder / "home", folder / "airflow.db"
    (home / "dags").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD}), encoding="utf-8")
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{database}",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET="statestore-bench-jwt-secret-0123456789",
        PYTHONWARNINGS="ignore",
    )
    (home / "dags" / "wide.py").write_text(_DAG.format(dag_id=DAG_ID, tasks=tasks), encoding="utf-8")
    for step in (["db", "migrate"], ["dags", "reserialize"]):
        subprocess.run([str(python), "-m", "airflow", *step], env=env, check=True, capture_output=True)
    subprocess.run([str(python), "-c", _RUNS, DAG_ID, str(runs)], env=env, check=True, capture_output=True)
    return env, database


_DAG = """
import pendulum
from airflow.sdk import dag, task


@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def wide():
    for i in range({tasks}):
        task(lambda: 1, task_id=f"t{{i:04d}}")()


wide()
"""

# Airflow's own create_dagrun makes each run's task instances; they are then marked finished (success), as a
# clean finds them once the runs are done.
_RUNS = """
import sys
from datetime import datetime, timedelta, timezone
from airflow.models.serialized_dag import SerializedDagModel
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState, TaskInstanceState
from airflow.utils.types import DagRunTriggeredByType, DagRunType

with create_session() as session:
    dag = SerializedDagModel.get_dag(sys.argv[1], session=session)
    start = datetime(2026, 8, 1, tzinfo=timezone.utc)
    for i in range(int(sys.argv[2])):
        when = start + timedelta(days=i)
        run = dag.create_dagrun(
            run_id=f"scheduled__{when.isoformat()}", logical_date=when, data_interval=(when, when), run_after=when,
            run_type=DagRunType.SCHEDULED, triggered_by=DagRunTriggeredByType.TEST, state=DagRunState.SUCCESS,
            session=session,
        )
        for ti in run.get_task_instances(session=session):
            ti.state = TaskInstanceState.SUCCESS
"""


def _keys(database: Path, runs: int, tasks: int, folder: Path) -> None:
    """One key per task instance, every other one expired, written by ``statestore import``."""
    import sqlite3

    with sqlite3.connect(database) as con:
        instances = con.execute("SELECT run_id, task_id FROM task_instance WHERE dag_id = ?", (DAG_ID,)).fetchall()
    assert len(instances) == runs * tasks, len(instances)
    now = datetime.now(UTC)
    lines = folder / "keys.jsonl"
    with open(lines, "w", encoding="utf-8") as out:
        for i, (run_id, task_id) in enumerate(sorted(instances)):
            expires = now + timedelta(days=-1 if i % 2 else 30)
            record = {
                "store": "task",
                "dag_id": DAG_ID,
                "run_id": run_id,
                "task_id": task_id,
                "map_index": -1,
                "key": "spark_application_id",
                "updated_at": (now - timedelta(days=2)).isoformat(),
                "expires_at": expires.isoformat(),
                "value": f"application_1764460800000_{i:04d}",
            }
            out.write(json.dumps(record) + "\n")
    env = generate.tool_env(folder / "tool-home")
    cmd = [generate.statestore_executable(), "--conn", f"sqlite:///{database}", "import", str(lines)]
    subprocess.run(cmd, env=env, check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(python: Path, env: dict[str, str], port: int, log: Path, workers: int) -> subprocess.Popen[bytes]:
    argv = [str(python), "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--workers", str(workers)]
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/version", timeout=2):
                return server
        except OSError:
            time.sleep(0.5)
    os.killpg(server.pid, signal.SIGTERM)
    raise SystemExit(f"the api-server did not start; see {log}")


def _token(url: str) -> str:
    body = json.dumps({"username": "admin", "password": PASSWORD}).encode()
    request = urllib.request.Request(f"{url}/auth/token", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(json.loads(answer.read())["access_token"])


def _measure(
    args: argparse.Namespace, database: Path, url: str, folder: Path, near: str, api_env: dict[str, str]
) -> list[list[str]]:
    env = {**generate.tool_env(folder / "tool-home"), **api_env}
    env["STATESTORE_API_TOKEN"] = _token(near)
    statestore = generate.statestore_executable()
    ways: list[tuple[str, list[str], dict[str, str]]] = [("database", ["--conn", f"sqlite:///{database}"], {})]
    for level in args.concurrency.split(","):
        concurrency = {"AIRFLOW__STATE_STORE__API_CONCURRENCY": level}
        ways.append((f"REST API, {level} at once", ["--api-url", url], concurrency))
    # Each command, and what puts the keys back as they were before each of its runs (a clean deletes the
    # expired ones, an import writes what a clear of the database deleted first); the set-up is not timed.
    on_db = [statestore, "--conn", f"sqlite:///{database}"]
    restore = [*on_db, "import", str(folder / "keys.jsonl")]
    commands: dict[str, tuple[list[str], list[str] | None]] = {
        "list --dag-id": (["list", "--dag-id", DAG_ID], None),
        "clean --dry-run": (["clean", "--dry-run"], None),
        "clean": (["clean"], restore),
        "import": (["import", str(folder / "keys.jsonl")], [*on_db, "clear", "--dag-id", DAG_ID, "--yes"]),
    }
    rows = []
    scratch = folder / "scratch"
    for name, (words, setup) in commands.items():
        for way, root, extra in ways:
            cmd = [statestore, *root, *words, "-o", "json"]
            samples = []
            for _ in range(args.repeat):
                if setup is not None:
                    subprocess.run(setup, env=env, check=True, capture_output=True)
                samples.append(run_process(cmd, env={**env, **extra}, scratch=scratch))
            seconds = median([s.seconds for s in samples])
            keys = _keys_shown(samples[-1].stdout)
            requests = _requests((scratch / "stderr.txt").read_text(encoding="utf-8"), samples[-1].stdout)
            peak = max(s.peak_rss_kb for s in samples) / 1024
            rows.append([name, way, f"{seconds:.2f}", f"{keys / seconds:,.0f}", requests, f"{peak:.0f}"])
            print(f"{name} through {way}: {seconds:.2f} s, {keys:,} keys, {requests} requests", file=sys.stderr)
    return rows


def _keys_shown(stdout: str) -> int:
    """The keys a command listed, would delete, deleted or imported, as its JSON says."""
    document = json.loads(stdout)
    if isinstance(document, list):
        return len(document)
    if "rows" in document:
        return len(document["rows"])
    return int(document["deleted"] if "deleted" in document else document["keys"])


def _requests(stderr: str, stdout: str) -> str:
    for line in stderr.splitlines():
        if "through the REST API:" in line:
            return line.rsplit(":", 1)[1].split()[0]
    document = json.loads(stdout)
    found = document.get("api_requests") if isinstance(document, dict) else None
    return "-" if found is None else f"{found:,}"


if __name__ == "__main__":
    sys.exit(main())
