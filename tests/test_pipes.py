"""statestore in a pipe: a reader that closes early ends the command quietly (no error line, no
traceback, exit 0 unless the command's own outcome says otherwise), and plain output is records only,
one per line, with a header line only when ``--header`` asks for it.

The closed-pipe tests run real processes: the reader is a pipe this test closes, either after the
first line of an output larger than the pipe's buffer (64 KiB on Linux), so the writer is blocked on
it when it closes, or before the process writes at all, so even an output that would fit in the
buffer meets a closed pipe (at the latest when it is flushed at exit).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_running import run_cli, run_statestore_process, start_statestore, statestore_argv
from seeded_stores import REALISTIC_KEY, REALISTIC_RUNS
from servers import engine_of
from sqlalchemy import text
from stores import sql

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.db.database import make_engine

pytestmark = pytest.mark.slow  # real processes whose pipes close

DAGS = ("etl_orders_daily", "ml_feature_store_refresh_with_a_rather_long_dag_id")
TASKS = 25
KEYS_PER_TASK = 40  # 2 dags x 2 runs x 25 tasks x 40 keys = 4,000 rows, 2,000 of them expired
PIPE_BUFFER = 64 * 1024


def seed_many(url: str, keys_per_task: int = KEYS_PER_TASK) -> int:
    """Realistic task keys in bulk, every other one expired; returns how many expired."""
    engine = engine_of(url)
    now = datetime.now(UTC).replace(microsecond=0)
    runs, rows = [], []
    for dag_id in DAGS:
        for run_id in REALISTIC_RUNS:
            runs.append({"id": len(runs) + 1, "dag_id": dag_id, "run_id": run_id})
            for task in range(TASKS):
                for k in range(keys_per_task):
                    expires = now - timedelta(days=3) if len(rows) % 2 else now + timedelta(days=30)
                    rows.append(
                        {
                            "dag_run_id": len(runs),
                            "task_id": f"submit_spark_job_for_partition_{task:03d}",
                            "key": f"{REALISTIC_KEY[:52]}_{k:07d}",
                            "dag_id": dag_id,
                            "run_id": run_id,
                            "value": '{"job_id": "spark-application-1764460800123_0042", "attempt": 2}',
                            "updated_at": _stored(url, now),
                            "expires_at": _stored(url, expires),
                        }
                    )
    quote = "`" if engine.dialect.name in ("mysql", "mariadb") else '"'
    columns = ("dag_run_id", "task_id", "key", "dag_id", "run_id", "value", "updated_at", "expires_at")
    insert = (
        f"INSERT INTO task_state_store (map_index, {', '.join(quote + c + quote for c in columns)}) "
        f"VALUES (-1, {', '.join(':' + c for c in columns)})"
    )
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO dag_run (id, dag_id, run_id) VALUES (:id, :dag_id, :run_id)"), runs)
            conn.execute(text(insert), rows)
    finally:
        engine.dispose()
    return len(rows) // 2


def _stored(url: str, moment: datetime) -> object:
    """A UTC timestamp as each engine's column takes it: SQLite text, MySQL naive UTC, PostgreSQL aware."""
    if url.startswith("sqlite"):
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
    if url.startswith(("mysql", "mariadb")):
        return moment.replace(tzinfo=None)
    return moment


