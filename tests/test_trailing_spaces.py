"""Keys, ids and asset names that differ only in trailing spaces, on every engine.

SQLite and PostgreSQL compare text exactly, so ``a`` and ``a `` are two keys there. MySQL/MariaDB's
collations ignore trailing spaces, in a ``WHERE`` and in a unique index: lookups must still be exact,
and a write that its unique index would land on such a twin is refused (exit 2) with nothing written.
Asset names and uris are latin1 there: a filter outside it is bad input (exit 2), not a database error.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, text
from stores import sql

from statestore_cli.backends.metastore import task_where
from statestore_cli.db.database import make_engine
from statestore_cli.db.layout import AIRFLOW_33
from statestore_cli.db.schema import asset, asset_state_store, task_state_store
from statestore_cli.model.scopes import TaskScope

ALL_ENGINES = True
TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")
SCOPE = "dag_id=d run_id=r task_id=t map_index=-1"
WHY = (
    "differ only in trailing spaces (MySQL/MariaDB unique indexes ignore trailing spaces), "
    "so they cannot be stored apart"
)


def _mysql(url: str) -> bool:
    return url.startswith("mysql")


def _task_rows(url: str) -> list[tuple]:
    rows = sql(url, "SELECT dag_id, run_id, task_id, map_index, {key}, value FROM task_state_store")
    return sorted(rows)


def _asset_rows(url: str) -> list[tuple]:
    query = "SELECT a.name, a.uri, s.{key}, s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id"
    return sorted(sql(url, query))


def _runs(url: str) -> list[tuple]:
    return sorted(sql(url, "SELECT dag_id, run_id FROM dag_run"))


def _assets(url: str) -> list[tuple]:
    return sorted(sql(url, "SELECT name, uri FROM asset"))


def _value(cli, *args: str) -> object:
    result = cli("get", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["value"]


def _refused(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr == f"statestore: error: {message}\n"
    assert result.stdout == ""


# -- task keys ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("first, second", [("a", "a "), ("a ", "a")], ids=["space-second", "space-first"])
def test_set_of_a_key_beside_its_twin(cli, db_url, first, second):
    assert cli("set", *TASK, first, "1").exit_code == 0
    result = cli("set", *TASK, second, "2")
    if _mysql(db_url):
        _refused(result, f"cannot write key {second!r} for {SCOPE}: key {second!r} and the stored key {first!r} {WHY}")
        assert _task_rows(db_url) == [("d", "r", "t", -1, first, "1")]
        assert cli("get", *TASK, second).exit_code == 1  # the stored key is not this one
    else:
        assert result.exit_code == 0, result.output
        assert _task_rows(db_url) == sorted([("d", "r", "t", -1, first, "1"), ("d", "r", "t", -1, second, "2")])
        assert _value(cli, *TASK, second) == 2
    assert _value(cli, *TASK, first) == 1


def test_get_delete_list_and_clear_never_reach_a_twin(cli, db_url):
    assert cli("set", *TASK, "a", "1").exit_code == 0

    missing = cli("get", *TASK, "a ")
    assert missing.exit_code == 1
    assert missing.stderr == f"statestore: error: no key 'a ' for {SCOPE}\n"

    deleted = cli("delete", *TASK, "a ")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stderr == f"no such key, nothing deleted: 'a ' for {SCOPE}\n"

    assert json.loads(cli("list", "--key", "a ", "-o", "json").stdout) == []
    assert json.loads(cli("list", "--dag-id", "d ", "-o", "json").stdout) == []
    assert json.loads(cli("list", "--task-id", "t ", "-o", "json").stdout) == []
    exported = cli("export", "--key", "a ")
    assert exported.exit_code == 0, exported.output
    assert exported.stdout == ""

    cleared = cli("clear", "--dag-id", "d", "--run-id", "r", "--task-id", "t ", "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert cleared.stderr == "nothing to clear: no keys for dag_id=d run_id=r task_id=t  map_index=-1\n"
    for whole in (("--dag-id", "d ", "--run-id", "r"), ("--dag-id", "d", "--run-id", "r "), ("--dag-id", "d ")):
        result = cli("clear", *whole, "--yes")
        assert result.exit_code == 0, result.output
        assert result.stderr.startswith("nothing to clear"), result.output
    assert _task_rows(db_url) == [("d", "r", "t", -1, "a", "1")]


def test_tasks_differing_by_a_trailing_space_keep_their_own_keys(cli, db_url):
    """``t`` and ``t `` may both hold keys (different ones on MySQL, where the unique index includes the key)."""
    other = ("--dag-id", "d", "--run-id", "r", "--task-id", "t ")
    assert cli("set", *TASK, "a", "1").exit_code == 0
    assert cli("set", *other, "b", "2").exit_code == 0
    listed = json.loads(cli("list", "--task-id", "t ", "-o", "json").stdout)
    assert [(e["task_id"], e["key"]) for e in listed] == [("t ", "b")]
    assert cli("get", *other, "a").exit_code == 1
    assert _value(cli, *other, "b") == 2

    same_key = cli("set", *other, "a", "3")
    if _mysql(db_url):
        message = "cannot write key 'a' for dag_id=d run_id=r task_id=t  map_index=-1: "
        _refused(same_key, message + f"task_id 't ' and the stored task_id 't' {WHY}")
    else:
        assert same_key.exit_code == 0, same_key.output

    cleared = cli("clear", *other, "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert _task_rows(db_url) == [("d", "r", "t", -1, "a", "1")]


def test_a_run_differing_by_a_trailing_space(cli, db_url):
    assert cli("set", *TASK, "a", "1").exit_code == 0
    twin_run = cli("set", "--dag-id", "d", "--run-id", "r ", "--task-id", "t", "a", "2")
    twin_dag = cli("set", "--dag-id", "d ", "--run-id", "r", "--task-id", "t", "a", "3")
    if _mysql(db_url):
        _refused(twin_run, f"cannot write dag run dag_id='d' run_id='r ': run_id 'r ' and the stored run_id 'r' {WHY}")
        _refused(twin_dag, f"cannot write dag run dag_id='d ' run_id='r': dag_id 'd ' and the stored dag_id 'd' {WHY}")
        assert _runs(db_url) == [("d", "r")]
        assert _task_rows(db_url) == [("d", "r", "t", -1, "a", "1")]
    else:
        assert (twin_run.exit_code, twin_dag.exit_code) == (0, 0)
        assert _runs(db_url) == [("d", "r"), ("d", "r "), ("d ", "r")]
    # Another run of the dag `d ` clashes with nothing: allowed everywhere.
    assert cli("set", "--dag-id", "d ", "--run-id", "other", "--task-id", "t", "a", "4").exit_code == 0
    assert json.loads(cli("list", "--dag-id", "d", "--run-id", "r", "-o", "json").stdout)[0]["key"] == "a"
    assert _value(cli, *TASK, "a") == 1


# -- asset keys ---------------------------------------------------------------------------------------------
def test_asset_names_and_keys_differing_by_a_trailing_space(cli, db_url):
    assert cli("set", "--asset-name", "n", "k", "1").exit_code == 0
    twin_asset = cli("set", "--asset-name", "n ", "k", "2")
    twin_key = cli("set", "--asset-name", "n", "k ", "3")
    if _mysql(db_url):
        _refused(
            twin_asset,
            f"cannot write asset name='n ' uri='n ': name 'n ', uri 'n ' and the stored name 'n', uri 'n' {WHY}",
        )
        _refused(twin_key, f"cannot write key 'k ' for name=n: key 'k ' and the stored key 'k' {WHY}")
        assert _assets(db_url) == [("n", "n")]
        assert _asset_rows(db_url) == [("n", "n", "k", "1")]
        assert cli("get", "--asset-name", "n ", "k").exit_code == 1
    else:
        assert (twin_asset.exit_code, twin_key.exit_code) == (0, 0)
        assert _asset_rows(db_url) == [("n", "n", "k", "1"), ("n", "n", "k ", "3"), ("n ", "n ", "k", "2")]
        assert _value(cli, "--asset-name", "n ", "k") == 2
    assert _value(cli, "--asset-name", "n", "k") == 1

    assert json.loads(cli("list", "--asset-name", "n ", "--key", "k ", "-o", "json").stdout) == []
    deleted = cli("delete", "--asset-name", "n", "k ")
    assert deleted.exit_code == 0, deleted.output
    assert _value(cli, "--asset-name", "n", "k") == 1
    cleared = cli("clear", "--asset-uri", "n ", "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert ("n", "n", "k", "1") in _asset_rows(db_url)


# -- import -------------------------------------------------------------------------------------------------
def _task_line(key: str, value: int, run_id: str = "r") -> str:
    line = {
        "store": "task",
        "dag_id": "d",
        "run_id": run_id,
        "task_id": "t",
        "map_index": -1,
        "key": key,
        "updated_at": "2026-11-30T00:00:00+00:00",
        "expires_at": None,
        "value": value,
    }
    return json.dumps(line) + "\n"


def _asset_line(name: str, key: str, value: int) -> str:
    line = {
        "store": "asset",
        "name": name,
        "uri": name,
        "key": key,
        "updated_at": "2026-11-30T00:00:00+00:00",
        "expires_at": None,
        "updated_by": None,
        "value": value,
    }
    return json.dumps(line) + "\n"


@pytest.mark.parametrize("dry_run", [False, True], ids=["import", "dry-run"])
def test_import_of_twins_in_one_file(cli, db_url, dry_run):
    lines = _task_line("a", 1) + _task_line("a ", 2)
    result = cli("import", "-", *(["--dry-run"] if dry_run else []), input=lines)
    if _mysql(db_url):
        done = "nothing was written (dry run)" if dry_run else "nothing was imported"
        _refused(
            result,
            f"line 2: cannot write key 'a ' for {SCOPE}: key 'a ' and line 1's key 'a' {WHY}; {done}",
        )
        assert _task_rows(db_url) == []
        assert _runs(db_url) == []
    else:
        assert result.exit_code == 0, result.output
        expected = [] if dry_run else [("d", "r", "t", -1, "a", "1"), ("d", "r", "t", -1, "a ", "2")]
        assert _task_rows(db_url) == expected


def test_import_of_twins_in_two_batches(cli, db_url):
    """The second batch meets the first's committed key: refused as beside a stored twin."""
    result = cli("import", "-", "--batch-size", "1", input=_task_line("a", 1) + _task_line("a ", 2))
    if _mysql(db_url):
        _refused(
            result,
            f"line 2: cannot write key 'a ' for {SCOPE}: key 'a ' and the stored key 'a' {WHY}; "
            "line 1 was imported, nothing after",
        )
        assert _task_rows(db_url) == [("d", "r", "t", -1, "a", "1")]
    else:
        assert result.exit_code == 0, result.output
        assert _task_rows(db_url) == [("d", "r", "t", -1, "a", "1"), ("d", "r", "t", -1, "a ", "2")]


