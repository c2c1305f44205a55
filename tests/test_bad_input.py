"""The "Bad input" table of docs/errors.md, row by row: each bad input gets its one-line message and exit code,
and leaves the database byte-for-byte (SQLite) or row-for-row (servers) as it was.

``CASES`` (``bad_input_cases.py``) is the table; ``test_the_documented_table_lists_every_case`` holds
docs/errors.md to it.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from bad_input_cases import CASES, TASK, Case, seed, seed_keys
from cli_running import run_cli, run_statestore_process
from paths import REPO
from sqlalchemy import make_url
from stores import isolated_database, mariadb_store, postgresql_store, sql

from statestore_cli.cli.options import MAX_BATCH_SIZE, MAX_IMPORT_BATCH_SIZE
from statestore_cli.db.database import mask_url

# -- the store every case runs against: some task keys (one expired), an asset key ---------------------------


def snapshot(url: str) -> object:
    """The database as bytes (SQLite) or as every row of every state store table (servers)."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        extra = [p for p in path.parent.iterdir() if p.name.startswith(path.name) and p != path]
        return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(p.name for p in extra)
    tables = ("task_state_store", "asset_state_store", "dag_run", "asset", "asset_active")
    return {t: sorted(map(repr, sql(url, f"SELECT * FROM {t}"))) for t in tables}


def params() -> Iterator[object]:
    for case in CASES:
        for engine in case.engines:
            yield pytest.param(case, engine, id=f"{case.id}-{engine}")


@contextmanager
def bare_database(engine: str, tmp_path: Path) -> Iterator[str]:
    """A database without the state store tables."""
    if engine == "sqlite":
        tmp_path.mkdir()
        path = tmp_path / "bare.db"
        sqlite3.connect(path).close()
        yield f"sqlite:///{path}"
        return
    with isolated_database(engine, tmp_path) as url:
        yield url


@contextmanager
def seeded_store(engine: str, tmp_path: Path) -> Iterator[str]:
    """A store with ``seed``'s keys: on a server, the worker's store its earlier test left, emptied
    (``postgresql_store``, ``mariadb_store``); on SQLite a new file."""
    if engine == "sqlite":
        with isolated_database(engine, tmp_path) as url:
            seed(url)
            yield url
        return
    with (postgresql_store if engine == "postgresql" else mariadb_store)() as url:
        seed_keys(url)
        yield url


@pytest.mark.parametrize("case, engine", list(params()))
def test_bad_input(case: Case, engine: str, tmp_path, monkeypatch, clean_environment):
    with ExitStack() as stack:
        url = stack.enter_context(seeded_store(engine, tmp_path))
        before = snapshot(url)
        fill = {"url": url, "home": str(clean_environment), "cfg": str(tmp_path / "airflow.cfg"), "bare": ""}
        fill["bare_conn"] = ""
        conn = url
        if case.conn is not None and "{bare}" in case.conn:
            conn = stack.enter_context(bare_database(engine, tmp_path / "bare"))
            fill["bare"] = mask_url(make_url(conn))
            fill["bare_conn"] = shlex.quote(conn)
        elif case.conn is not None:
            conn = case.conn.format(**fill)
        args: list[str] = []
        if case.cfg is not None:
            Path(fill["cfg"]).write_bytes(case.cfg if isinstance(case.cfg, bytes) else case.cfg.encode())
            args += ["--config", fill["cfg"]]
        for name, value in (case.env or {}).items():
            monkeypatch.setenv(name, value)
        given = [arg.replace("{cfg}", fill["cfg"]).replace("{home}", fill["home"]) for arg in case.args]
        result = run_cli(*args, *given, conn=conn or None)
        assert result.exit_code == case.code, result.output
        kind = "warning" if case.warning else "error"
        assert result.stderr.splitlines()[0] == f"statestore: {kind}: {case.message.format(**fill)}", result.output
        if not case.warning:
            assert result.stderr.count("\n") == 1 and result.stdout == "", result.output
        assert "Traceback" not in result.stdout + result.stderr and "s3cret" not in result.stdout + result.stderr
        assert snapshot(url) == before


# -- what the table cannot hold: the file system and other processes -----------------------------------------
def test_an_unreadable_config_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file: an unreadable config file cannot be set up as root")
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text("[state_store]\n")
    cfg.chmod(0)
    result = run_cli("--config", str(cfg), "list")
    assert result.exit_code == 2
    assert result.stderr == f"statestore: error: cannot read config file {cfg}: [Errno 13] Permission denied: '{cfg}'\n"


