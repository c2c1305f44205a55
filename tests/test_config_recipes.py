"""The files operators deploy (config/): each is parsed as its tool parses it, and the command it holds
is run against a SQLite store of the test's own, with the paths the test controls put in for the
deployment's (the database URL, the metrics folder, the lock folder, the statestore executable)."""

from __future__ import annotations

import configparser
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from metrics_files import read_metrics
from paths import REPO
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.config import load_option_specs, load_settings
from statestore_cli.db.database import make_engine

CONFIG = REPO / "config"
EXPIRED_LONG_AGO = 4  # keys expired 3 days ago: past every recipe's --older-than 1d
EXIT_CODES_EXPLAINED = ("0", "2", "3", "4", "143")


# -- the store a recipe cleans, and how its command runs ----------------------------------------------------
@pytest.fixture
def store(db_url: str) -> str:
    """Expired keys of every age: long ago (deleted), an hour ago (kept: inside the 1-day grace), future."""
    now = datetime.now(UTC)
    backend = MetastoreBackend(make_engine(db_url))
    scope = TaskScope("etl_orders_daily", "scheduled__2026-11-30T00:00:00+00:00", "submit_spark_job")
    for i in range(EXPIRED_LONG_AGO):
        backend.set(scope, f"job_id_{i}", '"x"', expires_at=now - timedelta(days=3))
    backend.set(scope, "retry_needs_this", '"x"', expires_at=now - timedelta(hours=1))
    backend.set(scope, "alive", '"x"', expires_at=now + timedelta(days=1))
    backend.engine.dispose()
    return db_url


def left(db_url: str) -> set[str]:
    return {row[0] for row in sql(db_url, "SELECT {key} FROM task_state_store")}


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A folder with a `statestore` that runs this checkout, to put first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    shim = folder / "statestore"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m statestore_cli "$@"\n')
    shim.chmod(0o755)
    return folder