def test_import_of_runs_and_assets_differing_by_a_trailing_space(cli, db_url):
    runs = cli("import", "-", input=_task_line("a", 1, "r") + _task_line("a", 2, "r "))
    assets = cli("import", "-", input=_asset_line("n", "k", 1) + _asset_line("n ", "k", 2))
    if _mysql(db_url):
        _refused(
            runs,
            f"line 2: cannot write dag run dag_id='d' run_id='r ': run_id 'r ' and line 1's run_id 'r' {WHY}; "
            "nothing was imported",
        )
        _refused(
            assets,
            "line 2: cannot write asset name='n ' uri='n ': name 'n ', uri 'n ' and line 1's name 'n', uri 'n' "
            f"{WHY}; nothing was imported",
        )
        assert (_runs(db_url), _assets(db_url), _task_rows(db_url), _asset_rows(db_url)) == ([], [], [], [])
    else:
        assert (runs.exit_code, assets.exit_code) == (0, 0), runs.output + assets.output
        assert _runs(db_url) == [("d", "r"), ("d", "r ")]
        assert _asset_rows(db_url) == [("n", "n", "k", "1"), ("n ", "n ", "k", "2")]


def test_import_beside_stored_twins(cli, db_url):
    assert cli("set", *TASK, "a", "1").exit_code == 0
    assert cli("set", "--asset-name", "n", "k", "1").exit_code == 0
    # The first line is fine on every engine; the batch holding it is refused with the twin.
    keys = cli("import", "-", input=_task_line("b", 5) + _task_line("a ", 2))
    asset_keys = cli("import", "-", input=_asset_line("n", "k ", 3))
    assets = cli("import", "-", input=_asset_line("n ", "k", 4))
    if _mysql(db_url):
        _refused(
            keys,
            f"line 2: cannot write key 'a ' for {SCOPE}: key 'a ' and the stored key 'a' {WHY}; nothing was imported",
        )
        _refused(
            asset_keys,
            f"line 1: cannot write key 'k ' for asset name=n uri=n: key 'k ' and the stored key 'k' {WHY}; "
            "nothing was imported",
        )
        _refused(
            assets,
            "line 1: cannot write asset name='n ' uri='n ': name 'n ', uri 'n ' and the stored name 'n', uri 'n' "
            f"{WHY}; nothing was imported",
        )
        assert _task_rows(db_url) == [("d", "r", "t", -1, "a", "1")]
        assert _asset_rows(db_url) == [("n", "n", "k", "1")]
        assert _assets(db_url) == [("n", "n")]
    else:
        assert (keys.exit_code, asset_keys.exit_code, assets.exit_code) == (0, 0, 0)
        assert len(_task_rows(db_url)) == 3
        assert len(_asset_rows(db_url)) == 3


