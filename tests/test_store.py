"""One store per command: a CLI command, or a library caller's run of operations, works on one ``Store``,
with one engine, closed at its end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import Pool

from statestore_cli import Store, TaskScope, load_settings
from statestore_cli.db.database import Database
from statestore_cli.errors import SchemaMissingError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.ops.db_report import db_init
from statestore_cli.ops.keys import clear_scope, get_entry, set_value
from statestore_cli.ops.lifecycle import task_instance_succeeded
from statestore_cli.ops.listing import list_entries

SCOPE = TaskScope("etl", "manual__1", "load")
TASK = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "load")


@contextmanager
def engines_used() -> Iterator[list[Database | None]]:
    """The ``Database`` of every connection any engine opens meanwhile (None: an engine made elsewhere)."""
    seen: list[Database | None] = []

    def connected(conn: Connection) -> None:
        seen.append(Database.of(conn))

    event.listen(Engine, "engine_connect", connected)
    try:
        yield seen
    finally:
        event.remove(Engine, "engine_connect", connected)


def test_clear_with_a_backup_on_a_task_uses_one_engine(cli, tmp_path: Path):
    cli("set", *TASK, "job_id", '"j-1"')
    cli("set", *TASK, "cursor", "7")
    backup = tmp_path / "clear.jsonl"
    with engines_used() as seen:
        result = cli("clear", *TASK, "--backup", str(backup), "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 2 keys" in result.output
    assert len(backup.read_text().splitlines()) == 2
    assert seen and None not in seen  # every connection is of an engine a Store made
    assert len({id(database) for database in seen}) == 1  # the count, the backend check and the clear: one engine


def test_a_command_closes_what_its_store_opened(cli):
    cli("set", *TASK, "job_id", '"j-1"')
    opened: list[object] = []
    closed: list[object] = []

    def on_connect(dbapi: object, _record: object) -> None:
        opened.append(dbapi)

    def on_close(dbapi: object, _record: object) -> None:
        closed.append(dbapi)

    event.listen(Pool, "connect", on_connect)
    event.listen(Pool, "close", on_close)
    try:
        result = cli("get", *TASK, "job_id")
    finally:
        event.remove(Pool, "connect", on_connect)
        event.remove(Pool, "close", on_close)
    assert result.exit_code == 0 and '"j-1"' in result.output
    assert opened and closed == opened  # closed when the command ended, not left to the garbage collector


def test_a_failed_lookup_names_other_map_indices_on_the_same_engine(cli):
    cli("set", "--dag-id", "etl", "--run-id", "manual__1", "--task-id", "load", "--map-index", "2", "job_id", "1")
    with engines_used() as seen:
        result = cli("delete", *TASK, "job_id")
    assert "no such key, nothing deleted" in result.output
    assert "--map-index N" in result.output
    assert len({id(database) for database in seen}) == 1


def test_store_as_a_context_manager_closes_its_connections(db_url: str):
    opened: list[object] = []
    closed: list[object] = []
    with Store.open(load_settings(conn_override=db_url)) as store:
        engine = store.engine
        event.listen(engine, "connect", lambda dbapi, _record: opened.append(dbapi))
        event.listen(engine, "close", lambda dbapi, _record: closed.append(dbapi))
        set_value(store, SCOPE, "job_id", "j-1")
        assert engine.pool.checkedin() == 1  # pooled, for the next operation of the same store
    assert opened and closed == opened  # every connection it opened was closed
    assert engine.pool.checkedin() == 0


def test_a_library_caller_runs_several_operations_on_one_store(db_url: str):
    settings = load_settings(conn_override=db_url, environ={"AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS": "True"})
    other = TaskScope("etl", "manual__1", "submit")
    with engines_used() as seen, Store.open(settings) as store:
        set_value(store, SCOPE, "job_id", {"id": "j-1"})
        set_value(store, other, "cursor", 7)
        assert get_entry(store, SCOPE, "job_id").value == {"id": "j-1"}
        assert [entry.key for entry in list_entries(store, KeyFilter(dag_id="etl"))] == ["job_id", "cursor"]
        assert task_instance_succeeded(store, SCOPE) == 1  # clear_on_success
        assert clear_scope(store, other) == 1
        assert list(list_entries(store, KeyFilter(dag_id="etl"))) == []
    assert len({id(database) for database in seen}) == 1
    assert len(seen) >= 7  # one engine, connected for each operation


def test_a_store_connects_on_first_use_only(tmp_path: Path):
    missing = tmp_path / "none.db"
    store = Store.open(load_settings(conn_override=f"sqlite:///{missing}"))
    store.close()  # nothing was opened: nothing to close, and no file was made
    assert not missing.exists()
    try:
        store.engine  # noqa: B018
    except SchemaMissingError as exc:
        assert f"no state store at {missing}" in str(exc)
    else:
        raise AssertionError("a missing SQLite file was opened")
    with Store.open(load_settings(conn_override=f"sqlite:///{missing}"), create_file=True) as made:
        assert db_init(made).created_file == str(missing.resolve())
    assert missing.stat().st_mode & 0o777 == 0o600
