"""The metrics files as the real node-exporter serves them: files of several databases in one textfile
directory, every sample served with its labels and value, no scrape error, no series refused as a duplicate.

node-exporter (Debian's ``prometheus-node-exporter``, 1.5) runs on a free port of 127.0.0.1 with only its
textfile collector (the ``textfile_exporter`` fixture); the files are written by real ``statestore stats``
and ``statestore clean`` processes (``monitoring.monitored_databases``).
"""

from __future__ import annotations

import pytest
from cli_running import run_statestore_process
from metrics_files import read_samples
from monitoring import DUPLICATE, Server, http_get, monitored_databases, parse_exposition

from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.ops.commands import db_init

pytestmark = pytest.mark.slow  # node-exporter started for each test


def _ours(samples: dict) -> dict:
    return {name: found for name, found in samples.items() if name.startswith("statestore_")}


def test_node_exporter_serves_every_sample_of_every_file_of_every_database(textfile_exporter: Server, tmp_path):
    directory = tmp_path / "textfile"
    with monitored_databases(directory, tmp_path) as databases:
        served = parse_exposition(http_get(textfile_exporter.url("/metrics")))
    assert len({db.database for db in databases}) == len(databases) == 3

    expected: dict[str, dict] = {}
    helps: dict[str, str] = {}
    for db in databases:
        for path in db.files:
            for name, by_labels in read_samples(path).items():  # each file valid on its own
                for labels, value in by_labels.items():
                    assert {k: v for k, v in labels if k != "store"} == db.labels, (path, name, labels)
                    expected.setdefault(name, {})[labels] = value
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.startswith("# HELP "):
                    name, _, text = line[len("# HELP ") :].partition(" ")
                    helps[name] = text
    assert _ours(served.samples) == expected  # every sample, its labels and value; nothing else
    for name, text in helps.items():  # a family without a sample (a failed clean's) is not served at all
        if name in expected:
            assert (served.help[name], served.types[name]) == (text, "gauge"), name

    scrape_error = served.samples["node_textfile_scrape_error"]
    assert scrape_error == {(): 0.0}
    assert served.samples["promhttp_metric_handler_errors_total"][(("cause", "gathering"),)] == 0.0
    mtimes = served.samples["node_textfile_mtime_seconds"]
    assert {dict(labels)["file"] for labels in mtimes} == {str(path) for db in databases for path in db.files}
    log = textfile_exporter.log()
    assert DUPLICATE not in log and "level=error" not in log, log

    # What the files say is what happened: the stats before the clean, what the clean deleted.
    for db in databases:
        one = (("database", db.database), *((k, v) for k, v in db.labels.items() if k != "database"))
        key = tuple(sorted(one))
        assert served.samples["statestore_clean_exit_status"][key] == db.clean_exit
        if db.deleted is None:
            continue
        assert db.expired_before > 0 and db.deleted == db.expired_before + db.expired_dag_run
        assert served.samples["statestore_clean_rows_deleted"][key] == db.deleted
        assert served.samples["statestore_task_keys_expired"][key] == db.expired_before
        assert served.samples["statestore_clean_expired_rows_remaining"][key] == 0
    by_store = {
        (dict(labels)["database"], dict(labels)["store"]): value
        for labels, value in served.samples["statestore_clean_rows_deleted_by_store"].items()
    }
    [prod] = [db for db in databases if db.expired_dag_run]  # Airflow 3.4's layout: airflow.db only
    assert by_store == {("airflow.db", "task"): prod.expired_before, ("airflow.db", "dag_run"): prod.expired_dag_run}


def test_two_files_of_one_database_label_are_refused_until_a_label_tells_them_apart(textfile_exporter, tmp_path):
    """Two SQLite files both named airflow.db: the same series twice, which node-exporter refuses (and logs);
    ``--metrics-label database=NAME`` on one of them, as docs/operations.md says, and both are served."""
    directory = tmp_path / "textfile"
    urls = []
    for site in ("eu", "us"):
        (tmp_path / site).mkdir()
        urls.append(f"sqlite:///{tmp_path / site / 'airflow.db'}")
        db_init(Store.open(load_settings(conn_override=urls[-1]), create_file=True))

    def clean(url: str, name: str, *labels: str) -> None:
        flags = [arg for label in labels for arg in ("--metrics-label", label)]
        done = run_statestore_process("--conn", url, "clean", "--metrics-file", str(directory / name), *flags)
        assert done.exit_code == 0, done.output

    clean(urls[0], "eu.prom")
    clean(urls[1], "us.prom")
    served = parse_exposition(http_get(textfile_exporter.url("/metrics")))
    log = textfile_exporter.log()
    assert (
        DUPLICATE in log and 'statestore_clean_exit_status\\" { label:<name:\\"database\\" value:\\"airflow.db' in log
    )
    assert served.samples["node_textfile_scrape_error"] == {(): 0.0}  # the files themselves are fine

    clean(urls[1], "us.prom", "database=airflow-us")
    refused = log.count(DUPLICATE)
    served = parse_exposition(http_get(textfile_exporter.url("/metrics")))
    assert textfile_exporter.log().count(DUPLICATE) == refused  # nothing refused on this scrape
    # counted after the scrape it happened in: the first scrape's error, no other
    assert served.samples["promhttp_metric_handler_errors_total"][(("cause", "gathering"),)] == 1.0
    assert set(served.samples["statestore_clean_exit_status"]) == {
        (("database", "airflow.db"),),
        (("database", "airflow-us"),),
    }