# -- asset text outside latin1 --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ("list", "--asset-name", "\u0101"),
        ("list", "--asset-uri", "s3://b/\u4e2d"),
        ("stats", "--asset-name", "\u0101", "-o", "json"),
        ("export", "--asset-uri", "s3://b/\u4e2d"),
        ("get", "--asset-name", "\u0101", "k"),
        ("delete", "--asset-name", "\u0101", "k"),
        ("clear", "--asset-name", "\u0101", "--yes"),
        ("assets", "delete", "--asset-name", "\u0101", "--yes"),
    ],
    ids=lambda args: "-".join(a for a in args if a.startswith("--asset") or a.isalpha()),
)
def test_asset_filters_outside_latin1(cli, db_url, args):
    result = cli(*args)
    if _mysql(db_url):
        what, text_ = ("uri", "s3://b/\u4e2d") if "--asset-uri" in args else ("name", "\u0101")
        _refused(
            result,
            f"asset {what} {text_!r} holds {text_[-1]!r}, outside latin1: MySQL and MariaDB store asset names and "
            "uris as latin1, as Airflow's schema does there",
        )
    else:
        assert result.exit_code in (0, 1), result.output  # nothing matches: empty, or "no such key/asset"
        assert "error: database" not in result.stderr


def test_windows_1252_characters_are_latin1_on_mysql(cli, db_url):
    """MySQL's latin1 is Windows-1252: the euro sign and curly quotes are asset text it holds."""
    name = "\u20ac \u201cq\u201d \u0152"
    assert cli("set", "--asset-name", name, "k", "1").exit_code == 0
    listed = json.loads(cli("list", "--asset-name", name, "-o", "json").stdout)
    assert [(e["name"], e["key"]) for e in listed] == [(name, "k")]


# -- the lookups still use their indexes ---------------------------------------------------------------------
@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_exact_lookups_still_seek_the_index(cli, db_url):
    assert cli("set", *TASK, "a", "1").exit_code == 0
    assert cli("set", "--asset-name", "n", "k", "1").exit_code == 0
    engine = make_engine(db_url)
    queries = {
        "idx_task_state_store_lookup": select(task_state_store.c.value).where(
            task_where(AIRFLOW_33, TaskScope("d", "r", "t"), "a")
        ),
        "PRIMARY": select(asset_state_store.c.value).where(
            asset_state_store.c.asset_id == 1, asset_state_store.c.key == "k"
        ),
        "idx_asset_name_uri_unique": select(asset.c.id).where(asset.c.name == "n", asset.c.uri == "n"),
    }
    try:
        with engine.connect() as conn:
            for index, query in queries.items():
                compiled = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
                assert "CHAR_LENGTH" in compiled
                plan = conn.execute(text(f"EXPLAIN {compiled}")).mappings().all()
                assert [row["key"] for row in plan] == [index], plan
    finally:
        engine.dispose()
