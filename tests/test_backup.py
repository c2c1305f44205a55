"""``clean``, ``clear`` and ``assets sweep`` with ``--backup FILE``: what they delete is in FILE, in the export
format, each batch on disk before it commits, so ``statestore import FILE`` puts back exactly what went: after
a whole run, after ``--max-runtime``, SIGTERM, Ctrl-C, SIGKILL or a lost connection midway, on every engine.

Restores are checked with ``export``: the store's export after the restore is the one before the delete,
byte for byte (every field export carries: scope, key, ``updated_at``, ``expires_at``, the value).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from backups import (
    DAG,
    EXPIRED_AT,
    NOW,
    RUN,
    TASK,
    export,
    lines_of,
    long_key,
    records,
    restore,
    seed,
    seed_bulk,
    start_clean,
    task_lines,
    task_rows,
)
from cli_running import run_cli
from faults import kill_session, named_session, row_locked
from metrics_files import read_metrics
from sqlalchemy import event, select
from stores import sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine
from statestore_cli.db.engines import impl_of
from statestore_cli.db.layout import layout_of
from statestore_cli.model.timestamps import iso_utc
from statestore_cli.ops import export_lines
from statestore_cli.ops.backup_file import BackupFile
from statestore_cli.ops.cleanup import delete_expired
from statestore_cli.ops.records import encode_line, is_json, printable, task_record

ALL_ENGINES = True
SERVERS = ("postgresql", "mariadb")
WORKER = "AIRFLOW__WORKERS__STATE_STORE_BACKEND"


# -- clean: whole runs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", ["0", "5"])
def test_clean_backup_then_import_restores_exactly_what_was_deleted(db_url, tmp_path, batch):
    seed(db_url)
    before = export(db_url)
    backup = tmp_path / "clean.jsonl"
    result = run_cli("clean", "--batch-size", batch, "--exclusive", "--backup", str(backup), "-o", "json", conn=db_url)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["deleted"], report["backup"]) == (12, {"file": str(backup), "lines": 12})
    # The backup's lines are the export's lines of the rows the clean deleted, as JSON.
    assert records(lines_of(backup)) == records(task_lines(before))
    assert task_lines(export(db_url)) == []
    restored = restore(db_url, backup)
    assert "task keys: 12 inserted, 0 updated" in restored.stderr
    assert export(db_url) == before


def test_lines_the_database_builds_are_the_export_lines(db_url, tmp_path):
    """Keys, ids and values with what a terminal acts on (bidi overrides, DEL), quotes, backslashes and
    line breaks: the lines of a clean's backup read as the export's, and are as safe to print."""
    seed(db_url, expired=0, live=0)
    backend = MetastoreBackend(make_engine(db_url))
    odd = 'job "id"\\ \u202e\x7f \u00e9\u2028'
    backend.set(TaskScope(DAG, RUN, odd), odd, '{"a": "line\\nbreak", "b": [1.5, true]}', expires_at=EXPIRED_AT)
    backend.set(TaskScope(DAG, RUN, TASK), "spaced", '{\n  "a": 1,\r\n  "b": "\\u00e9"\n}', expires_at=EXPIRED_AT)
    backend.engine.dispose()
    before = export(db_url)
    backup = tmp_path / "clean.jsonl"
    assert run_cli("clean", "--batch-size", "10", "--backup", str(backup), conn=db_url).exit_code == 0
    text = backup.read_text(encoding="utf-8")
    assert "\u202e" not in text and "\x7f" not in text and len(lines_of(backup)) == 2
    assert records(lines_of(backup)) == records([line for line in before if json.loads(line)["store"] == "task"])
    restore(db_url, backup)
    assert export(db_url) == before


@pytest.mark.parametrize("batch", ["0", "2"])
def test_a_backup_line_is_the_export_line_byte_for_byte(db_url, tmp_path, batch):
    """Where the stored value is JSON as export writes it, each line of a backup is export's line of that key,
    byte for byte: tabs, backslashes and the text ``\\N`` in ids (which PostgreSQL's COPY text escapes), a tab
    in the value, microseconds with trailing zeros, a key that never expires (``clear`` deletes it too)."""
    seed(db_url, expired=0, live=0)
    backend = MetastoreBackend(make_engine(db_url))
    odd = 'a\tb "c" \\N d\\e é \x01\x08\x0b\x0c'  # and control characters JSON escapes
    backend.set(TaskScope(DAG, odd, odd, 3), odd, json.dumps({"tab": "x\ty", "n": "\\N"}, ensure_ascii=False))
    listed = json.dumps([1.5, None, "é"], ensure_ascii=False)
    backend.set(TaskScope(DAG, RUN, TASK), long_key(1), listed, expires_at=EXPIRED_AT)
    backend.set(TaskScope(DAG, RUN, TASK), long_key(2), "{}", expires_at=EXPIRED_AT)
    backend.engine.dispose()
    moment = datetime(2026, 11, 30, 1, 2, 3, 123400, tzinfo=UTC)
    if not db_url.startswith("postgresql"):  # naive UTC, on SQLite in Airflow's text form
        moment = moment.replace(tzinfo=None)
    stored = moment.strftime("%Y-%m-%d %H:%M:%S.%f") if db_url.startswith("sqlite") else moment
    sql(db_url, "UPDATE task_state_store SET updated_at = :t WHERE {key} <> :k", t=stored, k=long_key(2))
    before = [line for line in export(db_url) if json.loads(line)["store"] == "task"]
    assert '"updated_at": "2026-11-30T01:02:03.123400+00:00"' in before[0]
    backup = tmp_path / "clear.jsonl"
    result = run_cli("clear", "--dag-id", DAG, "--batch-size", batch, "--backup", str(backup), "--yes", conn=db_url)
    assert result.exit_code == 0, result.output
    assert sorted(lines_of(backup)) == sorted(before)
    restore(db_url, backup)
    assert [line for line in export(db_url) if json.loads(line)["store"] == "task"] == before


def test_every_engine_reads_a_timestamp_in_the_one_stored_form(db_url):
    """A backed-up delete reads its timestamps as Airflow's SQLite text form in UTC on every engine (what the lines
    are made from a chunk at a time): microseconds always six digits, a zero fraction too, the instant kept."""
    seed(db_url, expired=0, live=0)
    backend = MetastoreBackend(make_engine(db_url))
    moments = [datetime(2026, 11, 30, 1, 2, 3, 123400, tzinfo=UTC), datetime(2026, 12, 1, 23, 59, 59, tzinfo=UTC)]
    for n, moment in enumerate(moments):
        backend.set(TaskScope(DAG, RUN, TASK), long_key(n), "1", expires_at=moment)
    with backend.engine.connect() as conn:
        impl = impl_of(conn)
        table = layout_of(conn).task
        stored = select(impl.stored_moment(table.c.expires_at)).order_by(table.c.expires_at)
        read = conn.execute(stored).scalars().all()
    backend.engine.dispose()
    assert read == ["2026-11-30 01:02:03.123400", "2026-12-01 23:59:59.000000"]
    assert export_lines.moments(read) == ['"2026-11-30T01:02:03.123400+00:00"', '"2026-12-01T23:59:59+00:00"']


def _chunk_lines(rows: list[tuple], checked: bool = True) -> str | None:
    """The lines ``export_lines`` makes of a chunk of task rows (id, then the task columns), with the engine's
    JSON check of each value beside it (``checked``) or each checked here."""
    shape = export_lines.task_shape(False, checked)
    return export_lines.block([(*row, int(is_json(row[-1]))) if checked else row for row in rows], shape)


@pytest.mark.parametrize("checked", [True, False])
def test_a_chunk_of_rows_makes_the_export_line_of_each(checked):
    """A chunk of rows is made into lines a column at a time: each the export's line of its key, byte for byte,
    whatever the chunk mixes (a fraction of zero, which export leaves out; no expiry; ids that JSON escapes beside
    plain ones; a line break in a value, made a space)."""
    stamps = [f"2026-11-30 01:02:{n % 60:02d}.{(n * 7919) % 1000000:06d}" for n in range(30)]
    stamps[3] = "2026-11-30 01:02:03.000000"
    odd = 'a\tb "c" \\ é \x01\u202e'
    rows = [
        (
            n,
            "dag",
            f"run_{n}",
            odd if n % 7 == 0 else "task",
            n - 1,
            f"key {n}",
            stamps[n],
            stamps[-n] if n % 5 else None,
            json.dumps({"n": n, "s": "é"}, ensure_ascii=False),
        )
        for n in range(1, 30)
    ]
    rows[10] = (*rows[10][:-1], '{"a":\r\n 1}')

    def export_line(row: tuple) -> str:
        _, dag, run, task, index, key, updated, expires, value = row
        expiry = None if expires is None else iso_utc(expires)
        return encode_line(task_record(dag, run, task, None, index, key, iso_utc(updated), expiry, json.loads(value)))

    made = _chunk_lines(rows, checked)
    assert made is not None and made.endswith("\n")
    expected = [export_line(row) for row in rows]
    expected[10] = expected[10].replace('{"a": 1}', '{"a":   1}')  # the value as stored, its line break a space
    assert printable(made).split("\n")[:-1] == expected
    assert '"updated_at": "2026-11-30T01:02:03+00:00"' in made
    assert _chunk_lines([], checked) == ""


@pytest.mark.parametrize(
    ("place", "field"),
    [
        (6, "2026-11-30T01:02:03+00:00"),  # a timestamp in another text form
        (6, "2026-11-30 01:02:03"),
        (7, "2026-11-30 01:02:03.1234567"),
        (6, "\uff12026-11-30 01:02:03.000000"),  # a digit that is not an ASCII one (a fullwidth 2)
        (8, "{not json"),
        (8, "NaN"),
        (8, 5),  # a value that is not text (a column without TEXT affinity would keep a number)
        (2, 7),  # a number where text belongs
        (4, "1"),  # text where the map index belongs
    ],
)
@pytest.mark.parametrize("checked", [True, False])
def test_a_chunk_with_a_field_in_another_form_makes_no_lines(place, field, checked):
    """None: each row's line is then made from its record (export's way), which reads any form."""
    row = (1, "dag", "run", "task", -1, "key", "2026-11-30 01:02:03.000001", None, "1")
    assert _chunk_lines([row], checked) is not None
    odd = (*row[:place], field, *row[place + 1 :])
    valid = isinstance(odd[-1], str) and is_json(odd[-1])
    rows = [(*row, 1), (*odd, int(valid))] if checked else [row, odd]
    assert export_lines.block(rows, export_lines.task_shape(False, checked)) is None


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_sqlite_timestamp_in_another_text_form_is_backed_up_too(db_url, tmp_path):
    """Airflow writes YYYY-MM-DD HH:MM:SS.ffffff; a row another writer left as ISO text or without the fraction
    has its line made in Python, and reads back as the same instant."""
    seed(db_url, expired=3, live=0)
    sql(db_url, "UPDATE task_state_store SET expires_at = '2026-11-01 00:00:00' WHERE {key} = :k", k=long_key(1))
    sql(db_url, "UPDATE task_state_store SET updated_at = '2026-11-01T00:00:00+00:00' WHERE {key} = :k", k=long_key(2))
    backup = tmp_path / "clean.jsonl"
    assert run_cli("clean", "--batch-size", "2", "--backup", str(backup), conn=db_url).exit_code == 0
    saved = {json.loads(line)["key"]: json.loads(line) for line in lines_of(backup)}
    assert saved[long_key(1)]["expires_at"] == "2026-11-01T00:00:00+00:00"
    assert saved[long_key(2)]["updated_at"] == "2026-11-01T00:00:00+00:00"
    restore(db_url, backup)
    assert task_rows(db_url) == 3


def test_clean_older_than_backs_up_only_what_it_deletes(db_url, tmp_path):
    seed(db_url, expired=0, live=0)
    backend = MetastoreBackend(make_engine(db_url))
    for i, age in enumerate((timedelta(days=2), timedelta(hours=1), timedelta(days=5), timedelta(minutes=5))):
        backend.set(TaskScope(DAG, RUN, TASK, i), long_key(i), json.dumps({"i": i}), expires_at=NOW - age)
    backend.engine.dispose()
    before = export(db_url)
    backup = tmp_path / "older.jsonl"
    result = run_cli("clean", "--older-than", "1d", "--backup", str(backup), "-o", "json", conn=db_url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == 2
    saved = [json.loads(line) for line in backup.read_text(encoding="utf-8").split("\n")[:-1]]
    assert sorted(record["map_index"] for record in saved) == [0, 2]  # expired 2 and 5 days ago
    assert [json.loads(line)["map_index"] for line in task_lines(export(db_url))] == [1, 3]
    restore(db_url, backup)
    assert export(db_url) == before


def test_clean_backup_with_metrics_file(db_url, tmp_path):
    seed(db_url)
    metrics = tmp_path / "statestore_clean.prom"
    backup = tmp_path / "clean.jsonl"
    args = ("clean", "--batch-size", "4", "--metrics-file", str(metrics), "--backup", str(backup))
    result = run_cli(*args, conn=db_url)
    assert result.exit_code == 0, result.output
    figures = read_metrics(metrics)
    assert (figures["statestore_clean_rows_deleted"], figures["statestore_clean_batches"]) == (12, 3)
    assert figures["statestore_clean_exit_status"] == 0
    assert len(backup.read_text(encoding="utf-8").split("\n")[:-1]) == 12


def test_clean_max_runtime_backs_up_the_committed_batch_and_the_rerun_the_rest(db_url, tmp_path):
    seed(db_url)
    before = export(db_url)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    stopped = run_cli(
        "clean", "--batch-size", "5", "--max-runtime", "0s", "--backup", str(first), "-o", "json", conn=db_url
    )
    assert stopped.exit_code == 4, stopped.output
    report = json.loads(stopped.stdout)
    assert (report["deleted"], report["stopped"], report["backup"]["lines"]) == (5, "max_runtime", 5)
    finished = run_cli("clean", "--batch-size", "5", "--backup", str(second), "-o", "json", conn=db_url)
    assert json.loads(finished.stdout)["backup"]["lines"] == 7
    restore(db_url, first)
    restore(db_url, second)
    assert export(db_url) == before


def test_nothing_to_clean_leaves_an_empty_backup(db_url, tmp_path):
    seed(db_url, expired=0)
    backup = tmp_path / "empty.jsonl"
    result = run_cli("clean", "--backup", str(backup), conn=db_url)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == f"backup {backup} is empty: nothing was deleted"
    assert backup.read_bytes() == b""
    imported = run_cli("import", str(backup), conn=db_url)
    assert imported.exit_code == 0 and imported.stderr.startswith("imported 0 keys from "), imported.output


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_summary_names_the_file_and_the_restore_command(db_url, tmp_path):
    seed(db_url)
    backup = tmp_path / "clean-2026-11-30.jsonl"
    result = run_cli("clean", "--batch-size", "5", "--backup", str(backup), conn=db_url)
    assert result.exit_code == 0, result.output
    summary, saved, how = result.stderr.splitlines()
    assert re.fullmatch(r"deleted 12 expired task keys in 3 batches of up to 5 \(expired before .+\) in .+", summary)
    restore_command = f"statestore --conn {db_url} import {backup}"
    assert (saved, how) == (f"backed up 12 deleted keys to {backup}", f"restore them with: {restore_command}")
    plain = dict(line.split("\t") for line in result.stdout.splitlines())
    assert (plain["backup_file"], plain["backup_lines"]) == (str(backup), "12")
    # The command it names is the one that restores them.
    words = shlex.split(restore_command)
    assert run_cli(*words[3:], conn=words[2]).exit_code == 0
    assert len(task_lines(export(db_url))) == 12


# -- the guarantee: each batch on disk before its commit ------------------------------------------------------
def test_each_batch_is_synced_to_the_file_before_it_commits(db_url, tmp_path, monkeypatch):
    seed(db_url, expired=10, live=0)
    path = tmp_path / "b.jsonl"
    engine = make_engine(db_url)
    events: list[tuple[str, int]] = []

    def on_disk() -> int:
        return len(path.read_bytes().splitlines()) if path.exists() else -1

    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the real fsync, and what the file held when it was called
        real_fsync(fd)
        if path.exists() and os.fstat(fd).st_ino == path.stat().st_ino:
            events.append(("fsync", on_disk()))

    monkeypatch.setattr(os, "fsync", fsync)
    event.listen(engine, "commit", lambda _conn: events.append(("commit", on_disk())))
    backup = BackupFile(path)
    try:
        report = delete_expired(engine, datetime.now(UTC), 3, backup=backup)
    finally:
        backup.close()
        engine.dispose()
    assert report.deleted == 10
    batches = [i for i, (kind, lines) in enumerate(events) if kind == "commit" and lines > 0]
    assert [events[i][1] for i in batches] == [3, 6, 9, 10]
    for i in batches:  # the last thing before each commit is the sync of exactly what the file holds then
        assert events[i - 1] == ("fsync", events[i][1]), events


def test_a_value_that_is_not_json_stops_the_clean_and_its_batch_stays(db_url, tmp_path):
    seed(db_url, expired=6, live=0)
    sql(db_url, "UPDATE task_state_store SET value = 'not json' WHERE {key} = :k", k=long_key(4))
    backup = tmp_path / "clean.jsonl"
    result = run_cli("clean", "--batch-size", "2", "--backup", str(backup), conn=db_url)
    assert result.exit_code == 3, result.output
    key = long_key(4)
    assert result.stderr == (
        f"statestore: error: the value of key {key!r} for dag_id={DAG} run_id=manual__2026-11-29T08:00:00+00:00 "
        f"task_id={TASK} map_index=3 is not valid JSON (Expecting value), so it cannot be backed up; the batch was "
        "rolled back: fix or delete that key, or run without --backup (the clean had deleted 4 expired keys in 2 "
        "committed batches; they stay deleted: run clean again to finish); "
        f"{backup} holds the 4 deleted keys: `statestore --conn {shlex.quote(db_url)} import {backup}` restores them\n"
    )
    assert task_rows(db_url) == 2  # the batch with the bad row was rolled back: both its rows stay
    assert len(backup.read_text(encoding="utf-8").split("\n")[:-1]) == 4


def test_a_value_that_is_not_json_stops_a_one_statement_clean_before_anything_is_deleted(db_url, tmp_path):
    seed(db_url, expired=6, live=0)
    sql(db_url, "UPDATE task_state_store SET value = '{\"a\": NaN}' WHERE {key} = :k", k=long_key(2))
    backup = tmp_path / "clean.jsonl"
    result = run_cli("clean", "--batch-size", "0", "--backup", str(backup), conn=db_url)
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"statestore: error: the value of key {long_key(2)!r} for dag_id={DAG} "
        f"run_id=manual__2026-11-29T08:00:00+00:00 task_id={TASK} map_index=1 is not valid JSON (NaN is not a JSON "
        "number), so it cannot be backed up; the batch was rolled back: fix or delete that key, or run without "
        "--backup\n"
    )
    assert task_rows(db_url) == 6 and backup.read_bytes() == b""


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("batch", ["0", "4"])
def test_a_timestamp_no_line_can_hold_stops_the_clean_before_its_batch_is_deleted(db_url, tmp_path, batch):
    """A PostgreSQL timestamp before year 1 (which export, ISO 8601 and Python cannot write): the batch is made
    again from its rows, which says what is wrong; nothing of it is deleted or written."""
    seed(db_url, expired=6, live=0)
    sql(db_url, "UPDATE task_state_store SET updated_at = '0044-03-15 00:00:00+00 BC' WHERE {key} = :k", k=long_key(2))
    backup = tmp_path / "clean.jsonl"
    result = run_cli("clean", "--batch-size", batch, "--backup", str(backup), conn=db_url)
    assert result.exit_code == 3, result.output
    assert "timestamp too small (before year 1)" in result.stderr and len(result.stderr.splitlines()) == 1
    assert 2 <= task_rows(db_url) <= 6
    assert long_key(2) in {row[0] for row in sql(db_url, "SELECT {key} FROM task_state_store")}
    assert len(lines_of(backup)) == 6 - task_rows(db_url)  # the batches before it, every one of their keys


# -- stopped midway: signals, a lost connection, SIGKILL --------------------------------------------------------


def wait_until_deleting(url: str, total: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while task_rows(url) == total and proc.poll() is None:
        assert time.monotonic() < deadline, "the clean deleted nothing within a minute"
        time.sleep(0.02)
    assert proc.poll() is None, f"the clean ended before it was stopped: {proc.communicate()}"


def assert_restores_all(url: str, backup: Path, total: int, deleted: int) -> None:
    lines = backup.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) >= deleted  # a batch whose commit was under way may be in it too, never one row fewer
    assert task_rows(url) == total - deleted
    restore(url, backup)
    assert task_rows(url) == total
    assert {json.loads(line)["key"] for line in lines} <= {long_key(i) for i in range(1, total)} | {"first"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "code", "reason"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_a_signal_midway_leaves_every_deleted_key_in_the_backup(db_url, tmp_path, signum, code, reason):
    total = 5_000
    seed_bulk(db_url, total)
    backup = tmp_path / "clean.jsonl"
    proc = start_clean(db_url, backup)
    wait_until_deleting(db_url, total, proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    report = json.loads(out)
    assert report["stopped"] == reason and 0 < report["deleted"] < total, out
    assert report["backup"]["lines"] == report["deleted"]  # stopped between batches: exactly what went
    assert_restores_all(db_url, backup, total, report["deleted"])


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_connection_lost_midway_leaves_every_deleted_key_in_the_backup(db_url, tmp_path):
    total = 5_000
    seed_bulk(db_url, total)
    backup = tmp_path / "clean.jsonl"
    with named_session(db_url) as (url, marker):
        proc = start_clean(url, backup, batch=10)
        wait_until_deleting(db_url, total, proc)
        kill_session(db_url, marker, proc)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    done = re.search(
        r"\(the clean had deleted ([\d,]+) expired keys in [\d,]+ committed batch(?:es)?; they stay deleted: run clean "
        rf"again to finish\); {re.escape(str(backup))} holds the ([\d,]+) deleted keys: `statestore --conn .+ import "
        rf"{re.escape(str(backup))}` restores them\n$",
        err,
    )
    assert out == "" and done, err
    deleted = int(done.group(1).replace(",", ""))
    assert int(done.group(2).replace(",", "")) >= deleted
    # The batch the kill interrupted may have committed after all (the kill came during its commit).
    assert total - deleted - 10 <= task_rows(db_url) <= total - deleted
    lines = backup.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) >= total - task_rows(db_url)
    restore(db_url, backup)
    assert task_rows(db_url) == total


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_connection_lost_during_a_one_statement_clean_deletes_nothing(db_url, tmp_path):
    """The one transaction is under way (its last row is locked by another session, so it waits there, its
    lines so far written) when its session is killed: nothing is deleted, and the lines are cut again."""
    total = 5_000
    seed_bulk(db_url, total)
    backup = tmp_path / "clean.jsonl"
    with named_session(db_url) as (url, marker), row_locked(db_url, long_key(total - 1)):
        proc = start_clean(url, backup, batch=0)
        kill_session(db_url, marker, proc, waiting_for_lock=True)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert out == "" and err.count("\n") == 1 and err.startswith("statestore: error: database error on "), err
    assert task_rows(db_url) == total  # one transaction, rolled back
    assert backup.read_bytes() == b""


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)
def test_a_clean_killed_with_sigkill_leaves_every_deleted_key_in_the_backup(db_url, tmp_path):
    total = 5_000
    seed_bulk(db_url, total)
    backup = tmp_path / "clean.jsonl"
    proc = start_clean(db_url, backup)
    wait_until_deleting(db_url, total, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    deleted = total - task_rows(db_url)
    lines = backup.read_bytes().splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):  # killed while writing a batch that never committed
        backup.write_bytes(b"".join(lines[:-1]))  # what the README says to do with such a line
    assert 0 < deleted < total
    assert_restores_all(db_url, backup, total, deleted)


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)
def test_a_full_disk_under_the_backup_stops_the_clean_with_every_deleted_key_in_it(db_url, small_disk):
    total = 10_000  # some 3 MB of lines: the 1 MiB disk fills after a few batches
    seed_bulk(db_url, total)
    backup = small_disk / "clean.jsonl"
    result = run_cli("clean", "--batch-size", "500", "--backup", str(backup), conn=db_url)
    assert result.exit_code == 3, result.output
    done = re.fullmatch(
        rf"statestore: error: cannot (write|sync) the backup {re.escape(str(backup))} \(No space left on device\); "
        r"the batch in progress was rolled back \(the clean had deleted ([\d,]+) expired keys in ([\d,]+) committed "
        rf"batches; they stay deleted: run clean again to finish\); {re.escape(str(backup))} holds the ([\d,]+) "
        r"deleted keys: `.+` restores them\n",
        result.stderr,
    )
    assert done, result.stderr
    deleted = int(done.group(2).replace(",", ""))
    assert deleted > 0 and int(done.group(4).replace(",", "")) == deleted
    assert len(lines_of(backup)) == deleted and task_rows(db_url) == total - deleted  # the failed batch cut again
    restore(db_url, backup)
    assert task_rows(db_url) == total


# -- the file ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_new_backup_is_owner_only_even_under_umask_0(db_url, tmp_path):
    seed(db_url)
    backup = tmp_path / "clean.jsonl"
    old = os.umask(0)
    try:
        assert run_cli("clean", "--backup", str(backup), conn=db_url).exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # it holds every value the clean deleted


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_existing_empty_file_is_used_with_its_mode(db_url, tmp_path):
    seed(db_url)
    backup = tmp_path / "clean.jsonl"
    backup.touch(mode=0o600)
    backup.chmod(0o600)
    result = run_cli("clean", "--backup", str(backup), "-o", "json", conn=db_url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["backup"]["lines"] == 12
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Path:
    where = tmp_path / "ro"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); a read-only folder needs one")
    yield where
    subprocess.run(["umount", str(where)], check=False)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_folder_that_cannot_be_written_is_refused_before_anything_is_deleted(db_url, read_only_folder):
    seed(db_url)
    before = export(db_url)
    backup = read_only_folder / "clean.jsonl"
    result = run_cli("clean", "--backup", str(backup), conn=db_url)
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr == (
        f"statestore: error: --backup {backup}: cannot create files in {read_only_folder} (no permission, or a "
        "read-only file system)\n"
    )
    assert export(db_url) == before


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_custom_backend_skips_the_clean_and_writes_no_backup(db_url, tmp_path, monkeypatch, backends):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", f"{backends}.DictBackend")
    backup = tmp_path / "clean.jsonl"
    result = run_cli("clean", "--backup", str(backup), conn=db_url)
    assert result.exit_code == 0, result.output
    assert (
        result.stderr.splitlines()[-1]
        == f"statestore: note: --backup {backup} was not written: the clean deleted nothing"
    )
    assert not backup.exists()


# -- clear --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", ["0", "4"])
def test_clear_of_a_dag_backs_up_and_restores(db_url, tmp_path, batch):
    seed(db_url)
    before = export(db_url)
    backup = tmp_path / "clear.jsonl"
    result = run_cli("clear", "--dag-id", DAG, "--batch-size", batch, "--backup", str(backup), "--yes", conn=db_url)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[1:] == [
        f"backed up 15 deleted keys to {backup}",
        f"restore them with: statestore --conn {shlex.quote(db_url)} import {backup}",
    ], result.output
    assert records(lines_of(backup)) == records([line for line in before if json.loads(line)["store"] == "task"])
    restore(db_url, backup)
    assert export(db_url) == before


def test_clear_of_a_task_and_of_an_asset_back_up_and_restore(db_url, tmp_path):
    seed(db_url)
    before = export(db_url)
    task = ("--dag-id", DAG, "--run-id", RUN, "--task-id", TASK, "--all-map-indices")
    one, two = tmp_path / "task.jsonl", tmp_path / "asset.jsonl"
    assert run_cli("clear", *task, "--backup", str(one), "--yes", conn=db_url).exit_code == 0
    asset = ("--asset-name", "orders", "--asset-uri", "s3://warehouse/orders")
    assert run_cli("clear", *asset, "--backup", str(two), "--yes", conn=db_url).exit_code == 0
    assert len(one.read_text(encoding="utf-8").split("\n")[:-1]) == 6  # the odd-numbered keys are in RUN
    assert [json.loads(line)["store"] for line in two.read_text(encoding="utf-8").split("\n")[:-1]] == ["asset"]
    restore(db_url, one)
    restore(db_url, two)
    assert export(db_url) == before


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_clear_of_nothing_leaves_an_empty_backup_and_a_refused_clear_none(db_url, tmp_path):
    seed(db_url)
    empty, declined = tmp_path / "empty.jsonl", tmp_path / "declined.jsonl"
    result = run_cli("clear", "--dag-id", "no_such_dag", "--backup", str(empty), "--yes", conn=db_url)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "nothing to clear: no task keys for dag_id=no_such_dag",
        f"backup {empty} is empty: nothing was deleted",
    ]
    assert empty.read_bytes() == b""
    refused = run_cli("clear", "--dag-id", DAG, "--backup", str(declined), conn=db_url)  # no --yes, no terminal
    assert refused.exit_code == 2, refused.output
    assert not declined.exists()


# -- assets sweep ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", ["0", "2"])
def test_sweep_backs_up_and_restores(db_url, tmp_path, batch):
    backend = MetastoreBackend(make_engine(db_url))
    for n in range(3):
        scope = AssetScope(name=f"orders_{n}", uri=f"s3://warehouse/orders/{n}")
        for k in range(n + 2):
            backend.set(scope, f"last_processed_partition_of_the_orders_daily_export_{k}", json.dumps({"p": k}))
    backend.set(AssetScope(name="active", uri="s3://warehouse/active"), "watermark", '"2026-11-29"')
    backend.engine.dispose()
    sql(db_url, "DELETE FROM asset_active WHERE name LIKE 'orders_%'")
    before = export(db_url)
    backup = tmp_path / "sweep.jsonl"
    result = run_cli(
        "assets", "sweep", "--batch-size", batch, "--backup", str(backup), "--yes", "-o", "json", conn=db_url
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["deleted"] == 9 and report["backup"] == {"file": str(backup), "lines": 9}
    assert [a["deleted"] for a in report["assets"]] == [2, 3, 4]
    swept = [line for line in before if json.loads(line).get("name", "").startswith("orders_")]
    assert sorted(lines_of(backup)) == sorted(swept)  # asset lines are made as export makes them: byte for byte
    restore(db_url, backup)
    assert export(db_url) == before


# -- a worker-side backend: the backup holds the references ----------------------------------------------------------
def test_clean_backup_holds_the_references_and_the_restore_reads_the_values(
    db_url, tmp_path, monkeypatch, sample_objects
):
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    task = ("--dag-id", DAG, "--run-id", RUN, "--task-id", TASK)
    assert (
        run_cli(
            "set", *task, "job_id", '{"id": "j-1"}', "--expires-at", "2020-01-01T00:00:00Z", "--force", conn=db_url
        ).exit_code
        == 0
    )
    before = export(db_url)
    backup = tmp_path / "clean.jsonl"
    assert run_cli("clean", "--backup", str(backup), conn=db_url).exit_code == 0
    assert records(lines_of(backup)) == records(before)  # as export writes it: the reference
    assert "__airflow_state_ref__" in before[0]
    restore(db_url, backup)
    result = run_cli("get", *task, "job_id", conn=db_url)
    assert (result.exit_code, result.stdout, result.stderr) == (0, '{"id": "j-1"}\n', "")


def test_clear_with_a_backup_keeps_the_worker_objects_for_the_restore(db_url, tmp_path, monkeypatch, sample_objects):
    monkeypatch.setenv(WORKER, "sample_backends.DictWorkerBackend")
    task = ("--dag-id", DAG, "--run-id", RUN, "--task-id", TASK)
    assert run_cli("set", *task, "job_id", '{"id": "j-1"}', conn=db_url).exit_code == 0
    objects = dict(sample_objects)
    backup = tmp_path / "clear.jsonl"
    result = run_cli("clear", *task, "--backup", str(backup), "--yes", conn=db_url)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == (
        "kept the objects of [workers] state_store_backend behind the 1 key, so that the backup's references "
        "restore; `statestore orphans` lists them meanwhile"
    )
    assert dict(sample_objects) == objects
    assert run_cli("get", *task, "job_id", conn=db_url).exit_code == 1
    restore(db_url, backup)
    assert run_cli("get", *task, "job_id", conn=db_url).stdout == '{"id": "j-1"}\n'


# -- Airflow 3.4: dag-run keys and regions -----------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_on_airflow_34_dag_run_keys_and_regions_are_backed_up_and_restored(engine, tmp_path):
    import uuid

    from airflow34 import add_runs, airflow34_database

    from statestore_cli.model.scopes import DagRunScope

    with airflow34_database(engine, tmp_path) as url:
        add_runs(url, [(DAG, RUN)], NOW)
        backend = MetastoreBackend(make_engine(url))
        region = uuid.UUID("6f1c1c64-2b0e-4d43-9a55-3b1b0c7e2a10")
        backend.set(TaskScope(DAG, RUN, TASK), "job_id", '{"id": 1}', expires_at=EXPIRED_AT)
        backend.set(TaskScope(DAG, RUN, TASK, region_id=region), "job_id", '{"id": 2}', expires_at=EXPIRED_AT)
        backend.set(DagRunScope(DAG, RUN), "watermark", '"2026-11-29"', expires_at=EXPIRED_AT)
        backend.set(DagRunScope(DAG, RUN), "lock", "true", expires_at=None)
        backend.engine.dispose()
        before = export(url)
        cleaned, cleared = tmp_path / "clean.jsonl", tmp_path / "clear.jsonl"
        result = run_cli("clean", "--batch-size", "1", "--backup", str(cleaned), "-o", "json", conn=url)
        assert result.exit_code == 0, result.output
        stores = sorted(json.loads(line)["store"] for line in cleaned.read_text(encoding="utf-8").split("\n")[:-1])
        assert stores == ["dag_run", "task", "task"]
        assert any('"region_id": "6f1c1c64' in line for line in cleaned.read_text(encoding="utf-8").split("\n")[:-1])
        restore(url, cleaned)
        assert export(url) == before
        result = run_cli("clear", "--dag-id", DAG, "--run-id", RUN, "--backup", str(cleared), "--yes", conn=url)
        assert result.exit_code == 0, result.output
        assert len(cleared.read_text(encoding="utf-8").split("\n")[:-1]) == 4
        restore(url, cleared)
        assert export(url) == before