def closed_early(*args: str, read_first_line: bool = True, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``statestore ARGS`` with stdout into a pipe that this test closes: after reading one line,
    or (``read_first_line=False``) before the process has written anything. Returns exit code, the
    line read and stderr."""
    proc = start_statestore(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline() if read_first_line else ""
    proc.stdout.close()
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read()
    proc.stderr.close()
    return code, first, stderr


def full_output(*args: str, env: dict[str, str] | None = None) -> str:
    done = run_statestore_process(*args, timeout=120, env=env)
    assert done.exit_code == 0, done.stderr
    return done.stdout


# -- a reader that closes early ---------------------------------------------------------------------------
@pytest.mark.parametrize("db_url", ["sqlite", "postgresql", "mariadb"], indirect=True)
@pytest.mark.parametrize("mode", ["plain", "json", "table"])
def test_list_larger_than_the_pipe_buffer_ends_quietly_when_the_reader_stops(db_url, mode):
    seed_many(db_url)
    args = ("--conn", db_url, "list", "-o", mode)
    assert len(full_output(*args).encode()) > 2 * PIPE_BUFFER  # the writer is blocked when the pipe closes
    code, first, stderr = closed_early(*args)
    assert (code, stderr) == (0, "")
    assert first.strip()


def test_export_larger_than_the_pipe_buffer_ends_quietly_when_the_reader_stops(db_url):
    seed_many(db_url)
    args = ("--conn", db_url, "export")
    assert len(full_output(*args).encode()) > 2 * PIPE_BUFFER
    code, first, stderr = closed_early(*args)
    assert (code, stderr) == (0, "")
    assert first.startswith('{"store": "task"'), first


@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["PYTHONUNBUFFERED", "buffered"])
def test_an_export_written_at_once_meets_the_closed_pipe_under_pythonunbuffered_too(db_url, unbuffered):
    """1,000 keys, over 400 KB: one write, of which the pipe takes 64 KiB before its reader goes. Under
    PYTHONUNBUFFERED (``python -u``) Python's own stdout would drop the rest without an error and the export
    would report every key exported; the tool's stdout writes all or meets the closed pipe."""
    seed_many(db_url, keys_per_task=10)
    args = ("--conn", db_url, "export")
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    whole = full_output(*args, env=env)
    assert whole.count("\n") == 1000
    assert len(whole.encode()) > 4 * PIPE_BUFFER
    code, first, stderr = closed_early(*args, env=env)
    assert (code, stderr) == (0, "")
    assert first.startswith('{"store": "task"'), first


@pytest.mark.parametrize("mode", ["plain", "json", "table"])
def test_dry_run_ends_quietly_when_the_reader_stops(db_url, mode):
    expired = seed_many(db_url)
    args = ("--conn", db_url, "clean", "--dry-run", "--all", "-o", mode)
    assert len(full_output(*args).encode()) > 2 * PIPE_BUFFER
    code, first, stderr = closed_early(*args)
    assert (code, stderr) == (0, "")
    assert first.strip()
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(2 * expired,)]  # a dry run deletes nothing


@pytest.mark.parametrize(
    "args",
    [
        ("config", "show"),
        ("config", "show", "-o", "table"),
        ("config", "show", "-o", "json"),
        ("db", "check", "-o", "plain"),
        ("db", "check", "-o", "table"),
        ("db", "check", "-o", "json"),
        ("db", "init", "-o", "plain"),
        ("stats",),
        ("stats", "-o", "table"),
        ("stats", "-o", "json"),
        ("list", "--header"),
        ("clean", "--dry-run"),
        ("--help",),
        ("list", "--help"),
        ("--version",),
    ],
    ids=" ".join,
)
def test_small_outputs_meet_a_pipe_closed_before_they_are_written(db_url, args):
    """The output fits in the pipe's buffer, so the closed pipe shows only when it is flushed, maybe at
    exit: still no line on stderr (not even Python's "Exception ignored ... BrokenPipeError")."""
    seed_many(db_url, keys_per_task=1)
    code, _, stderr = closed_early("--conn", db_url, *args, read_first_line=False)
    assert (code, stderr) == (0, "")


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "full CLI"])
def test_get_into_a_closed_pipe(db_url, fast):
    seed_many(db_url, keys_per_task=1)
    scope = ["--dag-id", DAGS[0], "--run-id", REALISTIC_RUNS[0], "--task-id", "submit_spark_job_for_partition_000"]
    env = None if fast else {**os.environ, "STATESTORE_NO_FAST_PATH": "1"}
    key = f"{REALISTIC_KEY[:52]}_{0:07d}"
    code, _, stderr = closed_early("--conn", db_url, "get", *scope, key, read_first_line=False, env=env)
    assert (code, stderr) == (0, "")


