"""clean --metrics-file: a Prometheus textfile written atomically on every run, failed and stopped ones too."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from cli_running import start_statestore
from metrics_files import read_metrics
from stores import sql

from statestore_cli import MetastoreBackend, TaskScope
from statestore_cli.backends.store import Store
from statestore_cli.db.database import make_engine
from statestore_cli.ops.metrics import CleanMetrics, CleanRecorder, read_last_success

PAST = datetime(2020, 1, 1, tzinfo=UTC)
P = "statestore_clean_"
FAMILIES = [
    f"{P}rows_deleted",
    f"{P}expired_rows_remaining",
    f"{P}batches",
    f"{P}duration_seconds",
    f"{P}exit_status",
    f"{P}last_run_timestamp_seconds",
    f"{P}last_success_timestamp_seconds",
]


def seed_expired(db_url: str, count: int, expired_at: datetime = PAST) -> None:
    backend = MetastoreBackend(make_engine(db_url))
    for i in range(count):
        backend.set(TaskScope("d", f"r{i % 3}", "t", i % 4 - 1), f"k{i:04}", "1", expires_at=expired_at)
    backend.set(TaskScope("d", "r0", "t"), "alive", "1", expires_at=datetime.now(UTC) + timedelta(days=1))
    backend.engine.dispose()


def rows(db_url: str) -> int:
    return sql(db_url, "SELECT count(*) FROM task_state_store")[0][0]


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_a_finished_clean_writes_every_family(cli, db_url, tmp_path):
    seed_expired(db_url, 12)
    seed_expired_recent = datetime.now(UTC) - timedelta(minutes=5)  # inside the grace window: stays
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("d", "r9", "t"), "retry_job_id", "1", expires_at=seed_expired_recent)
    backend.engine.dispose()
    metrics = tmp_path / "statestore_clean.prom"
    before = time.time()
    result = cli("clean", "--batch-size", "5", "--older-than", "1h", "--metrics-file", str(metrics), "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == 12
    values = read_metrics(metrics)
    assert list(values) == FAMILIES
    assert values[f"{P}rows_deleted"] == 12
    assert values[f"{P}batches"] == 3
    assert values[f"{P}expired_rows_remaining"] == 0  # the key in the grace window is not past the cutoff
    assert values[f"{P}exit_status"] == 0
    assert 0 <= values[f"{P}duration_seconds"] < 60
    assert before - 1 <= values[f"{P}last_run_timestamp_seconds"] <= time.time() + 1
    assert values[f"{P}last_success_timestamp_seconds"] == values[f"{P}last_run_timestamp_seconds"]
    assert rows(db_url) == 2


def test_the_file_is_replaced_whole_readable_by_others_and_no_temporary_file_is_left(cli, db_url, tmp_path):
    folder = tmp_path / "textfile_collector"
    folder.mkdir()
    metrics = folder / "statestore_clean.prom"
    metrics.write_text("old content\n")
    old_inode = metrics.stat().st_ino
    seed_expired(db_url, 2)
    assert cli("clean", "--metrics-file", str(metrics)).exit_code == 0
    assert [p.name for p in folder.iterdir()] == ["statestore_clean.prom"]
    assert metrics.stat().st_ino != old_inode  # a new file renamed over the old one, not rewritten in place
    assert stat.S_IMODE(metrics.stat().st_mode) == 0o644
    assert read_metrics(metrics)[f"{P}rows_deleted"] == 2


def test_a_failed_run_writes_its_exit_status_and_keeps_the_last_success(cli, db_url, tmp_path):
    metrics = tmp_path / "m.prom"
    seed_expired(db_url, 3)
    assert cli("clean", "--metrics-file", str(metrics)).exit_code == 0
    succeeded_at = read_metrics(metrics)[f"{P}last_success_timestamp_seconds"]
    gone = f"sqlite:///{tmp_path / 'missing' / 'airflow.db'}"
    failed = cli("clean", "--metrics-file", str(metrics), conn=gone)
    assert failed.exit_code == 3, failed.output
    assert failed.stderr.startswith("statestore: error: no state store at ")
    values = read_metrics(metrics)
    assert values[f"{P}exit_status"] == 3
    assert values[f"{P}rows_deleted"] == 0 and values[f"{P}batches"] == 0
    assert values[f"{P}expired_rows_remaining"] is None  # unknown: the family is there, without a sample
    assert values[f"{P}last_success_timestamp_seconds"] == succeeded_at
    assert values[f"{P}last_run_timestamp_seconds"] > succeeded_at


def test_a_failure_with_no_earlier_success_has_no_last_success_sample(cli, tmp_path):
    metrics = tmp_path / "m.prom"
    result = cli("clean", "--metrics-file", str(metrics), conn=f"sqlite:///{tmp_path / 'nope' / 'x.db'}")
    assert result.exit_code == 3
    values = read_metrics(metrics)
    assert values[f"{P}exit_status"] == 3 and values[f"{P}last_success_timestamp_seconds"] is None


def test_a_broken_config_is_a_failed_run_too(cli, db_url, tmp_path, monkeypatch):
    metrics = tmp_path / "m.prom"
    monkeypatch.setenv("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "lots")
    result = cli("clean", "--metrics-file", str(metrics))
    assert result.exit_code == 2, result.output
    assert read_metrics(metrics)[f"{P}exit_status"] == 2


def test_another_exclusive_clean_running_is_recorded(cli, db_url, tmp_path):
    import fcntl

    metrics = tmp_path / "m.prom"
    seed_expired(db_url, 2)
    with open(db_url.removeprefix("sqlite:///"), "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the lock a running --exclusive clean holds
        result = cli("clean", "--exclusive", "--metrics-file", str(metrics))
    assert result.exit_code == 3, result.output
    assert read_metrics(metrics)[f"{P}exit_status"] == 3
    assert rows(db_url) == 3


def test_max_runtime_records_exit_4_what_was_deleted_and_what_is_left(cli, db_url, tmp_path):
    metrics = tmp_path / "m.prom"
    seed_expired(db_url, 25)
    result = cli("clean", "--batch-size", "10", "--max-runtime", "0s", "--metrics-file", str(metrics))
    assert result.exit_code == 4, result.output
    values = read_metrics(metrics)
    assert (values[f"{P}exit_status"], values[f"{P}rows_deleted"], values[f"{P}batches"]) == (4, 10, 1)
    assert values[f"{P}expired_rows_remaining"] == 15
    assert values[f"{P}last_success_timestamp_seconds"] is None


def test_a_custom_backend_is_a_successful_run_with_nothing_deleted(cli, db_url, tmp_path, backends, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", f"{backends}.DictBackend")
    metrics = tmp_path / "m.prom"
    assert cli("clean", "--metrics-file", str(metrics)).exit_code == 0
    values = read_metrics(metrics)
    assert (values[f"{P}exit_status"], values[f"{P}rows_deleted"]) == (0, 0)
    assert values[f"{P}expired_rows_remaining"] is None


# -- refused before anything is deleted ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "where, problem",
    [
        ("missing/m.prom", "cannot be written: directory {tmp}/missing does not exist"),
        ("a_file/m.prom", "cannot be written: {tmp}/a_file is not a directory"),
        ("a_dir", "is a directory"),
    ],
)
def test_an_unwritable_metrics_path_is_refused_before_deleting(cli, db_url, tmp_path, where, problem):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "a_dir").mkdir()
    seed_expired(db_url, 3)
    result = cli("clean", "--metrics-file", str(tmp_path / where))
    assert result.exit_code == 2, result.output
    expected = problem.format(tmp=tmp_path)
    assert result.stderr == f"statestore: error: --metrics-file {tmp_path / where} {expected}\n"
    assert result.stdout == ""
    assert rows(db_url) == 4


@pytest.mark.parametrize(
    "args",
    [
        ("--metrics-label", "region=eu\udcff"),  # a byte the command line could not decode
        ("--older-than", "999999999d"),  # before the year 1
        ("--statement-timeout", "99999999d"),  # more than PostgreSQL takes
        ("--max-runtime", "soon"),
        ("--batch-size", "2147483648"),
    ],
    ids=["label-not-utf8", "older-than-overflow", "statement-timeout-overflow", "max-runtime", "batch-size"],
)
def test_a_bad_option_value_deletes_nothing_and_writes_no_metrics_file(cli, db_url, tmp_path, args):
    # Every option is checked before the run is recorded: a bad one is a usage error, not a failed clean.
    seed_expired(db_url, 3)
    result = cli("clean", "--metrics-file", str(tmp_path / "m.prom"), *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert rows(db_url) == 4
    assert [p.name for p in tmp_path.iterdir() if "prom" in p.name] == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_a_read_only_directory_is_refused_before_deleting(cli, db_url, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    seed_expired(db_url, 1)
    result = cli("clean", "--metrics-file", str(folder / "m.prom"))
    assert result.exit_code == 2 and "cannot be written: Permission denied" in result.stderr
    assert rows(db_url) == 2


def test_a_dry_run_refuses_a_metrics_file(cli, db_url, tmp_path):
    """A dry run deletes nothing: recording it would make a rehearsal look like a successful clean."""
    seed_expired(db_url, 1)
    result = cli("clean", "--dry-run", "--metrics-file", str(tmp_path / "m.prom"))
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: --metrics-file records what a clean deleted and a --dry-run deletes nothing; "
        "drop one of them\n"
    )
    assert not (tmp_path / "m.prom").exists()


# -- signals: a real process ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigterm_still_writes_the_metrics_file(db_url, tmp_path):
    path = db_url.removeprefix("sqlite:///")
    seed_expired(db_url, 1)
    with sqlite3.connect(path) as conn:
        run_id = conn.execute("SELECT dag_run_id FROM task_state_store LIMIT 1").fetchone()[0]
        conn.executemany(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at,"
            " expires_at) VALUES (?, 't', -1, ?, 'd', 'r', '1', '2020-01-01 00:00:00.000000', ?)",
            [(run_id, f"bulk{i}", "2020-01-01 00:00:00.000000") for i in range(60000)],
        )
    before = rows(db_url)
    metrics = tmp_path / "m.prom"
    proc = start_statestore(
        "--conn",
        db_url,
        "clean",
        "--batch-size",
        "20",
        "--metrics-file",
        str(metrics),
        "-o",
        "json",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while rows(db_url) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    deleted = json.loads(out)["deleted"]
    values = read_metrics(metrics)
    assert values[f"{P}exit_status"] == 143
    assert values[f"{P}rows_deleted"] == deleted and values[f"{P}batches"] == deleted // 20
    assert values[f"{P}expired_rows_remaining"] is None  # a signal asks for a quick exit: not counted


# -- the library ---------------------------------------------------------------------------------------------
def test_render_is_exact():
    metrics = CleanMetrics(
        exit_status=4,
        duration_seconds=12.3456,
        finished_at=1764460800.5,
        rows_deleted=10000,
        batches=1,
        expired_rows_remaining=None,
        last_success_timestamp_seconds=1764374400.0,
        labels={"database": "db.internal/airflow", "region": 'eu "west"\\1'},
    )
    labels = '{database="db.internal/airflow",region="eu \\"west\\"\\\\1"}'  # quote and backslash escaped
    assert metrics.render() == (
        "# HELP statestore_clean_rows_deleted Expired task keys the last clean deleted (committed batches, "
        "also when it stopped or failed).\n"
        "# TYPE statestore_clean_rows_deleted gauge\n"
        f"statestore_clean_rows_deleted{labels} 10000\n"
        "# HELP statestore_clean_expired_rows_remaining Expired task keys past the last clean's cutoff still in "
        "the store after it ran.\n"
        "# TYPE statestore_clean_expired_rows_remaining gauge\n"
        "# HELP statestore_clean_batches Batches the last clean committed.\n"
        "# TYPE statestore_clean_batches gauge\n"
        f"statestore_clean_batches{labels} 1\n"
        "# HELP statestore_clean_duration_seconds How long the last clean ran, in seconds.\n"
        "# TYPE statestore_clean_duration_seconds gauge\n"
        f"statestore_clean_duration_seconds{labels} 12.346\n"
        "# HELP statestore_clean_exit_status Exit code of the last clean: 0 done, 2 bad usage or config, "
        "3 operational failure, 4 stopped at --max-runtime, 130 SIGINT, 143 SIGTERM.\n"
        "# TYPE statestore_clean_exit_status gauge\n"
        f"statestore_clean_exit_status{labels} 4\n"
        "# HELP statestore_clean_last_run_timestamp_seconds When the last clean ended, in seconds since the "
        "Unix epoch.\n"
        "# TYPE statestore_clean_last_run_timestamp_seconds gauge\n"
        f"statestore_clean_last_run_timestamp_seconds{labels} 1764460800.500\n"
        "# HELP statestore_clean_last_success_timestamp_seconds When a clean last ended with exit status 0, in "
        "seconds since the Unix epoch.\n"
        "# TYPE statestore_clean_last_success_timestamp_seconds gauge\n"
        f"statestore_clean_last_success_timestamp_seconds{labels} 1764374400.000\n"
    )


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not metrics at all\n",
        f"{P}last_success_timestamp_seconds soon\n",
        f"{P}last_success_timestamp_seconds NaN\n",
    ],
)
def test_an_unreadable_previous_file_has_no_last_success(tmp_path, content):
    path = tmp_path / "m.prom"
    path.write_text(content)
    assert read_last_success(path) is None
    assert read_last_success(tmp_path / "absent.prom") is None


def test_the_recorder_counts_committed_batches_from_progress(tmp_path):
    """A clean that fails midway reports the batches it committed before it failed."""
    recorder = CleanRecorder(tmp_path / "m.prom", {"database": "airflow.db"})
    for done in (100, 200, 250, 250):  # the last call: the empty batch that ends the walk
        recorder.on_progress(done)
    written = recorder.finish(3)
    assert (written.rows_deleted, written.batches, written.exit_status) == (250, 3, 3)
    assert read_metrics(tmp_path / "m.prom")[f"{P}rows_deleted"] == 250


def test_a_metrics_file_that_cannot_be_written_at_the_end_is_an_operational_error(tmp_path):
    """The clean is done (its rows stay deleted), but the scheduler must hear that monitoring is stale."""
    from statestore_cli.errors import EXIT_OPERATIONAL, MetricsFileError

    folder = tmp_path / "collector"
    folder.mkdir()
    recorder = CleanRecorder(folder / "m.prom")  # writable when the clean started
    folder.rmdir()
    with pytest.raises(MetricsFileError, match=r"^cannot write metrics_file .*: No such file or directory$") as caught:
        recorder.finish(0)
    assert caught.value.exit_code == EXIT_OPERATIONAL


# -- the library's CleanRun: the clean and its file, sequenced without the CLI --------------------------------
def test_clean_run_records_a_failure_inside_it_and_nothing_after_the_clean(db_url, tmp_path):
    from statestore_cli.config.settings import load_settings
    from statestore_cli.errors import ConfigError
    from statestore_cli.ops.clean_run import CleanRun
    from statestore_cli.ops.cleanup import CleanControl
    from statestore_cli.ops.commands import CleanSkipped

    url = db_url
    seed_expired(url, 7)
    metrics = tmp_path / "m.prom"
    with pytest.raises(ConfigError), CleanRun(metrics, {"database": "airflow.db"}) as failed:
        raise ConfigError("the config file is broken")
    assert read_metrics(metrics, {"database": "airflow.db"})[f"{P}exit_status"] == ConfigError.exit_code
    assert failed.problems == [] and failed.unwritten is None

    settings = load_settings(conn_override=url)
    now = datetime.now(UTC)
    with pytest.raises(RuntimeError), CleanRun(metrics, {"database": "airflow.db"}) as run:
        report = run.clean(Store.open(settings), 3, now=now, control=CleanControl(), older_than=None)
        raise RuntimeError("the report could not be shown")  # after the clean: the file keeps its success
    values = read_metrics(metrics, {"database": "airflow.db"})
    assert not isinstance(report, CleanSkipped) and report.deleted == 7
    assert values[f"{P}exit_status"] == 0 and values[f"{P}rows_deleted"] == 7
    assert values[f"{P}batches"] == report.batches and values[f"{P}expired_rows_remaining"] == 0


def test_clean_run_without_a_metrics_file_is_the_clean_alone(db_url, tmp_path):
    from statestore_cli.config.settings import load_settings
    from statestore_cli.ops.clean_run import CleanRun
    from statestore_cli.ops.cleanup import CleanControl
    from statestore_cli.ops.commands import CleanSkipped

    url = db_url
    seed_expired(url, 4)
    heard: list[int] = []
    with CleanRun(None) as run:
        control = CleanControl(on_progress=heard.append)
        report = run.clean(
            Store.open(load_settings(conn_override=url)), 2, now=datetime.now(UTC), control=control, older_than=None
        )
    assert not isinstance(report, CleanSkipped) and report.deleted == 4
    assert heard[-1] == 4 and rows(url) == 1
    assert not list(tmp_path.glob("*.prom"))
