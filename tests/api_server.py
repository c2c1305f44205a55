"""Airflow 3.3.2's api-server on 127.0.0.1, for the tests of API mode (``--api-url``): a copy of the run's
migrated SQLite database, two dags serialized, a dag run of one made by Airflow's own ``create_dagrun`` (so the
run and its task instances, the mapped ones expanded, are Airflow's own; marked finished), the simple auth
manager with one user per role and known passwords.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from airflow_venv import airflow, airflow_env

# One user per role of the simple auth manager; the password is the user name backwards, twice.
USERS = ("admin", "viewer", "user", "op")
PASSWORDS = {user: user[::-1] * 2 for user in USERS}

DAGS = {
    "etl.py": """
import pendulum
from airflow.sdk import dag, task


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def etl_orders_daily():
    @task
    def load():
        return 1

    @task
    def shard(x):
        return x

    load()
    shard.expand(x=[1, 2, 3])


etl_orders_daily()
""",
    "assets.py": """
import pendulum
from airflow.sdk import Asset, dag, task

orders = Asset(name="orders", uri="s3://warehouse/orders.parquet")


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def orders_producer():
    @task(outlets=[orders])
    def write():
        return 1

    write()


orders_producer()
""",
}
DAG_ID = "etl_orders_daily"
RUN_ID = "scheduled__2026-11-30T00:00:00+00:00"
# The dag run as the scheduler would make it (Airflow's create_dagrun, which makes its task instances and expands
# the literal mapping), then finished: every task instance success.
_RUN = """
import sys
from datetime import datetime, timezone
from airflow.models.serialized_dag import SerializedDagModel
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState, TaskInstanceState
from airflow.utils.types import DagRunTriggeredByType, DagRunType

with create_session() as session:
    dag = SerializedDagModel.get_dag(sys.argv[1], session=session)
    when = datetime(2026, 11, 30, tzinfo=timezone.utc)
    run = dag.create_dagrun(
        run_id=sys.argv[2], logical_date=when, data_interval=(when, when), run_after=when,
        run_type=DagRunType.SCHEDULED, triggered_by=DagRunTriggeredByType.TEST, state=DagRunState.SUCCESS,
        session=session,
    )
    for ti in run.get_task_instances(session=session):
        ti.state = TaskInstanceState.SUCCESS
"""
ASSET_NAME, ASSET_URI = "orders", "s3://warehouse/orders.parquet"


class ApiServer(NamedTuple):
    url: str  # the root, e.g. http://127.0.0.1:PORT
    database: Path  # the SQLite file behind it
    run_id: str  # the dag run of DAG_ID that ``airflow dags test`` made
    asset_id: int
    log: Path

    @property
    def conn(self) -> str:
        return f"sqlite:///{self.database}"

    def token(self, user: str = "admin") -> str:
        """A token of ``user``, from the server's ``/auth/token``."""
        body = json.dumps({"username": user, "password": PASSWORDS[user]}).encode()
        request = urllib.request.Request(
            self.url + "/auth/token", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return str(json.loads(answer.read())["access_token"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/api/v2/version", timeout=2) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def api_server(python: Path, migrated: Path, folder: Path) -> Iterator[ApiServer]:
    """The api-server on a copy of ``migrated``, with the dags run once; stopped (its process group) at the end."""
    home = folder / "home"
    database = folder / "airflow.db"
    shutil.copyfile(migrated, database)
    env = airflow_env(home, f"sqlite:///{database}")
    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS), encoding="utf-8")
    env.update(
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(f"{user}:{user}" for user in USERS),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET="statestore-tests-jwt-secret-0123456789",
        AIRFLOW__API__SECRET_KEY="statestore-tests-secret",
    )
    for name, text in DAGS.items():
        (home / "dags" / name).write_text(text, encoding="utf-8")
    airflow(python, env, "dags", "reserialize")
    subprocess.run([str(python), "-c", _RUN, DAG_ID, RUN_ID], env=env, check=True, capture_output=True, timeout=300)
    with sqlite3.connect(database) as con:
        (run_id,) = con.execute("SELECT run_id FROM dag_run WHERE dag_id = ?", (DAG_ID,)).fetchone()
        (asset_id,) = con.execute("SELECT id FROM asset WHERE name = ?", (ASSET_NAME,)).fetchone()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = folder / "api-server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(python), "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while not _ready(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the api-server did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield ApiServer(url, database, str(run_id), int(asset_id), log)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