def base_env(bin_dir: Path, db_url: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", AIRFLOW_HOME=str(home))
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url  # as a Secret or an environment file provides it
    return env


def assert_cleaned(proc: subprocess.CompletedProcess[str], db_url: str, metrics: Path) -> dict[str, float | None]:
    assert proc.returncode == 0, proc.stderr
    assert left(db_url) == {"retry_needs_this", "alive"}
    values = read_metrics(metrics)
    assert values["statestore_clean_exit_status"] == 0
    assert values["statestore_clean_rows_deleted"] == EXPIRED_LONG_AGO
    assert values["statestore_clean_expired_rows_remaining"] == 0
    return values


def option_values(args: list[str]) -> dict[str, str]:
    """``--name value`` and ``--name=value`` pairs of a command line."""
    found = {}
    for i, arg in enumerate(args):
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
            found[name] = value
        elif arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("-"):
            found[arg] = args[i + 1]
    return found


def assert_clean_options(args: list[str]) -> str:
    """The options every recipe runs clean with; returns the metrics file path."""
    assert args[0] == "clean" and "--dry-run" not in args and "--exclusive" in args
    options = option_values(args)
    assert options["--older-than"] == "1d" and options["--max-runtime"] == "50m"
    assert int(options["--batch-size"]) > 0
    return options["--metrics-file"]


# -- config/airflow.cfg ----------------------------------------------------------------------------------------
def test_airflow_cfg_lists_every_option_with_its_default_and_a_comment():
    text = (CONFIG / "airflow.cfg").read_text(encoding="utf-8")
    parser = configparser.RawConfigParser(strict=True)
    parser.read_string(text)
    active = {(section, option): parser.get(section, option) for section in parser for option in parser[section]}
    # A secret (the database URL) is shown commented out, with its default: it comes from a secret store.
    commented = {}
    section = None
    for line in text.splitlines():
        if header := re.fullmatch(r"\[(\w+)\]", line):
            section = header.group(1)
        elif match := re.fullmatch(r"# (\w+) =(?: (.*))?", line):  # an empty default: nothing after the =
            commented[(section, match.group(1))] = match.group(2) or ""
    specs = {(spec.section, spec.option): spec for spec in load_option_specs()}
    assert set(active) | set(commented) == set(specs), "every option, and nothing else"
    assert not set(active) & set(commented)
    assert {key for key in commented} == {key for key, spec in specs.items() if spec.secret}
    for key, raw in {**active, **commented}.items():
        default = specs[key].default
        assert raw == str(default), key
    lines = text.splitlines()
    for key in active:  # each option has its own one-line comment right above it
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{key[1]} ="))
        assert lines[at - 1].startswith("# ") and len(lines[at - 1]) <= 120, key


def test_airflow_cfg_as_deployed_gives_the_defaults(tmp_path):
    settings = load_settings(config_path=CONFIG / "airflow.cfg", environ={"AIRFLOW_HOME": str(tmp_path)})
    defaults = load_settings(environ={"AIRFLOW_HOME": str(tmp_path)})
    for setting in settings:
        key = (setting.spec.section, setting.spec.option)
        assert setting.value == defaults.setting(*key).value, key
        expected_source = "default" if setting.spec.secret else f"file {CONFIG / 'airflow.cfg'}"
        assert setting.source == expected_source, key


# -- config/cron/statestore-clean -------------------------------------------------------------------------------
def parse_cron_d(path: Path) -> tuple[dict[str, str], list[str], str, str]:
    """An /etc/cron.d file: its variables, and its one entry's five time fields, user and command."""
    variables: dict[str, str] = {}
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if assignment := re.fullmatch(r"([A-Z_]+)=(.*)", line):
            variables[assignment.group(1)] = assignment.group(2)
            continue
        fields = line.split(None, 6)
        assert len(fields) == 7, f"5 time fields, a user and a command: {line!r}"
        entries.append(fields)
    [fields] = entries
    return variables, fields[:5], fields[5], fields[6]


def test_cron_entry_parses(tmp_path):
    variables, schedule, user, command = parse_cron_d(CONFIG / "cron" / "statestore-clean")
    ranges = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
    for field, (low, high) in zip(schedule, ranges, strict=True):
        assert field == "*" or low <= int(field) <= high, schedule
    assert user == "airflow" and variables["SHELL"] == "/bin/sh" and "AIRFLOW_HOME" in variables
    assert "%" not in command, "cron turns % into a newline"
    words = shlex.split(command)
    assert words[:2] == ["flock", "--nonblock"] and "timeout" in words
    clean_at = words.index("statestore")
    assert words[clean_at - 1] == "1h" and "--preserve-status" in words[:clean_at]
    assert_clean_options(words[clean_at + 1 : words.index(">/dev/null")])
    text = (CONFIG / "cron" / "statestore-clean").read_text()
    for code in EXIT_CODES_EXPLAINED:
        assert re.search(rf"#.*\b{code} ", text), code


@pytest.mark.slow
def test_cron_command_runs(store, bin_dir, tmp_path):
    variables, _, _, command = parse_cron_d(CONFIG / "cron" / "statestore-clean")
    collector, lock = tmp_path / "textfile_collector", tmp_path / "lock"
    collector.mkdir()
    lock.mkdir()
    command = command.replace("/var/lib/node_exporter/textfile_collector", str(collector))
    command = command.replace("/run/lock", str(lock))
    env = base_env(bin_dir, store, tmp_path / "home")
    env.update({k: v for k, v in variables.items() if k not in ("PATH", "AIRFLOW_HOME")})
    proc = subprocess.run([variables["SHELL"], "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert_cleaned(proc, store, collector / "statestore_clean.prom")
    assert proc.stdout == "" and proc.stderr == ""  # cron mails nothing after a good night
    # a second run while the first holds the host lock exits 1 (flock) and deletes nothing
    with open(lock / "statestore-clean.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        busy = subprocess.run([variables["SHELL"], "-c", command], env=env, capture_output=True, timeout=120)
    assert busy.returncode == 1


# -- config/kubernetes/cronjob.yaml ----------------------------------------------------------------------------
def load_cronjob() -> dict:
    return yaml.safe_load((CONFIG / "kubernetes" / "cronjob.yaml").read_text(encoding="utf-8"))


def test_cronjob_manifest_is_safe_to_schedule():
    cronjob = load_cronjob()
    assert (cronjob["apiVersion"], cronjob["kind"]) == ("batch/v1", "CronJob")
    spec = cronjob["spec"]
    assert len(spec["schedule"].split()) == 5
    assert spec["concurrencyPolicy"] == "Forbid"
    assert isinstance(spec["startingDeadlineSeconds"], int) and spec["startingDeadlineSeconds"] > 0
    job = spec["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    requests = container["resources"]["requests"]
    assert set(requests) >= {"cpu", "memory"}
    [env] = [e for e in container["env"] if e["name"] == "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert set(env) == {"name", "valueFrom"} and set(env["valueFrom"]["secretKeyRef"]) == {"name", "key"}
    # The Secret Airflow's Helm chart creates for its metadata database: <release>-airflow-metadata, key connection.
    secret = env["valueFrom"]["secretKeyRef"]
    assert secret["name"].endswith("-airflow-metadata") and secret["key"] == "connection", secret
    assert container["command"] == ["statestore"]
    metrics = Path(assert_clean_options(container["args"]))
    [mount] = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == metrics.parent]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert "persistentVolumeClaim" in volume, "a volume the collector shares, not the pod's own disk"
    # --max-runtime ends the clean well before Kubernetes sends SIGTERM
    assert job["activeDeadlineSeconds"] > 50 * 60
    text = (CONFIG / "kubernetes" / "cronjob.yaml").read_text()
    for code in EXIT_CODES_EXPLAINED:
        assert re.search(rf"#\s+{code}\s", text), f"exit code {code} explained in a comment"


@pytest.mark.slow
def test_cronjob_container_runs(store, bin_dir, tmp_path):
    [container] = load_cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    [mount] = container["volumeMounts"]
    volume = tmp_path / "metrics-volume"
    volume.mkdir()
    args = [arg.replace(mount["mountPath"], str(volume)) for arg in container["args"]]
    env = base_env(bin_dir, store, tmp_path / "home")  # the Secret's value, as the kubelet puts it there
    proc = subprocess.run(container["command"] + args, env=env, capture_output=True, text=True, timeout=120)
    assert_cleaned(proc, store, volume / "statestore_clean.prom")
    assert json.loads(proc.stdout)["deleted"] == EXPIRED_LONG_AGO  # the pod log: one JSON document


# -- config/systemd/ ---------------------------------------------------------------------------------------------
def read_unit(name: str) -> configparser.RawConfigParser:
    """A systemd unit file: sections and ``Key=value`` lines, keys case-sensitive, no duplicates."""
    parser = configparser.RawConfigParser(strict=True, delimiters=("=",), comment_prefixes=("#", ";"))
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((CONFIG / "systemd" / name).read_text(encoding="utf-8"))
    return parser


def test_systemd_units_parse():
    service, timer = read_unit("statestore-clean.service"), read_unit("statestore-clean.timer")
    assert service["Service"]["Type"] == "oneshot"
    assert service["Service"]["User"] == "airflow"
    assert service["Service"]["EnvironmentFile"].startswith("-/")  # the URL, kept out of the unit
    words = shlex.split(service["Service"]["ExecStart"])
    assert Path(words[0]).is_absolute() and Path(words[0]).name == "statestore"
    assert_clean_options(words[1:])
    assert service["Service"]["TimeoutStartSec"] == "1h"
    assert timer["Timer"]["Persistent"] == "true"
    assert timer["Install"]["WantedBy"] == "timers.target"
    assert "Unit" not in timer["Timer"], "the timer starts the service of its own name"
    text = (CONFIG / "systemd" / "statestore-clean.service").read_text()
    for code in EXIT_CODES_EXPLAINED:
        assert re.search(rf"#.*\b{code} ", text), code
    if shutil.which("systemd-analyze"):
        calendar = subprocess.run(
            ["systemd-analyze", "calendar", timer["Timer"]["OnCalendar"]], capture_output=True, text=True
        )
        assert calendar.returncode == 0, calendar.stderr


@pytest.mark.slow
def test_systemd_service_runs(store, bin_dir, tmp_path):
    service = read_unit("statestore-clean.service")["Service"]
    collector = tmp_path / "textfile_collector"
    collector.mkdir()
    executable, *args = shlex.split(service["ExecStart"])
    args = [arg.replace("/var/lib/node_exporter/textfile_collector", str(collector)) for arg in args]
    env = base_env(bin_dir, store, tmp_path / "home")  # EnvironmentFile= gives the URL
    assert service["Environment"].startswith("AIRFLOW_HOME=")  # the test's own home stands in for it
    proc = subprocess.run([str(bin_dir / Path(executable).name), *args], env=env, capture_output=True, text=True)
    assert_cleaned(proc, store, collector / "statestore_clean.prom")
    # the journal keeps both streams: the sentence (stderr, as stdout is not a terminal) and the records
    assert proc.stderr.startswith(f"deleted {EXPIRED_LONG_AGO} expired task keys in 1 batch of up to 10,000 ")
    assert f"deleted\t{EXPIRED_LONG_AGO}\n" in proc.stdout
