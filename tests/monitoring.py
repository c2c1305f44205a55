"""The monitoring the metrics files are for, run for real: node-exporter's textfile collector and a Prometheus
scraping it (Debian's packages ``prometheus-node-exporter`` and ``prometheus``), each on a free port of
127.0.0.1 and stopped afterwards; and the files themselves, written by real ``statestore clean`` and
``statestore stats --metrics-file`` processes for several databases into one textfile directory.

Without a binary the tests that need it skip, except under CI=true (where .ci/run installs both packages
without starting their services) where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from airflow34 import add_runs
from airflow_schema import FIXTURES, HEAD_34, SQLITE_FIXTURES
from cli_running import run_statestore_process
from seeded_stores import REALISTIC_EXPIRED, realistic_keys, seed_realistic
from stores import isolated_database, sql

from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.ops.commands import db_init

# Where Debian's packages put them; override with these variables.
NODE_EXPORTER = os.environ.get("STATESTORE_TEST_NODE_EXPORTER", "/usr/bin/prometheus-node-exporter")
PROMETHEUS = os.environ.get("STATESTORE_TEST_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("STATESTORE_TEST_PROMTOOL", "/usr/bin/promtool")
DUPLICATE = "collected before with the same name and label values"  # what node-exporter logs for a series twice


def require_binary(path: str, package: str) -> str:
    """The binary at ``path`` (or of its name on PATH); skips the test without it (fails it under CI=true)."""
    found = path if os.access(path, os.X_OK) else shutil.which(Path(path).name)
    if found is None:
        message = (
            f"{Path(path).name} is not installed at {path} or on PATH; install it with: "
            f"apt-get install -y --no-install-recommends {package}"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


# -- servers on loopback -------------------------------------------------------------------------------------
# Plain HTTP to 127.0.0.1, never through a proxy the environment may name.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, **query: str) -> str:
    """The body of GET ``url`` (on 127.0.0.1) with ``query``; an HTTP error fails the test with its body."""
    assert url.startswith("http://127.0.0.1:"), url
    if query:
        url += "?" + urllib.parse.urlencode(query)
    try:
        with _LOOPBACK.open(url, timeout=20) as response:
            return response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        pytest.fail(f"GET {url}: HTTP {exc.code}: {exc.read().decode(errors='replace')[:2000]}")


class Server(NamedTuple):
    """A server process of ours on 127.0.0.1:``port``, what it writes to stderr in ``log``."""

    port: int
    log_path: Path
    proc: subprocess.Popen

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _serve(name: str, argv: Callable[[int], list[str]], log_path: Path) -> Iterator[Server]:
    """Start ``argv(port)`` on a free port (another one if that was taken meanwhile), wait until it accepts
    connections, stop it afterwards (SIGTERM, then SIGKILL) and wait for it: no process outlives the test."""
    for _attempt in range(3):
        port = _free_port()
        with log_path.open("w", encoding="utf-8") as log:
            proc = subprocess.Popen(argv(port), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            _stop(proc)
            said = log_path.read_text(errors="replace")
            if "address already in use" in said:
                continue  # someone took the port between our probe and its bind
            pytest.fail(f"{name} did not start on 127.0.0.1:{port}:\n{said[-3000:]}")
        try:
            yield Server(port, log_path, proc)
        finally:
            _stop(proc)
        return
    pytest.fail(f"{name} found no free port on 127.0.0.1")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@contextmanager
def node_exporter(directory: Path, log_path: Path) -> Iterator[Server]:
    """node-exporter with only its textfile collector, reading the ``*.prom`` files of ``directory``
    (the flags of version 1.5: ``--collector.disable-defaults --collector.textfile``)."""
    binary = require_binary(NODE_EXPORTER, "prometheus-node-exporter")

    def argv(port: int) -> list[str]:
        return [
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={directory}",
        ]

    with _serve("prometheus-node-exporter", argv, log_path) as server:
        yield server


@contextmanager
def prometheus(folder: Path, target: Server, rule_files: list[Path]) -> Iterator[Server]:
    """Prometheus scraping ``target``'s /metrics every second (job ``node``) and evaluating ``rule_files``
    every second, its configuration and storage in ``folder``."""
    binary = require_binary(PROMETHEUS, "prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": [f"127.0.0.1:{target.port}"]}]}],
    }
    (folder / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML

    def argv(port: int) -> list[str]:
        return [
            binary,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]

    with _serve("prometheus", argv, folder / "prometheus.log") as server:
        # It listens before its storage is open and answers 503 to queries until then: wait for /-/ready.
        deadline = time.monotonic() + 60
        while not _ready(server):
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus was not ready within 60 s:\n{server.log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield server


def _ready(server: Server) -> bool:
    try:
        with _LOOPBACK.open(server.url("/-/ready"), timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def query(server: Server, expression: str, at: float | None = None) -> list[dict[str, Any]]:
    """The instant vector ``expression`` evaluates to on the Prometheus ``server`` now (or at Unix time
    ``at``): its series."""
    when = {} if at is None else {"time": f"{at:.3f}"}
    answer = json.loads(http_get(server.url("/api/v1/query"), query=expression, **when))
    assert answer["status"] == "success", (expression, answer)
    assert answer["data"]["resultType"] == "vector", (expression, answer)
    return answer["data"]["result"]


# -- the exposition node-exporter serves ---------------------------------------------------------------------
Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


class Exposition(NamedTuple):
    samples: dict[str, dict[Labels, float]]  # sample name -> {its labels: value}
    help: dict[str, str]  # family name -> its HELP text
    types: dict[str, str]


def parse_exposition(text: str) -> Exposition:
    """A scrape's text, parsed by prometheus_client. A label with an empty value is left out: the textfile
    collector gives every sample of a family the labels any of them has, empty where it had none."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, dict[Labels, float]] = {}
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        helps[family.name] = family.documentation
        types[family.name] = family.type
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if v != ""))
            by_labels = samples.setdefault(sample.name, {})
            assert labels not in by_labels, f"{sample.name}{dict(labels)} served twice"
            by_labels[labels] = sample.value
    return Exposition(samples, helps, types)


