"""A ``clean --backup`` on PostgreSQL beside other writers: each batch (or the one statement) is a delete that
returns its rows, so a row another transaction changes while the delete waits for it is looked at again as it
now is; a batch skips rows another transaction holds, as without a backup; two cleans at once share the rows;
and the clean needs no second connection. Each time the backup holds exactly what was deleted."""

from __future__ import annotations

import json
import time

import pytest
from backups import export, lines_of, long_key, records, restore, seed, seed_bulk, start_clean, task_lines, task_rows
from cli_running import run_statestore_process
from faults import named_session
from servers import engine_of
from sqlalchemy import text

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def waiting_statement(db_url: str, marker: str, proc, deadline: float = 60) -> str:
    """The statement of the command's session once it waits for a row lock."""
    admin = engine_of(db_url, isolation_level="AUTOCOMMIT")
    find = text("SELECT query FROM pg_stat_activity WHERE application_name = :m AND wait_event_type = 'Lock'")
    give_up = time.monotonic() + deadline
    try:
        with admin.connect() as conn:
            while time.monotonic() < give_up and proc.poll() is None:
                found = conn.execute(find, {"m": marker}).scalars().first()
                if found:
                    return str(found)
                time.sleep(0.02)
    finally:
        admin.dispose()
    raise AssertionError(f"the clean never waited for the lock: {proc.communicate()}")


def test_a_row_changed_after_the_snapshot_is_deleted_as_it_now_is(db_url, tmp_path):
    """An expired key is updated (kept for a day more) by a transaction that commits while the delete waits for
    its row: that key stays with its new value, out of the backup; every other expired key is deleted and
    backed up, and the backup restores them."""
    seed(db_url)
    changed = long_key(3)
    before = [line for line in task_lines(export(db_url)) if json.loads(line)["key"] != changed]
    backup = tmp_path / "clean.jsonl"
    writer = engine_of(db_url)
    with named_session(db_url) as (url, marker), writer.connect() as conn:
        extend = "UPDATE task_state_store SET value = '\"kept\"', expires_at = now() + interval '1 day' WHERE key = :k"
        conn.execute(text(extend), {"k": changed})
        proc = start_clean(url, backup, batch=0)
        waiting = waiting_statement(db_url, marker, proc)
        conn.commit()
        out, err = proc.communicate(timeout=60)
    writer.dispose()
    assert "DELETE FROM task_state_store" in waiting, waiting  # the clean's own delete waited for the row
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert (report["deleted"], report["backup"]["lines"]) == (11, 11)
    assert records(lines_of(backup)) == records(before)
    kept = [json.loads(line) for line in task_lines(export(db_url))]
    assert [(k["key"], k["value"]) for k in kept] == [(changed, "kept")]
    restore(db_url, backup)
    assert task_rows(db_url) == 15


def test_a_batch_skips_a_row_another_transaction_holds_as_without_a_backup(db_url, tmp_path):
    """Batches of 5, read beside their deletes: an expired key that a transaction holds (updated, not yet
    committed) for the whole clean is skipped, as the clean without a backup skips it, after a short wait and
    not the clean's lock timeout (3 s, which would fail it): the other 11 are deleted and backed up; the key
    held stays, with what the transaction then commits."""
    seed(db_url)
    held = long_key(7)
    before = [line for line in task_lines(export(db_url)) if json.loads(line)["key"] != held]
    backup = tmp_path / "clean.jsonl"
    writer = engine_of(db_url)
    with writer.connect() as conn:
        conn.execute(text("UPDATE task_state_store SET value = '\"held\"' WHERE key = :k"), {"k": held})
        argv = ("--conn", db_url, "clean", "--batch-size", "5", "--lock-timeout", "3s", "--backup", str(backup))
        result = run_statestore_process(*argv, "-o", "json", timeout=60)
        conn.commit()
    writer.dispose()
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["deleted"], report["backup"]["lines"]) == (11, 11)
    assert records(lines_of(backup)) == records(before)
    kept = [json.loads(line) for line in task_lines(export(db_url))]
    assert [(k["key"], k["value"]) for k in kept] == [(held, "held")]


def test_two_cleans_at_once_in_batches_share_the_rows_and_back_up_each_once(db_url, tmp_path):
    """Two batched cleans with a backup each, at once on the same 3,000 expired keys: where their batches'
    batches meet, one skips the rows the other holds; between them they delete every key once: the two backups
    hold each key exactly once, and importing both puts every one back."""
    seed_bulk(db_url, 3_000)
    before = task_lines(export(db_url), prefix="")
    backups = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    procs = [start_clean(db_url, backup, batch=100) for backup in backups]
    outcomes = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_, err) in zip(procs, outcomes, strict=True):
        assert proc.returncode == 0, err
    deleted = [json.loads(out)["deleted"] for out, _ in outcomes]
    written = [lines_of(backup) for backup in backups]
    assert [len(lines) for lines in written] == deleted
    assert sum(deleted) == 3_000
    assert records(written[0] + written[1]) == records(before)
    assert task_rows(db_url) == 0
    for backup in backups:
        restore(db_url, backup)
    assert records(task_lines(export(db_url), prefix="")) == records(before)


@pytest.mark.parametrize("batch", ["0", "5"])
def test_without_a_second_connection_at_once_the_clean_deletes_on_one_session(db_url, tmp_path, batch):
    """A pool of one connection, which would wait two minutes for a second: the clean does not wait."""
    seed(db_url)
    before = task_lines(export(db_url))
    config = tmp_path / "airflow.cfg"
    args = json.dumps({"pool_size": 1, "max_overflow": 0, "pool_timeout": 120})
    config.write_text(f"[database]\nsql_alchemy_conn = {db_url}\nsql_alchemy_engine_args = {args}\n")
    backup = tmp_path / "clean.jsonl"
    argv = ("--config", str(config), "clean", "--batch-size", batch, "--backup", str(backup), "-o", "json")
    result = run_statestore_process(*argv, timeout=60)  # a wait for the pool would end the test here
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["backup"]["lines"] == 12
    assert records(lines_of(backup)) == records(before)
