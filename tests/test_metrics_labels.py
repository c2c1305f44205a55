"""Metrics file labels: every sample names its database (from the URL, never its user or password) and
the operator's ``--metrics-label NAME=VALUE``; a bad label writes nothing."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_running import statestore_argv
from metrics_files import read_metrics, read_samples
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.backends.store import Store
from statestore_cli.db.database import make_engine
from statestore_cli.ops.metrics import database_label

P = "statestore_clean_"
PAST = datetime(2020, 1, 1, tzinfo=UTC)


def _seed_expired(url: str) -> None:
    backend = MetastoreBackend(make_engine(url))
    try:
        backend.set(TaskScope("d", "r", "t"), "k", "1", expires_at=PAST)
    finally:
        backend.engine.dispose()


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_every_sample_names_its_database_and_the_operators_labels(cli, db_url, tmp_path):
    metrics = tmp_path / "statestore_clean.prom"
    args = ("--metrics-label", "region=eu-west-1", "--metrics-label", "cluster=c1")
    assert cli("clean", "--metrics-file", str(metrics), *args).exit_code == 0
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        database = Path(url.database or "").name
    else:
        database = f"{url.host}{'' if url.port is None else f':{url.port}'}/{url.database}"
    values = read_metrics(metrics, {"database": database, "region": "eu-west-1", "cluster": "c1"})
    assert values[f"{P}exit_status"] == 0
    text = metrics.read_text()
    for secret in (url.username, url.password):
        if secret:
            assert f'"{secret}' not in text and f"{secret}@" not in text


@pytest.mark.parametrize(
    ("url", "label"),
    [
        ("postgresql+psycopg://airflow:s3cret@db.internal/airflow", "db.internal/airflow"),
        ("mysql+mysqldb://root:pw@10.0.0.5:3307/airflow_prod?charset=utf8mb4", "10.0.0.5:3307/airflow_prod"),
        ("postgresql://airflow@/airflow", "localhost/airflow"),
        ("sqlite:////var/lib/airflow/airflow.db", "airflow.db"),
        ("sqlite://", "memory"),
    ],
)
def test_the_default_database_label_is_host_and_database_never_a_user_or_password(url, label):
    assert database_label(url) == label


def test_the_operator_can_name_the_database_themselves(cli, db_url, tmp_path):
    metrics = tmp_path / "m.prom"
    assert cli("clean", "--metrics-file", str(metrics), "--metrics-label", "database=prod").exit_code == 0
    assert read_metrics(metrics, {"database": "prod"})[f"{P}exit_status"] == 0


@pytest.mark.parametrize(
    ("labels", "wrong"),
    [
        (["region"], "is not NAME=VALUE"),
        (["1region=eu"], "bad label name '1region'"),
        (["re-gion=eu"], "bad label name 're-gion'"),
        (["__name__=x"], "reserved"),
        (["store=x"], "store families"),
        (["database=a", "database=b"], "'database' a second time"),
        (["region=eu", "region=us"], "'region' a second time"),
        (["region=eu\nwest"], "line break"),
    ],
)
def test_a_bad_label_is_one_line_exit_2_and_nothing_written_or_deleted(cli, db_url, tmp_path, labels, wrong):
    _seed_expired(db_url)
    metrics = tmp_path / "m.prom"
    args = [arg for label in labels for arg in ("--metrics-label", label)]
    result = cli("clean", "--metrics-file", str(metrics), *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("statestore: error: --metrics-label ") and wrong in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not metrics.exists() and list(tmp_path.glob(".m.prom.*")) == []
    assert sql(db_url, "SELECT count(*) FROM task_state_store")[0][0] == 1  # nothing deleted


@pytest.mark.slow
def test_a_label_that_is_not_utf8_on_the_command_line_is_refused_before_anything_is_deleted(db_url, tmp_path):
    # A byte the command line cannot decode arrives as a surrogate escape, which passed the name checks
    # and failed only when the file was written, after the clean had deleted.
    _seed_expired(db_url)
    metrics = tmp_path / "m.prom"
    argv = statestore_argv("--conn", db_url, "clean", "--metrics-file", str(metrics))
    done = subprocess.run([*argv, "--metrics-label", b"region=eu\xff"], capture_output=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        b"statestore: error: --metrics-label 'region=eu\\udcff' has a value that is not valid UTF-8; "
        b"pass it as UTF-8 text\n"
    )
    assert not metrics.exists() and list(tmp_path.glob(".m.prom.*")) == []
    assert sql(db_url, "SELECT count(*) FROM task_state_store")[0][0] == 1  # nothing deleted


def test_a_file_name_that_is_not_utf8_makes_a_label_the_metrics_file_can_hold():
    # A SQLite file's undecodable bytes (surrogate escapes) would fail the UTF-8 write after the clean.
    label = database_label("sqlite:////var/lib/store\udcff.db")
    assert label.encode("utf-8", "backslashreplace") == "store\ufffd.db".encode()  # a report xdist can send


def test_a_label_without_a_metrics_file_is_refused(cli, db_url):
    _seed_expired(db_url)
    result = cli("clean", "--metrics-label", "region=eu")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: --metrics-label labels the samples of --metrics-file; give --metrics-file PATH too\n"
    )
    assert sql(db_url, "SELECT count(*) FROM task_state_store")[0][0] == 1


def test_files_of_two_databases_in_one_textfile_directory_hold_distinct_series(tmp_path):
    """node-exporter reads every *.prom of its directory as one exposition and refuses a series twice."""
    from cli_running import run_cli

    from statestore_cli.config import load_settings
    from statestore_cli.ops.commands import db_init

    collector = tmp_path / "textfile"
    collector.mkdir()
    for name in ("orders", "billing"):
        url = f"sqlite:///{tmp_path / f'{name}.db'}"
        db_init(Store.open(load_settings(conn_override=url), create_file=True))
        _seed_expired(url)
        assert run_cli("clean", "--metrics-file", str(collector / f"{name}.prom"), conn=url).exit_code == 0
    series = []
    for path in sorted(collector.glob("*.prom")):
        read_samples(path)  # each valid on its own
        for family in text_string_to_metric_families(path.read_text()):
            series += [(s.name, tuple(sorted(s.labels.items()))) for s in family.samples]
    assert len(series) == 14 and len(set(series)) == len(series)
    assert {dict(labels)["database"] for _name, labels in series} == {"orders.db", "billing.db"}


@pytest.mark.slow
def test_a_conn_that_is_not_utf8_is_refused_before_a_store_is_made(tmp_path):
    # A file name's undecodable bytes made `db init` create the store, then fail rendering its URL
    # (`unexpected UnicodeEncodeError`, exit 3); every option value is now taken as UTF-8 text or refused.
    folder = tmp_path / "stores"
    folder.mkdir()
    conn = b"sqlite:///" + bytes(folder) + b"/store\xff.db"
    done = subprocess.run(
        [*statestore_argv("--conn"), conn, "db", "init"], capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    shown = (b"sqlite:///" + bytes(folder) + b"/store\\udcff.db").decode()
    assert done.stderr.decode() == (
        f"statestore: error: --conn: invalid value '{shown}' for [database] sql_alchemy_conn: expected a "
        "SQLAlchemy URL such as sqlite:////path/airflow.db, as UTF-8 text\n"
    )
    assert list(folder.iterdir()) == []