# -- metrics files of several databases -----------------------------------------------------------------------
class Monitored(NamedTuple):
    """A database as monitoring sees it: its ``database`` label, the labels on all its samples, its files."""

    database: str
    labels: dict[str, str]
    files: list[Path]
    clean_exit: int
    deleted: int | None  # what the clean said it deleted (-o json); None when it failed
    expired_before: int  # the expired task keys stats counted before the clean
    expired_dag_run: int  # the expired dag-run keys there were (Airflow 3.4)


def airflow34_store(path: Path) -> tuple[str, int]:
    """An Airflow 3.4 SQLite file at ``path`` (a copy of the fixture) with the realistic store's keys
    (their runs and assets added first) and an expired dag-run key in every run: its URL and the number
    of those runs."""
    from statestore_cli import MetastoreBackend
    from statestore_cli.db.database import make_engine
    from statestore_cli.model.scopes import DagRunScope

    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / SQLITE_FIXTURES[HEAD_34], path)
    url = f"sqlite:///{path}"
    runs = sorted({(dag, run) for dag, run, *_ in realistic_keys()})
    add_runs(url, runs, datetime(2026, 11, 29, tzinfo=UTC))
    for name in ("s3://warehouse/orders/daily_partitions", "watermark"):  # Airflow makes assets, not we
        sql(
            url,
            'INSERT INTO asset (name, uri, "group", extra, created_at, updated_at) '
            "VALUES (:name, :name, 'asset', '{}', '2026-11-01 03:00:00', '2026-11-01 03:00:00')",
            name=name,
        )
        sql(url, "INSERT INTO asset_active (name, uri) VALUES (:name, :name)", name=name)
    seed_realistic(url)
    backend = MetastoreBackend(make_engine(url))
    try:
        for dag_id, run_id in runs:
            backend.set(DagRunScope(dag_id, run_id), "watermark", '"2026-11-30"', expires_at=REALISTIC_EXPIRED)
    finally:
        backend.engine.dispose()
    return url, len(runs)


def _monitor(url: str, directory: Path, name: str, database: str, labels: list[str], dag_run: int = 0) -> Monitored:
    """``stats --metrics-file`` then ``clean --metrics-file`` of ``url`` as the cron job runs them (real
    processes), into ``directory``/NAME-stats.prom and NAME-clean.prom."""
    own = dict(label.split("=", 1) for label in labels)
    flags = [arg for label in labels for arg in ("--metrics-label", label)]
    stats_file, clean_file = directory / f"{name}-stats.prom", directory / f"{name}-clean.prom"
    stats = run_statestore_process("--conn", url, "stats", "--metrics-file", str(stats_file), *flags)
    assert stats.exit_code == 0, stats.output
    clean = run_statestore_process(
        "--conn", url, "clean", "--batch-size", "3", "--metrics-file", str(clean_file), "-o", "json", *flags
    )
    assert clean.exit_code == 0, clean.output
    deleted = json.loads(clean.stdout)["deleted"]
    expired = sum(1 for *_, expires_at in realistic_keys() if expires_at == REALISTIC_EXPIRED)
    return Monitored(database, {"database": database, **own}, [stats_file, clean_file], 0, deleted, expired, dag_run)


@contextmanager
def monitored_databases(directory: Path, tmp_path: Path) -> Iterator[list[Monitored]]:
    """The metrics files of three databases in ``directory``, each with expired keys when its stats ran:
    an Airflow 3.4 SQLite file ``airflow.db`` (dag-run keys too; labelled region and cluster by
    ``--metrics-label``), a PostgreSQL store (its default label, host and database name), and a clean that
    failed (exit 3: its SQLite file ``reporting.db`` does not exist), which writes its file all the same."""
    sqlite_url, runs = airflow34_store(tmp_path / "prod" / "airflow.db")
    found = [_monitor(sqlite_url, directory, "prod", "airflow.db", ["region=eu-west-1", "cluster=prod"], runs)]
    with isolated_database("postgresql", tmp_path) as pg_url:
        db_init(Store.open(load_settings(conn_override=pg_url), create_file=True))
        seed_realistic(pg_url)
        from sqlalchemy.engine import make_url

        parsed = make_url(pg_url)
        label = f"{parsed.host}{'' if parsed.port is None else f':{parsed.port}'}/{parsed.database}"
        found.append(_monitor(pg_url, directory, "pg", label, []))
        missing = tmp_path / "reporting.db"
        failed = directory / "reporting-clean.prom"
        clean = run_statestore_process("--conn", f"sqlite:///{missing}", "clean", "--metrics-file", str(failed))
        assert clean.exit_code == 3 and "no state store at" in clean.stderr, clean.output
        found.append(Monitored("reporting.db", {"database": "reporting.db"}, [failed], 3, None, 0, 0))
        yield found
