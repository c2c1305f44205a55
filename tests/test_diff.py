"""`diff FILE`: the store against an export file (added, removed, changed value or expiry), in plain lines,
JSON and a table; exit 0 when the same, 1 when they differ, 2 for a bad line; a file out of key order (a
backup, an export from a server whose collation orders text by language) sorted outside memory."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow_schema import HEAD_34, HEAD_332, airflow_database
from cli_running import run_cli
from seeded_stores import seed_realistic
from servers import ENGINES
from stores import sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.backends.base import REF_MARKER
from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import DagRunScope
from statestore_cli.ops import diff as diff_module
from statestore_cli.ops.diff import DiffRun

ALL_ENGINES = True  # every test with a store runs on SQLite, PostgreSQL and MariaDB

RUN = "scheduled__2026-11-30T00:00:00+00:00"
EXPIRES = datetime(2027, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)
LATER = datetime(2027, 2, 1, tzinfo=UTC)


def seed(url: str) -> None:
    """A few task keys of two tasks (one mapped) and two asset keys."""
    backend = MetastoreBackend(make_engine(url))
    try:
        backend.set(TaskScope("etl", RUN, "extract"), "cursor", '{"page": 1, "of": 9}', expires_at=EXPIRES)
        backend.set(TaskScope("etl", RUN, "extract"), "total", "42", expires_at=None)
        backend.set(TaskScope("etl", RUN, "load", 2), "rows", "[1, 2]", expires_at=EXPIRES)
        backend.set(TaskScope("report", RUN, "send"), "sent", "true", expires_at=None)
        backend.set(AssetScope(name="orders", uri="s3://warehouse/orders"), "watermark", '"2026-11-29"')
        backend.set(AssetScope(name="users", uri="s3://warehouse/users"), "watermark", '"2026-11-28"')
    finally:
        backend.engine.dispose()


def export_to(url: str, path: Path, *filters: str) -> Path:
    result = run_cli("export", *filters, "--file", str(path), conn=url)
    assert result.exit_code == 0, result.output
    return path


def change_store(url: str) -> None:
    """One key added, one removed, one value changed, one expiry changed, one of each in the asset store."""
    backend = MetastoreBackend(make_engine(url))
    try:
        backend.set(TaskScope("etl", RUN, "extract"), "cursor", '{"page": 2, "of": 9}', expires_at=EXPIRES)
        backend.set(TaskScope("etl", RUN, "load", 2), "rows", "[1, 2]", expires_at=LATER)
        backend.set(TaskScope("etl", RUN, "load", 2), "added", '"new"', expires_at=None)
        backend.delete(TaskScope("report", RUN, "send"), "sent")
        backend.set(AssetScope(name="orders", uri="s3://warehouse/orders"), "watermark", '"2026-11-30"')
        backend.delete(AssetScope(name="users", uri="s3://warehouse/users"), "watermark")
    finally:
        backend.engine.dispose()


CHANGED_PLAIN = (
    "~\ttask\tetl\t" + RUN + "\textract\t-1\tcursor\tvalue\n"
    "+\ttask\tetl\t" + RUN + "\tload\t2\tadded\n"
    "~\ttask\tetl\t" + RUN + "\tload\t2\trows\texpires_at\n"
    "-\ttask\treport\t" + RUN + "\tsend\t-1\tsent\n"
    "~\tasset\torders\ts3://warehouse/orders\twatermark\tvalue\n"
    "-\tasset\tusers\ts3://warehouse/users\twatermark\n"
)


# -- the same -----------------------------------------------------------------------------------------------
def test_a_store_and_its_export_are_the_same(db_url, tmp_path):
    seed(db_url)
    seed_realistic(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    for mode in ("plain", "json", "table"):
        result = run_cli("diff", str(export), "-o", mode, conn=db_url)
        assert result.exit_code == 0, result.output
        assert result.stderr == ""
        expected = {"plain": "", "json": "[]\n", "table": "no differences (24 keys the same)\n"}[mode]
        assert result.stdout == expected


def test_updated_at_and_the_formatting_of_a_value_are_no_difference(db_url, tmp_path):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    # The same JSON written otherwise (key order, spacing, escapes), and every key written again later.
    sql(
        db_url,
        "UPDATE task_state_store SET value = :value WHERE task_id = 'extract' AND {key} = 'cursor'",
        value='{"of":9,  "page":1}',
    )
    sql(
        db_url,
        "UPDATE asset_state_store SET value = :new WHERE value = :old",
        new='"2026\\u002d11-29"',
        old='"2026-11-29"',
    )
    moment = "2027-01-01 00:00:00.000000" if db_url.startswith("sqlite") else datetime(2027, 1, 1, tzinfo=UTC)
    sql(db_url, "UPDATE task_state_store SET updated_at = :moment", moment=moment)
    sql(db_url, "UPDATE asset_state_store SET updated_at = :moment, last_updated_by_kind = 'api'", moment=moment)
    result = run_cli("diff", str(export), conn=db_url)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""


# -- differences ----------------------------------------------------------------------------------------------
def test_added_removed_and_changed_keys_exactly(db_url, tmp_path):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    change_store(db_url)
    result = run_cli("diff", str(export), conn=db_url)
    assert result.exit_code == 1, result.output
    assert result.stdout == CHANGED_PLAIN
    assert result.stderr == ""

    header = run_cli("diff", str(export), "--header", "--store", "asset", conn=db_url)
    assert header.exit_code == 1, header.output
    assert header.stdout == (
        "change\tstore\tname\turi\tkey\tdiffers\n"
        "~\tasset\torders\ts3://warehouse/orders\twatermark\tvalue\n"
        "-\tasset\tusers\ts3://warehouse/users\twatermark\n"
    )


def test_json_output_names_each_difference(db_url, tmp_path):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    change_store(db_url)
    result = run_cli("diff", str(export), "-o", "json", conn=db_url)
    assert result.exit_code == 1, result.output
    documents = json.loads(result.stdout)
    task = {"store": "task", "dag_id": "etl", "run_id": RUN}
    assert documents == [
        {"change": "changed", **task, "task_id": "extract", "map_index": -1, "key": "cursor", "differs": ["value"]},
        {"change": "added", **task, "task_id": "load", "map_index": 2, "key": "added"},
        {"change": "changed", **task, "task_id": "load", "map_index": 2, "key": "rows", "differs": ["expires_at"]},
        {"change": "removed", **task, "dag_id": "report", "task_id": "send", "map_index": -1, "key": "sent"},
        {
            "change": "changed",
            "store": "asset",
            "name": "orders",
            "uri": "s3://warehouse/orders",
            "key": "watermark",
            "differs": ["value"],
        },
        {"change": "removed", "store": "asset", "name": "users", "uri": "s3://warehouse/users", "key": "watermark"},
    ]


def test_a_value_and_expiry_both_changed_are_both_named(db_url, tmp_path):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    backend = MetastoreBackend(make_engine(db_url))
    try:
        backend.set(TaskScope("etl", RUN, "extract"), "total", "43", expires_at=LATER)
    finally:
        backend.engine.dispose()
    result = run_cli("diff", str(export), conn=db_url)
    assert result.exit_code == 1, result.output
    assert result.stdout == f"~\ttask\tetl\t{RUN}\textract\t-1\ttotal\tvalue,expires_at\n"


def test_the_table_at_a_terminal(db_url, tmp_path):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    change_store(db_url)
    result = run_cli("diff", str(export), "-o", "table", conn=db_url)
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "task state keys"
    assert any("dag_id etl" in line and "task_id load" in line and "map_index 2" in line for line in lines)
    assert any("added" in line and "+ added" in line for line in lines)
    assert any("rows" in line and "~ changed" in line and "expires_at" in line for line in lines)
    assert "asset state keys" in lines
    assert lines[-1] == "1 added, 2 removed, 3 changed, 1 the same"


# -- filters --------------------------------------------------------------------------------------------------
def test_a_scope_filter_applies_to_both_sides(db_url, tmp_path):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    change_store(db_url)
    expected = "".join(line + "\n" for line in CHANGED_PLAIN.splitlines() if "\tetl\t" in line)
    result = run_cli("diff", "--dag-id", "etl", str(export), conn=db_url)
    assert (result.exit_code, result.stdout) == (1, expected), result.output
    only = run_cli("diff", "--dag-id", "etl", "--task-id", "load", "--key", "rows", str(export), conn=db_url)
    assert (only.exit_code, only.stdout) == (1, f"~\ttask\tetl\t{RUN}\tload\t2\trows\texpires_at\n"), only.output
    same = run_cli("diff", "--dag-id", "etl", "--task-id", "extract", "--key", "total", str(export), conn=db_url)
    assert (same.exit_code, same.stdout) == (0, ""), same.output
    # An asset by its id: the file names assets by name and uri, so the id is looked up in the store.
    asset_id = sql(db_url, "SELECT id FROM asset WHERE name = 'orders'")[0][0]
    by_id = run_cli("diff", "--asset-id", str(asset_id), str(export), conn=db_url)
    assert (by_id.exit_code, by_id.stdout) == (1, "~\tasset\torders\ts3://warehouse/orders\twatermark\tvalue\n")
    # A file exported with a filter, compared under the same filter, is the same.
    part = export_to(db_url, tmp_path / "etl.jsonl", "--dag-id", "report")
    assert run_cli("diff", "--dag-id", "report", str(part), conn=db_url).exit_code == 0


# -- files out of order, stdin, backups -------------------------------------------------------------------------
def test_a_file_out_of_key_order_gives_the_same_differences(db_url, tmp_path, monkeypatch):
    seed(db_url)
    seed_realistic(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    change_store(db_url)
    sorted_result = run_cli("diff", str(export), conn=db_url)
    reversed_file = tmp_path / "reversed.jsonl"
    reversed_file.write_text("".join(reversed(export.read_text().splitlines(keepends=True))))
    for run_lines in (diff_module.RUN_LINES, 3):  # in one run in memory, and in runs written to files
        monkeypatch.setattr(diff_module, "RUN_LINES", run_lines)
        result = run_cli("diff", str(reversed_file), conn=db_url)
        assert (result.exit_code, result.stdout) == (1, sorted_result.stdout), result.output
    run = DiffRun(Store.open(load_settings(conn_override=db_url)), KeyFilter(), str(reversed_file))
    assert [d.change for d in run.differences()].count("removed") == 2
    summary = run.summary()
    assert (summary.sorted_file, summary.added, summary.removed, summary.changed) == (False, 1, 2, 3)


def test_a_key_given_twice_counts_as_its_later_line(db_url, tmp_path):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    lines = export.read_text().splitlines(keepends=True)
    stale = json.loads(lines[0])
    stale["value"] = "an older value"
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps(stale) + "\n" + "".join(lines))  # the export's line comes later: it counts
    assert run_cli("diff", str(twice), conn=db_url).exit_code == 0
    twice.write_text("".join(lines) + json.dumps(stale) + "\n")
    result = run_cli("diff", str(twice), conn=db_url)
    assert (result.exit_code, result.stdout) == (1, f"~\ttask\tetl\t{RUN}\textract\t-1\tcursor\tvalue\n")


def test_standard_input(db_url, tmp_path):
    seed(db_url)
    text = export_to(db_url, tmp_path / "export.jsonl").read_text()
    assert run_cli("diff", "-", conn=db_url, input=text).exit_code == 0
    result = run_cli("diff", "-", conn=db_url, input="".join(text.splitlines(keepends=True)[1:]))
    assert (result.exit_code, result.stdout) == (1, f"+\ttask\tetl\t{RUN}\textract\t-1\tcursor\n")


def test_a_clean_backup_is_what_the_clean_deleted(db_url, tmp_path):
    seed(db_url)
    backend = MetastoreBackend(make_engine(db_url))
    try:
        for i in range(5):
            backend.set(TaskScope("etl", RUN, "old"), f"k{i}", str(i), expires_at=datetime(2026, 1, 1, tzinfo=UTC))
    finally:
        backend.engine.dispose()
    backup = tmp_path / "clean.jsonl"
    cleaned = run_cli("clean", "--batch-size", "2", "--backup", str(backup), conn=db_url)
    assert cleaned.exit_code == 0, cleaned.output
    result = run_cli("diff", "--task-id", "old", "--dag-id", "etl", str(backup), conn=db_url)
    assert result.exit_code == 1, result.output
    assert result.stdout == "".join(f"-\ttask\tetl\t{RUN}\told\t-1\tk{i}\n" for i in range(5))
    assert run_cli("import", str(backup), conn=db_url).exit_code == 0
    restored = run_cli("diff", "--task-id", "old", "--dag-id", "etl", str(backup), conn=db_url)
    assert (restored.exit_code, restored.stdout) == (0, ""), restored.output


# -- bad input --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "line 3: not valid JSON (Expecting property name enclosed in double quotes)"),
        (
            '{"store": "task"}',
            "line 3: a task key needs dag_id, run_id, task_id, map_index, key, updated_at, expires_at, value: missing",
        ),
        ('{"value": ' + "[" * 600 + "]" * 600 + "}", "line 3: its value nests arrays or objects more than 512"),
    ],
    ids=["not-json", "fields-missing", "too-deep"],
)
def test_a_bad_line_is_named_by_its_number_and_nothing_is_compared(db_url, tmp_path, line, problem):
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    lines = export.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:2]) + line + "\n" + "".join(lines[2:]))
    result = run_cli("diff", str(bad), conn=db_url)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"statestore: error: {bad} {problem}")
    assert result.stderr.rstrip().endswith("; no difference is shown for a file with a bad line")


@pytest.mark.parametrize("held", [10_000, 2])  # differences held in memory, or in a file
def test_differences_are_shown_only_once_the_whole_file_is_read(db_url, tmp_path, monkeypatch, held):
    monkeypatch.setattr(diff_module, "HELD", held)
    seed(db_url)
    export = export_to(db_url, tmp_path / "export.jsonl")
    change_store(db_url)
    assert run_cli("diff", str(export), conn=db_url).stdout == CHANGED_PLAIN
    bad = tmp_path / "bad.jsonl"
    lines = export.read_text().splitlines(keepends=True)
    bad.write_text("".join(lines) + "{}\n")
    result = run_cli("diff", str(bad), conn=db_url)
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr == (
        f'statestore: error: {bad} line {len(lines) + 1}: a key needs store ("task", "dag_run" or "asset"): missing; '
        "no difference is shown for a file with a bad line\n"
    )


def test_an_unreadable_file_is_usage_error(db_url, tmp_path):
    result = run_cli("diff", str(tmp_path / "missing.jsonl"), conn=db_url)
    assert result.exit_code == 2
    assert result.stderr == f"statestore: error: cannot read {tmp_path / 'missing.jsonl'}: No such file or directory\n"


# -- Airflow 3.4: regions and dag-run keys, in an Airflow database ----------------------------------------------
REGION = uuid.UUID("6f1c1c64-2b0e-4d43-9a55-3b1b0c7e2a10")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_dag_run_and_region_keys_on_airflow_34(engine, tmp_path):
    with airflow_database(engine, HEAD_34, tmp_path) as url:
        for dag_id in ("etl", "report"):
            sql(
                url,
                "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
                "VALUES (:dag_id, :run_id, 'manual', '2026-11-01 00:00:00.000000', 0, 'not_started')",
                dag_id=dag_id,
                run_id=RUN,
            )
        backend = MetastoreBackend(make_engine(url))
        try:
            backend.set(TaskScope("etl", RUN, "extract"), "cursor", '{"page": 1}', expires_at=EXPIRES)
            backend.set(TaskScope("etl", RUN, "extract", region_id=REGION), "cursor", '{"page": 7}', expires_at=None)
            backend.set(DagRunScope("etl", RUN), "watermark", '"2026-11-29"', expires_at=EXPIRES)
            backend.set(DagRunScope("report", RUN), "sent", "false", expires_at=None)
            export = export_to(url, tmp_path / "export.jsonl")
            assert run_cli("diff", str(export), conn=url).exit_code == 0
            backend.set(TaskScope("etl", RUN, "extract", region_id=REGION), "cursor", '{"page": 8}', expires_at=None)
            backend.set(DagRunScope("etl", RUN), "watermark", '"2026-11-29"', expires_at=LATER)
            backend.delete(DagRunScope("report", RUN), "sent")
            backend.set(DagRunScope("report", RUN), "done", "true", expires_at=None)
        finally:
            backend.engine.dispose()
        result = run_cli("diff", str(export), conn=url)
        assert result.exit_code == 1, result.output
        assert result.stdout == (
            f"~\ttask\tetl\t{RUN}\textract\t{REGION}\t-1\tcursor\tvalue\n"
            f"~\tdag_run\tetl\t{RUN}\twatermark\texpires_at\n"
            f"+\tdag_run\treport\t{RUN}\tdone\n"
            f"-\tdag_run\treport\t{RUN}\tsent\n"
        )
        runs = run_cli("diff", "--store", "dag_run", "--dag-id", "etl", str(export), "-o", "json", conn=url)
        assert runs.exit_code == 1, runs.output
        assert json.loads(runs.stdout) == [
            {
                "change": "changed",
                "store": "dag_run",
                "dag_id": "etl",
                "run_id": RUN,
                "key": "watermark",
                "differs": ["expires_at"],
            }
        ]


def test_keys_the_collations_order_otherwise_are_compared_in_one_order(db_url, tmp_path):
    """Upper and lower case, punctuation, accents and emoji: PostgreSQL's and MySQL's collations order them
    by language or without case, SQLite by code point; the store is read in code point order on every engine."""
    texts = ["B", "a", "_x", "Z_", "z", "é", "e", "É", "🚀", "a b", "a-b", "ab", "A"]
    backend = MetastoreBackend(make_engine(db_url))
    try:
        for i, text in enumerate(texts):
            backend.set(TaskScope(f"dag{text}", RUN, f"t{text}"), f"k{text}", str(i), expires_at=None)
            backend.set(TaskScope("dag", RUN, "t"), f"key {text}", str(i), expires_at=None)
            if text != "🚀":  # outside latin1, which MySQL's asset columns hold
                backend.set(AssetScope(name=f"asset {text}", uri=f"s3://{text}"), f"k{text}", str(i))
    finally:
        backend.engine.dispose()
    export = export_to(db_url, tmp_path / "export.jsonl")
    result = run_cli("diff", str(export), conn=db_url)
    assert (result.exit_code, result.stdout) == (0, ""), result.output
    sql(db_url, "DELETE FROM task_state_store WHERE {key} = :key", key="key É")
    result = run_cli("diff", str(export), conn=db_url)
    assert (result.exit_code, result.stdout) == (1, f"-\ttask\tdag\t{RUN}\tt\t-1\tkey É\n"), result.output


def test_a_worker_side_value_is_compared_by_the_reference_its_row_holds(cli, monkeypatch, sample_objects, tmp_path):
    """As export writes it: a row holding a worker-side reference is compared by that reference, not by the
    object it points to (which the worker-side backend may change under the same reference)."""
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "sample_backends.DictWorkerBackend")
    task = ("--dag-id", "etl", "--run-id", RUN, "--task-id", "submit")
    assert cli("set", *task, "job_id", '{"id": "j-1"}').exit_code == 0
    export = tmp_path / "export.jsonl"
    assert cli("export", "--file", str(export)).exit_code == 0
    assert json.loads(export.read_text())["value"] == {REF_MARKER: f"objects/task/etl/{RUN}/submit/-1/job_id"}
    assert cli("set", *task, "job_id", '{"id": "j-2"}', "--keep-expiry").exit_code == 0  # the same reference
    result = cli("diff", str(export))
    assert (result.exit_code, result.stdout) == (0, ""), result.output
    assert cli("delete", *task, "job_id").exit_code == 0
    result = cli("diff", str(export))
    assert (result.exit_code, result.stdout) == (1, f"-\ttask\tetl\t{RUN}\tsubmit\t-1\tjob_id\n"), result.output


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_dag_run_line_against_airflow_33_is_removed_and_the_store_cannot_be_asked_for(engine, tmp_path):
    with airflow_database(engine, HEAD_332, tmp_path) as url:
        sql(
            url,
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES ('etl', :run_id, 'manual', '2026-11-01 00:00:00.000000', 0, 'not_started')",
            run_id=RUN,
        )
        backend = MetastoreBackend(make_engine(url))
        try:
            backend.set(TaskScope("etl", RUN, "extract"), "cursor", '{"page": 1}', expires_at=EXPIRES)
        finally:
            backend.engine.dispose()
        export = export_to(url, tmp_path / "export.jsonl")
        line = {"store": "dag_run", "dag_id": "etl", "run_id": RUN, "key": "lock", "value": True}
        line |= {"updated_at": "2026-11-29T10:15:30+00:00", "expires_at": None}
        with export.open("a") as out:
            out.write(json.dumps(line) + "\n")
        result = run_cli("diff", str(export), conn=url)
        assert (result.exit_code, result.stdout) == (1, f"-\tdag_run\tetl\t{RUN}\tlock\n"), result.output
        asked = run_cli("diff", "--store", "dag_run", str(export), conn=url)
        assert (asked.exit_code, asked.stdout) == (2, ""), asked.output
        assert "this database has no dag-run state store (Airflow 3.3 layout)" in asked.stderr