def test_a_shell_pipeline_under_pipefail_succeeds(db_url):
    """What a script does: `set -o pipefail; statestore list | head -1`, and with stderr in the pipe too."""
    seed_many(db_url)
    argv = " ".join(f"'{a}'" for a in statestore_argv("--conn", db_url))
    for redirect in ("", "2>&1"):
        script = f"set -o pipefail; {argv} list {redirect} | head -1; {argv} clean --dry-run {redirect} | head -1"
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False, timeout=120)
        assert (done.returncode, done.stderr) == (0, ""), done
        assert [line.split("\t")[0] for line in done.stdout.splitlines()] == ["task", DAGS[0]]


def test_a_clean_whose_reader_is_gone_keeps_its_deletions_and_its_exit_code(db_url):
    expired = seed_many(db_url)
    code, _, stderr = closed_early("--conn", db_url, "clean", "-o", "plain", read_first_line=False)
    assert code == 0
    assert stderr.startswith(f"deleted {expired:,} expired task keys in one statement")  # the sentence, no error
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(expired,)]
    sql(db_url, "UPDATE task_state_store SET expires_at = :past", past=_stored(db_url, datetime(2020, 1, 1)))
    # A clean stopped by --max-runtime exits 4 whether or not anyone reads its report.
    code, _, stderr = closed_early(
        "--conn", db_url, "clean", "--batch-size", "100", "--max-runtime", "0s", read_first_line=False
    )
    assert code == 4
    assert "stopped early (--max-runtime reached)" in stderr
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(expired - 100,)]


def test_db_check_of_an_unusable_store_still_fails_when_the_reader_is_gone(tmp_path):
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    code, _, stderr = closed_early("--conn", url, "db", "check", "-o", "plain", read_first_line=False)
    assert code == 3
    assert stderr == (
        f"statestore: error: no state store at {tmp_path / 'missing.db'}: the file does not exist; "
        f"the URL is the one --conn gave; if the store is elsewhere, fix --conn; to create it here, run "
        f"`statestore --conn {url} db init`\n"
    )


# -- plain output: records only, --header -------------------------------------------------------------------
def test_plain_list_is_one_record_per_key_and_a_header_per_store_only_with_header(db_url):
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("etl", "r1", "extract"), "job_id", '"j-1"', expires_at=None)
    backend.set(AssetScope(name="orders", uri="s3://b/orders"), "watermark", "1")
    backend.engine.dispose()
    moment = _stored(db_url, datetime(2026, 11, 29, 10, 15, 30))
    sql(db_url, "UPDATE task_state_store SET updated_at = :t", t=moment)
    sql(db_url, "UPDATE asset_state_store SET updated_at = :t", t=moment)
    rows = [
        "task\tetl\tr1\textract\t-1\tjob_id\t2026-11-29 10:15:30 UTC\tnever",
        "asset\t1\torders\ts3://b/orders\twatermark\t2026-11-29 10:15:30 UTC\tnever",
    ]
    plain = run_cli("list", "-o", "plain", conn=db_url)
    assert (plain.exit_code, plain.stdout, plain.stderr) == (0, "\n".join(rows) + "\n", "")
    headed = run_cli("list", "-o", "plain", "--header", conn=db_url)
    assert headed.stdout.splitlines() == [
        "store\tdag_id\trun_id\ttask_id\tmap_index\tkey\tupdated_at\texpires_at",
        rows[0],
        "store\tasset_id\tname\turi\tkey\tupdated_at\texpires_at",
        rows[1],
    ]
    # With no rows, the header of the store the filters select.
    assert run_cli("list", "--header", "--dag-id", "none", conn=db_url).stdout.startswith("store\tdag_id\t")
    assert run_cli("list", "--header", "--asset-name", "none", conn=db_url).stdout.startswith("store\tasset_id\t")
    assert run_cli("list", "--header", "--store", "asset", "--key", "x", conn=db_url).stdout.count("\n") == 1
    # --header is for plain output: JSON names its fields, a table has its own header.
    assert json.loads(run_cli("list", "-o", "json", "--header", conn=db_url).stdout)[0]["key"] == "job_id"