@pytest.fixture
def read_only_store(tmp_path: Path) -> Iterator[str]:
    """A store on a filesystem mounted read-only (root can write any file whatever its mode)."""
    where = tmp_path / "ro"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); a read-only store needs one")
    try:
        url = f"sqlite:///{where / 'airflow.db'}"
        # Written by processes of their own: this one must hold no file on the mount it makes read-only.
        assert run_statestore_process("--conn", url, "db", "init").exit_code == 0
        assert run_statestore_process("--conn", url, "set", *TASK, "k", '"old"').exit_code == 0
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield url
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("args", [("set", *TASK, "k", '"new"'), ("clean",), ("clear", *TASK, "--yes")])
def test_a_read_only_sqlite_store(read_only_store, args):
    before = snapshot(read_only_store)
    # A process of its own: an in-process run would keep the file open, and the mount busy, until the end.
    result = run_statestore_process("--conn", read_only_store, *args)
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"statestore: error: database error on {read_only_store}: attempt to write a readonly database; the file, "
        "its directory or the filesystem is read-only for this user: write as a user that may, or use a writable copy\n"
    )
    assert snapshot(read_only_store) == before
    assert run_statestore_process("--conn", read_only_store, "get", *TASK, "k").stdout == '"old"\n'  # reads work


def test_the_documented_table_lists_every_case():
    page = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    table = page[page.index("\n## Bad input\n") :]
    table = table[: table.index("\n## ", 1)]
    for case in CASES:
        row = next((line for line in table.splitlines() if line.startswith(f"| {case.readme} |")), None)
        assert row is not None, f"the bad input table of docs/errors.md has no row for: {case.readme}"
        assert row.rstrip().endswith(f"| {case.code} |"), row


@pytest.mark.parametrize(
    ("value", "rest"),
    [("-1", ()), ("-1.5", ("--retention", "1d")), ("-0.25", ())],
)
def test_a_negative_value_says_it_goes_after_double_dash(tmp_path, value, rest):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert run_cli("db", "init", conn=url).exit_code == 0
    run = run_cli("set", *TASK, "k", value, *rest, conn=url)
    fixed = " ".join(("--conn", url, "set", *TASK, "k", *rest, "--", value))
    assert (run.exit_code, run.stdout) == (2, "")
    assert run.stderr == (
        f"statestore: error: No such option: {value}; a value starting with - goes after --: statestore {fixed}\n"
    )
    assert run_cli(*fixed.split()[2:], conn=url).exit_code == 0
    assert run_cli("get", *TASK, "k", conn=url).stdout == f"{value}\n"


# -- one --batch-size for every command that writes in batches ------------------------------------------------
@pytest.mark.parametrize(
    ("args", "largest"),
    [
        (("clean",), MAX_BATCH_SIZE),
        (("clean", "--dry-run"), MAX_BATCH_SIZE),
        (("clear", "--dag-id", "d", "--yes"), MAX_BATCH_SIZE),
        (("assets", "sweep", "--yes"), MAX_BATCH_SIZE),
        (("import", "-"), MAX_IMPORT_BATCH_SIZE),
    ],
    ids=["clean", "clean-dry-run", "clear", "assets-sweep", "import"],
)
def test_every_batch_size_refuses_one_over_its_largest_in_the_same_words(tmp_path, args, largest):
    """clean, clear, assets sweep and import share one --batch-size: one over the largest is a usage error
    worded alike, before anything is read or written; the largest itself is taken."""
    with isolated_database("sqlite", tmp_path) as url:
        seed(url)
        before = snapshot(url)
        export = run_cli("export", conn=url).stdout
        over = run_cli(*args, "--batch-size", str(largest + 1), conn=url, input=export)
        assert (over.exit_code, over.stdout) == (2, ""), over.output
        assert over.stderr == f"statestore: error: --batch-size {largest + 1} is too large; the largest is {largest}\n"
        assert snapshot(url) == before
        at_most = run_cli(*args, "--batch-size", str(largest), conn=url, input=export)
        assert at_most.exit_code == 0, at_most.output


def test_the_imports_largest_batch_is_the_librarys():
    """The CLI spells it out so that ``import --help`` need not load SQLAlchemy; the two must agree."""
    from statestore_cli.ops import transfer

    assert transfer.MAX_BATCH_SIZE == MAX_IMPORT_BATCH_SIZE