def test_tabs_newlines_and_backslashes_inside_values_keep_one_record_per_line(db_url):
    awkward = "tab\there\nnew line\\n not a newline\r\u2028\x1b[31m"
    backend = MetastoreBackend(make_engine(db_url))
    backend.set(TaskScope("etl", "run\t1", "extract"), awkward, "1", expires_at=datetime(2020, 1, 1, tzinfo=UTC))
    backend.engine.dispose()
    from statestore_cli.cli.output.safe_text import plain_field

    escaped = "tab\\there\\nnew line\\\\n not a newline\\r\\u2028\\x1b[31m"
    assert plain_field(awkward) == escaped
    listed = run_cli("list", conn=db_url).stdout
    assert listed.count("\n") == 1 and listed.split("\t")[2] == "run\\t1" and listed.split("\t")[5] == escaped
    dry = run_cli("clean", "--dry-run", conn=db_url).stdout
    assert dry == f"etl\trun\\t1\textract\t-1\t{escaped}\t2020-01-01 00:00:00 UTC\n"


def _unescape_plain(field: str) -> str:
    """The reverse of the plain format's escaping, as docs/scripting.md states it (a reader's own decoder)."""
    out, i = [], 0
    simple = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
    while i < len(field):
        if field[i] != "\\":
            out.append(field[i])
            i += 1
        elif field[i + 1] in simple:
            out.append(simple[field[i + 1]])
            i += 2
        else:
            width = 2 if field[i + 1] == "x" else 4
            out.append(chr(int(field[i + 2 : i + 2 + width], 16)))
            i += 2 + width
    return "".join(out)


def test_a_literal_escape_and_the_character_it_names_print_apart_and_read_back(db_url):
    literal, real = "C:\\temp\\x1b", "C:\\temp\x1b"  # backslash-x-1-b as text; an ESC character
    for key in (literal, real):
        run_cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "t", key, "1", conn=db_url)
    keys = [line.split("\t")[5] for line in run_cli("list", "-o", "plain", conn=db_url).stdout.splitlines()]
    assert len(set(keys)) == 2 and "\x1b" not in "".join(keys)  # two fields, no raw ESC on the terminal
    assert sorted(_unescape_plain(k) for k in keys) == sorted([literal, real])


def test_dry_run_plain_rows_on_stdout_count_on_stderr(db_url):
    expired = seed_many(db_url)
    dry = run_cli("clean", "--dry-run", "-o", "plain", conn=db_url)
    lines = dry.stdout.splitlines()
    assert len(lines) == expired and all(line.count("\t") == 5 for line in lines)  # what `wc -l` and `cut` see
    assert dry.stderr.startswith(f"dry run: {expired:,} expired task keys would be deleted (expired before ")
    headed = run_cli("clean", "--dry-run", "--header", conn=db_url).stdout.splitlines()
    assert headed[0] == "dag_id\trun_id\ttask_id\tmap_index\tkey\texpires_at"
    assert headed[1:] == lines


def test_a_real_clean_in_plain_output_prints_its_report_as_records(db_url):
    expired = seed_many(db_url)
    done = run_cli("clean", "--batch-size", "300", "--header", conn=db_url)
    assert done.exit_code == 0, done.output
    fields = dict(line.split("\t") for line in done.stdout.splitlines())
    assert list(fields) == [
        "field",
        "dry_run",
        "deleted",
        "complete",
        "stopped",
        "batches",
        "batch_size",
        "cutoff",
        "older_than_seconds",
        "elapsed_seconds",
        "rows_per_second",
    ]
    assert fields["field"] == "value"
    assert (fields["deleted"], fields["complete"], fields["stopped"]) == (str(expired), "true", "-")
    assert (fields["batches"], fields["batch_size"]) == (str(-(-expired // 300)), "300")
    assert fields["older_than_seconds"] == "0"
    assert done.stderr.startswith(
        f"deleted {expired:,} expired task keys in {-(-expired // 300)} batches of up to 300 "
    )


def test_config_show_db_check_and_stats_headers(db_url):
    config = run_cli("config", "show", "--header", conn=db_url).stdout.splitlines()
    assert config[0] == "option\tvalue\tsource"
    assert all(line.count("\t") == 2 for line in config)
    assert run_cli("config", "show", conn=db_url).stdout.splitlines() == config[1:]
    check = run_cli("db", "check", "-o", "plain", "--header", conn=db_url).stdout.splitlines()
    assert check[:3] == ["field\tvalue", "ok\ttrue", f"database\t{db_url}"]
    assert run_cli("db", "check", "-o", "plain", conn=db_url).stdout.splitlines() == check[1:]
    stats = run_cli("stats", "--header", conn=db_url).stdout.splitlines()
    assert stats[0] == "section\tname\tvalue"
    assert run_cli("stats", conn=db_url).stdout.splitlines()[0].startswith("stats\tnow\t")


def test_messages_for_people_go_to_stderr_when_stdout_is_not_a_terminal(db_url):
    scope = ("--dag-id", "etl", "--run-id", "r1", "--task-id", "extract")
    results = [
        run_cli("set", *scope, "k", "1", conn=db_url),
        run_cli("delete", *scope, "k", conn=db_url),
        run_cli("clear", *scope, "--yes", conn=db_url),
        run_cli("clean", "--dry-run", conn=db_url),
    ]
    assert [(r.exit_code, r.stdout) for r in results] == [(0, "")] * 4
    assert [r.stderr.split(" ")[0] for r in results] == ["set", "deleted", "nothing", "dry"]


def test_plain_booleans_are_written_as_json_writes_them(db_url):
    """`ok`, `dry_run`, `clear_on_success`...: `true`/`false` in plain output as in JSON, not Python's True."""
    plain = dict(line.split("\t", 1) for line in run_cli("db", "check", "-o", "plain", conn=db_url).stdout.splitlines())
    document = json.loads(run_cli("db", "check", "-o", "json", conn=db_url).stdout)
    assert (plain["ok"], document["ok"]) == ("true", True)
    config = run_cli("config", "show", "-o", "plain", conn=db_url).stdout.splitlines()
    assert "state_store.clear_on_success\tfalse\tdefault" in config


def test_the_docs_say_which_plain_records_have_which_timestamps(db_url, tmp_path):
    """The claim of docs/scripting.md, checked against what `list`, `clean --dry-run`, `stats` and `clean` print."""
    readme = " ".join((Path(__file__).parent.parent / "docs" / "scripting.md").read_text(encoding="utf-8").split())
    assert (
        "Timestamps are `YYYY-MM-DD HH:MM:SS UTC` in the records of `list`, `clean --dry-run` and `orphans`, and "
        "ISO 8601 with microseconds (`2026-11-30T03:17:00.123456+00:00`, as in JSON) in the records of `stats` "
        "(`now`, `oldest_updated_at`, `newest_updated_at`) and of a `clean`'s report (`cutoff`)"
    ) in readme
    human = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00"
    scope = ("--dag-id", "etl", "--run-id", "r1", "--task-id", "extract")
    run_cli("set", *scope, "old", "1", "--expires-at", "2020-01-01T00:00:00Z", "--force", conn=db_url)
    listed = run_cli("list", "-o", "plain", conn=db_url).stdout.splitlines()[0].split("\t")
    assert re.fullmatch(human, listed[-2]) and re.fullmatch(human, listed[-1]), listed
    expired = run_cli("clean", "--dry-run", "-o", "plain", conn=db_url).stdout.splitlines()[0].split("\t")
    assert re.fullmatch(human, expired[-1]), expired
    stats = {
        tuple(line.split("\t")[:2]): line.split("\t")[2] for line in run_cli("stats", conn=db_url).stdout.splitlines()
    }
    for field in (("stats", "now"), ("task", "oldest_updated_at"), ("task", "newest_updated_at")):
        assert re.fullmatch(iso, stats[field]), (field, stats[field])
    report = dict(line.split("\t", 1) for line in run_cli("clean", "-o", "plain", conn=db_url).stdout.splitlines())
    assert re.fullmatch(iso, report["cutoff"]), report
