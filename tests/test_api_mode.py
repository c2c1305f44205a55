"""API mode (``--api-url``): the commands on one task instance's or asset's keys through Airflow 3.3.2's own
api-server (``api_server``), each answer compared with the same command on the database behind it; both ways
of authenticating; and each failure one line with its exit code, the token never shown."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from api_server import ASSET_NAME, ASSET_URI, DAG_ID, PASSWORDS, ApiServer
from cli_running import LOADED_PROBE, Result, run_cli
from metrics_files import read_samples
from terminals import Terminal, terminal_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("airflow-api")]

_TOKENS: dict[str, str] = {}


def token(server: ApiServer, user: str = "admin") -> str:
    if user not in _TOKENS:
        _TOKENS[user] = server.token(user)
    return _TOKENS[user]


@pytest.fixture
def api(airflow_api: ApiServer, monkeypatch: pytest.MonkeyPatch) -> ApiServer:
    """The api-server, with an admin's token in ``$STATESTORE_API_TOKEN``."""
    monkeypatch.setenv("STATESTORE_API_TOKEN", token(airflow_api))
    return airflow_api


def over_api(server: ApiServer, *args: str) -> Result:
    return run_cli("--api-url", server.url, *args)


def on_db(server: ApiServer, *args: str) -> Result:
    return run_cli(*args, conn=server.conn)


def task(server: ApiServer, task_id: str = "load", map_index: int = -1) -> list[str]:
    return ["--dag-id", DAG_ID, "--run-id", server.run_id, "--task-id", task_id, "--map-index", str(map_index)]


def test_set_then_get_gives_what_the_database_holds(api: ApiServer) -> None:
    done = over_api(api, "set", *task(api), "job_id", '{"job": 42, "region": "eu"}')
    assert done.exit_code == 0, done.output
    through_api = over_api(api, "get", *task(api), "job_id", "-o", "json")
    from_db = on_db(api, "get", *task(api), "job_id", "-o", "json")
    assert through_api.exit_code == 0, through_api.output
    assert from_db.exit_code == 0, from_db.output
    assert json.loads(through_api.stdout) == json.loads(from_db.stdout)
    assert json.loads(through_api.stdout)["value"] == {"job": 42, "region": "eu"}


def test_set_without_retention_takes_the_servers_default(api: ApiServer) -> None:
    """No --retention: the server applies its own default_retention_days (30 days), as a task's write does."""
    before = datetime.now(UTC)
    done = over_api(api, "set", *task(api), "watermark", "7")
    assert done.exit_code == 0, done.output
    stored = json.loads(on_db(api, "get", *task(api), "watermark", "-o", "json").stdout)
    expires = datetime.fromisoformat(stored["expires_at"])
    assert before + timedelta(days=30) - timedelta(minutes=5) <= expires <= datetime.now(UTC) + timedelta(days=30)
    assert expires.strftime("%Y-%m-%d %H:%M:%S UTC") in done.stderr  # the confirmation line


def test_retention_and_expires_at_become_the_stored_expiry(api: ApiServer) -> None:
    done = over_api(api, "set", *task(api), "forever", '"x"', "--retention", "never")
    assert done.exit_code == 0, done.output
    assert json.loads(on_db(api, "get", *task(api), "forever", "-o", "json").stdout)["expires_at"] is None
    done = over_api(api, "set", *task(api), "until", "1", "--expires-at", "2031-05-01T12:00:00+02:00")
    assert done.exit_code == 0, done.output
    stored = json.loads(on_db(api, "get", *task(api), "until", "-o", "json").stdout)
    assert datetime.fromisoformat(stored["expires_at"]) == datetime(2031, 5, 1, 10, tzinfo=UTC)


def test_keep_expiry_replaces_the_value_and_keeps_the_expiry(api: ApiServer) -> None:
    assert over_api(api, "set", *task(api), "kept", "1", "--retention", "3d").exit_code == 0
    first = json.loads(on_db(api, "get", *task(api), "kept", "-o", "json").stdout)
    done = over_api(api, "set", *task(api), "kept", "2", "--keep-expiry")
    assert done.exit_code == 0, done.output
    then = json.loads(on_db(api, "get", *task(api), "kept", "-o", "json").stdout)
    assert (then["value"], then["expires_at"]) == (2, first["expires_at"])
    missing = over_api(api, "set", *task(api), "never-written", "2", "--keep-expiry")
    assert missing.exit_code == 1, missing.output


def test_mapped_task_instances_and_list_of_a_dag_match_the_database(api: ApiServer) -> None:
    for index in (0, 2):
        done = over_api(api, "set", *task(api, "shard", index), "offset", str(index * 100))
        assert done.exit_code == 0, done.output
    for args in (["--dag-id", DAG_ID], ["--dag-id", DAG_ID, "--run-id", api.run_id, "--task-id", "shard"]):
        through_api = over_api(api, "list", *args, "-o", "json")
        from_db = on_db(api, "list", *args, "-o", "json")
        assert through_api.exit_code == 0, through_api.output
        assert json.loads(through_api.stdout) == json.loads(from_db.stdout)
    listed = json.loads(over_api(api, "list", *task(api, "shard", 2), "-o", "json").stdout)
    assert [(k["map_index"], k["key"]) for k in listed] == [(2, "offset")]


def test_delete_and_clear_report_what_went(api: ApiServer) -> None:
    for key in ("a", "b/with/slashes", "c"):
        assert over_api(api, "set", *task(api, "shard", 1), key, "1").exit_code == 0
    gone = over_api(api, "delete", *task(api, "shard", 1), "b/with/slashes")
    assert gone.exit_code == 0, gone.output
    again = over_api(api, "delete", *task(api, "shard", 1), "b/with/slashes")
    from_db = on_db(api, "delete", *task(api, "shard", 1), "b/with/slashes")
    assert (again.exit_code, again.stderr) == (from_db.exit_code, from_db.stderr)
    cleared = over_api(api, "clear", *task(api, "shard", 1), "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert cleared.stderr.startswith("deleted 2 keys of dag_id="), cleared.output
    listed = on_db(api, "list", *task(api, "shard", 1), "-o", "json")
    assert json.loads(listed.stdout) == []


def test_asset_keys_by_name_uri_or_id(api: ApiServer) -> None:
    by_name = ["--asset-name", ASSET_NAME]
    done = over_api(api, "set", *by_name, "watermark", '{"until": "2026-11-30"}')
    assert done.exit_code == 0, done.output
    for scope in (by_name, ["--asset-uri", ASSET_URI], ["--asset-id", str(api.asset_id)]):
        through_api = over_api(api, "get", *scope, "watermark", "-o", "json")
        assert through_api.exit_code == 0, through_api.output
        assert json.loads(through_api.stdout)["value"] == {"until": "2026-11-30"}
    through_api = over_api(api, "list", "--asset-name", ASSET_NAME, "-o", "json")
    from_db = on_db(api, "list", "--asset-name", ASSET_NAME, "-o", "json")
    assert json.loads(through_api.stdout) == json.loads(from_db.stdout)


def test_a_username_and_password_are_exchanged_for_a_token(airflow_api: ApiServer, monkeypatch) -> None:
    monkeypatch.setenv("STATESTORE_API_USERNAME", "viewer")
    monkeypatch.setenv("STATESTORE_API_PASSWORD", PASSWORDS["viewer"])
    done = over_api(airflow_api, "list", *task(airflow_api), "-o", "json")
    assert done.exit_code == 0, done.output
    refused = over_api(airflow_api, "set", *task(airflow_api), "viewer-write", "1")
    assert refused.exit_code == 2, refused.output
    assert "USER role" in refused.stderr and refused.stderr.count("\n") <= 2, refused.stderr


def test_airflowctl_token_variable_is_read(airflow_api: ApiServer, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CLI_TOKEN", token(airflow_api, "op"))
    done = over_api(airflow_api, "set", "--asset-name", ASSET_NAME, "by-op", "1")
    assert done.exit_code == 0, done.output


def test_a_wrong_token_is_one_line_and_never_shown(airflow_api: ApiServer, monkeypatch) -> None:
    secret = "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzUxMiJ9.not-a-real-token.signature-here"
    monkeypatch.setenv("STATESTORE_API_TOKEN", secret)
    refused = over_api(airflow_api, "get", *task(airflow_api), "job_id")
    assert refused.exit_code == 2, refused.output
    assert refused.stdout == "" and secret not in refused.stderr
    assert refused.stderr.startswith("statestore: error: the API at http://127.0.0.1:"), refused.stderr
    assert "did not accept the credentials from environment variable STATESTORE_API_TOKEN" in refused.stderr


def test_no_credentials_say_how_to_give_them(airflow_api: ApiServer) -> None:
    refused = over_api(airflow_api, "get", *task(airflow_api), "job_id")
    assert refused.exit_code == 2, refused.output
    assert "STATESTORE_API_TOKEN" in refused.stderr


def test_commands_the_api_cannot_serve_name_the_database_way(api: ApiServer) -> None:
    for args in (
        ["stats"],
        ["db", "init"],
        ["runs", "delete", "--dag-id", DAG_ID, "--run-id", "r"],
    ):
        refused = over_api(api, *args)
        assert refused.exit_code == 2, (args, refused.output)
        assert "--conn" in refused.stderr and refused.stdout == "", (args, refused.output)


def test_a_write_for_a_task_instance_or_run_airflow_has_not_is_refused_and_named(api: ApiServer) -> None:
    refused = over_api(api, "set", *task(api, "no_such_task"), "k", "1")
    assert refused.exit_code == 2, refused.output
    assert refused.stderr == (
        f"statestore: error: no task instance dag_id={DAG_ID} run_id={api.run_id} task_id=no_such_task "
        "map_index=-1 on this api-server; task keys can only be written for task instances Airflow created\n"
    )
    no_run = ["--dag-id", DAG_ID, "--run-id", "manual__2026-12-01T00:00:00+00:00", "--task-id", "load"]
    for args in (["set", *no_run, "k", "1"], ["get", *no_run, "k"], ["get", "--raw", *no_run, "k"]):
        through_api, from_db = over_api(api, *args), on_db(api, *args)
        assert (through_api.exit_code, through_api.stdout) == (from_db.exit_code, from_db.stdout), args
        assert through_api.stderr == from_db.stderr.replace("in this Airflow database", "on this api-server"), args
        assert "manual__2026-12-01T00:00:00+00:00 does not exist" in through_api.stderr or args[0] == "set"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port of 127.0.0.1 that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield int(server.getsockname()[1])
    server.close()
    for conn in held:
        conn.close()


def test_unreachable_and_silent_servers_are_one_line(monkeypatch, silent_port: int) -> None:
    monkeypatch.setenv("STATESTORE_API_TOKEN", "t0ken-value")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    refused = run_cli("--api-url", f"http://127.0.0.1:{closed}", "get", "--asset-id", "1", "k")
    assert refused.exit_code == 3, refused.output
    assert "connection refused" in refused.stderr
    silent = run_cli(
        "--api-url", f"http://127.0.0.1:{silent_port}", "--connect-timeout", "1s", "get", "--asset-id", "1", "k"
    )
    assert silent.exit_code == 3, silent.output
    assert "did not answer within 1s" in silent.stderr and "t0ken-value" not in silent.stderr


@pytest.mark.parametrize(
    "url",
    ["ftp://airflow.example.com", "https://admin:hunter2@airflow.example.com", "https://", "not a url"],
)
def test_a_bad_api_url_is_refused_before_any_request(url: str) -> None:
    refused = run_cli("--api-url", url, "get", "--asset-id", "1", "k")
    assert refused.exit_code == 2, refused.output
    assert "hunter2" not in refused.stderr and "--api-url" in refused.stderr


def test_clean_walks_the_api_and_deletes_what_a_clean_on_the_database_would(api: ApiServer, tmp_path) -> None:
    past = ["--expires-at", "2026-01-01T00:00:00+00:00", "--force"]
    for key in ("spark_job", "cursor"):
        assert over_api(api, "set", *task(api, "shard", 0), key, "1", *past).exit_code == 0
    assert over_api(api, "set", *task(api), "old_job", '"x"', *past).exit_code == 0
    assert over_api(api, "set", *task(api, "shard", 0), "fresh", "1", "--retention", "1d").exit_code == 0
    through_api = over_api(api, "clean", "--dry-run", "-o", "json")
    from_db = on_db(api, "clean", "--dry-run", "-o", "json")
    assert through_api.exit_code == 0, through_api.output
    planned = json.loads(through_api.stdout)
    assert planned["rows"] == json.loads(from_db.stdout)["rows"]
    assert [(r["task_id"], r["key"]) for r in planned["rows"]] == [
        ("load", "old_job"),
        ("shard", "cursor"),
        ("shard", "spark_job"),
    ]
    exported = on_db(api, "export", "--dag-id", DAG_ID)
    expired = [line for line in exported.stdout.splitlines() if '"2026-01-01T00:00:00+00:00"' in line]
    metrics, backup = tmp_path / "statestore_clean.prom", tmp_path / "b.jsonl"
    done = over_api(api, "clean", "-o", "json", "--metrics-file", str(metrics), "--backup", str(backup))
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["backup"] == {"file": str(backup), "lines": 3}
    assert backup.read_text().splitlines() == expired and len(expired) == 3  # what went, as an export has it
    assert oct(backup.stat().st_mode & 0o777) == "0o600"
    port = api.url.rsplit(":", 1)[1]
    samples = read_samples(metrics)  # labelled with the API's address, not a database's
    assert {dict(labels)["database"] for found in samples.values() for labels in found} == {f"127.0.0.1:{port}"}
    assert list(samples["statestore_clean_rows_deleted"].values()) == [3]
    report = json.loads(done.stdout)
    assert (report["deleted"], report["complete"]) == (3, True) and report["api_requests"] > 3
    left = json.loads(on_db(api, "list", *task(api, "shard", 0), "-o", "json").stdout)
    assert "fresh" in [k["key"] for k in left] and not {"spark_job", "cursor"} & {k["key"] for k in left}
    assert json.loads(on_db(api, "clean", "--dry-run", "-o", "json").stdout)["rows"] == []


def test_export_through_the_api_writes_the_lines_the_database_export_writes(api: ApiServer) -> None:
    assert (
        over_api(api, "set", *task(api, "shard", 2), "job", '{"id": "application_0042", "tries": [1, 2]}').exit_code
        == 0
    )
    assert over_api(api, "set", "--asset-uri", ASSET_URI, "cursor", '"2026-11-30"').exit_code == 0
    for args in (["--dag-id", DAG_ID], ["--store", "asset"], ["--dag-id", DAG_ID, "--key", "job"], []):
        through_api = over_api(api, "export", *args)
        from_db = on_db(api, "export", *args)
        assert through_api.exit_code == 0, through_api.output
        assert through_api.stdout == from_db.stdout, args
        assert through_api.stdout.count("\n") >= 1, args


def test_dag_run_keys_have_no_route(api: ApiServer) -> None:
    for args in (["get", "--dag-id", DAG_ID, "--run-id", api.run_id, "k"], ["list", "--store", "dag_run"]):
        refused = over_api(api, *args)
        assert refused.exit_code == 2, refused.output
        assert "dag-run keys (Airflow 3.4) have no route" in refused.stderr and "--conn" in refused.stderr


def test_a_walk_shows_the_task_instances_read_on_a_terminal_and_a_clean_walks_once(api: ApiServer, tmp_path) -> None:
    env = terminal_env(STATESTORE_API_TOKEN=token(api))
    status, screen = Terminal(["--api-url", api.url, "list", "--dag-id", DAG_ID], env).finish()
    assert status == 0, screen
    assert "reading task instances" in screen and "4/4" in screen, screen  # load, shard x3
    status, screen = Terminal(["--api-url", api.url, "clean", "--dry-run"], env).finish()
    assert status == 0, screen
    assert "reading task instances" in screen and "reading expired keys" not in screen, screen  # one bar
    exported = tmp_path / "keys.jsonl"  # the records go to a file: the bar is on the terminal, on stderr
    export = ["--api-url", api.url, "export", "--dag-id", DAG_ID, "--file", str(exported)]
    status, screen = Terminal(export, env).finish()
    assert status == 0 and "reading task instances" in screen, screen
    piped = over_api(api, "list", "--dag-id", DAG_ID)  # not a terminal: no bar
    assert piped.exit_code == 0 and "reading task instances" not in piped.output, piped.output
    # A clean at a terminal follows the walk itself: no count of the expired keys first (a second walk).
    alone = json.loads(over_api(api, "clean", "-o", "json").stdout)["api_requests"]
    status, screen = Terminal(["--api-url", api.url, "clean"], env).finish()
    assert status == 0, screen
    assert "reading task instances" in screen and f"through the REST API ({alone:,} requests)" in screen, screen


def test_a_worker_backends_reference_resolves_as_on_the_database(api: ApiServer, tmp_path, monkeypatch) -> None:
    """With ``[workers] state_store_backend`` set, the value lives in that backend and the API holds its
    reference: ``get`` resolves it, ``get --raw`` shows it, ``delete`` removes the object too."""
    objects = tmp_path / "objects"
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", "statestore_cli.backends.filesystem.FilesystemBackend")
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", str(objects))
    done = over_api(api, "set", *task(api), "spark_job", '{"id": "j-1"}')
    assert done.exit_code == 0, done.output
    [stored] = [p for p in objects.rglob("*") if p.is_file()]
    assert json.loads(stored.read_text()) == {"id": "j-1"}
    raw = over_api(api, "get", *task(api), "spark_job", "--raw")
    assert raw.exit_code == 0, raw.output
    assert raw.stdout == on_db(api, "get", *task(api), "spark_job", "--raw").stdout
    assert json.loads(raw.stdout) == {"__airflow_state_ref__": str(stored.relative_to(objects))}
    assert over_api(api, "get", *task(api), "spark_job").stdout == '{"id": "j-1"}\n'
    gone = over_api(api, "delete", *task(api), "spark_job")
    assert gone.exit_code == 0, gone.output
    assert not stored.exists()


def test_the_servers_own_refusal_is_its_reason_in_one_line(api: ApiServer, monkeypatch) -> None:
    """A limit raised here but not on the server: the api-server refuses the value (422), nothing is written."""
    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "1000000")
    refused = over_api(api, "set", *task(api), "too_big", json.dumps("x" * 70_000))
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith("statestore: error: the API refused the request: "), refused.stderr
    assert "exceeds max_value_storage_bytes (65535)" in refused.stderr, refused.stderr  # the server's words
    assert refused.stderr.count("\n") <= 2 and "Traceback" not in refused.stderr, refused.stderr
    assert on_db(api, "get", *task(api), "too_big").exit_code == 1


def test_db_check_asks_the_api_for_its_airflow_its_database_and_the_token(api: ApiServer, monkeypatch) -> None:
    checked = over_api(api, "db", "check", "-o", "json")
    assert checked.exit_code == 0, checked.output
    doc = json.loads(checked.stdout)
    dags = doc.pop("dags")
    assert isinstance(dags, int) and dags >= 1, checked.stdout
    assert doc == {
        "ok": True,
        "api": api.url,
        "mode": "rest-api",
        "airflow_version": "3.3.2",
        "metadatabase": "healthy",
        "credentials": "environment variable STATESTORE_API_TOKEN",
        "error": None,
    }
    secret = "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzUxMiJ9.not-a-real-token.signature-here"
    monkeypatch.setenv("STATESTORE_API_TOKEN", secret)
    refused = over_api(api, "db", "check", "-o", "json")
    assert refused.exit_code == 2, refused.output  # the credentials, as on every command through the API
    doc = json.loads(refused.stdout)
    assert (doc["ok"], doc["airflow_version"], doc["dags"]) == (False, "3.3.2", None)
    assert "did not accept the credentials" in doc["error"] and secret not in refused.output
    assert refused.stderr.startswith("statestore: error: the API at "), refused.stderr


def test_db_check_of_an_api_nothing_answers_is_exit_3() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    refused = run_cli("--api-url", f"http://127.0.0.1:{closed}", "db", "check", "-o", "plain")
    assert refused.exit_code == 3, refused.output
    fields = dict(line.split("\t", 1) for line in refused.stdout.splitlines())
    assert fields["ok"] == "false" and fields["airflow_version"] == "-" and "connection refused" in fields["error"]


def test_commands_through_the_api_load_no_sqlalchemy(api: ApiServer, tmp_path) -> None:
    """A cron job or a CI smoke check through the API starts without the database's modules; `clean` and
    `export` load them (their selection and records are shared with the database's), a walk's cost dwarfs it."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "AIRFLOW_HOME": str(tmp_path),
        "STATESTORE_API_TOKEN": token(api),
    }
    for args in (
        ["set", *task(api), "probe", "1"],
        ["get", *task(api), "probe"],
        ["list", *task(api)],
        ["list", "--dag-id", DAG_ID, "-o", "json"],
        ["delete", *task(api), "probe"],
        ["db", "check"],
    ):
        argv = [sys.executable, "-c", LOADED_PROBE, "--api-url", api.url, *args]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, (args, done.stderr)
        loaded = done.stdout.splitlines()[-1]
        assert loaded.startswith("LOADED=") and "sqlalchemy" not in loaded, (args, loaded)


def test_clear_of_every_map_index_and_of_an_asset(api: ApiServer) -> None:
    for index in (0, 1, 2):
        assert over_api(api, "set", *task(api, "shard", index), "cursor", str(index)).exit_code == 0
    cleared = over_api(api, "clear", *task(api, "shard")[:-2], "--all-map-indices", "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert "all map indices" in cleared.stderr, cleared.stderr
    shards = ["--dag-id", DAG_ID, "--run-id", api.run_id, "--task-id", "shard"]
    assert json.loads(on_db(api, "list", *shards, "-o", "json").stdout) == []
    assert over_api(api, "set", "--asset-uri", ASSET_URI, "offset", "7").exit_code == 0
    cleared = over_api(api, "clear", "--asset-uri", ASSET_URI, "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert json.loads(on_db(api, "list", "--asset-uri", ASSET_URI, "-o", "json").stdout) == []


def test_a_token_from_a_command_in_the_config_file(airflow_api: ApiServer, tmp_path) -> None:
    """``api_token_cmd``, as a managed service's CLI prints a fresh token on each run; a command that fails is
    one line, and the token is nowhere in what is shown."""
    held = tmp_path / "token"
    held.write_text(token(airflow_api) + "\n", encoding="utf-8")
    held.chmod(0o600)
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(f"[state_store]\napi_url = {airflow_api.url}\napi_token_cmd = cat {held}\n", encoding="utf-8")
    cfg.chmod(0o600)
    done = run_cli("--config", str(cfg), "db", "check", "-o", "json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["credentials"] == f"command [state_store] api_token_cmd in {cfg}"
    cfg.write_text(f"[state_store]\napi_url = {airflow_api.url}\napi_token_cmd = cat {held}.gone\n", encoding="utf-8")
    failed = run_cli("--config", str(cfg), "get", *task(airflow_api), "job_id")
    assert failed.exit_code == 3, failed.output
    assert failed.stderr == (
        f"statestore: error: [state_store] api_token_cmd in {cfg}: the command failed (exit status 1); its output "
        "is not shown, as it may hold a password: run the command yourself to see it\n"
    )
    assert token(airflow_api) not in failed.output


def test_a_dag_or_run_the_server_does_not_know_lists_nothing_as_on_the_database(api: ApiServer) -> None:
    for args, named in (
        (["--dag-id", "no_such_dag"], "dag_id 'no_such_dag'"),
        (["--dag-id", DAG_ID, "--run-id", "no_such_run"], f"dag run dag_id={DAG_ID} run_id=no_such_run"),
    ):
        through_api = over_api(api, "list", *args, "-o", "json")
        from_db = on_db(api, "list", *args, "-o", "json")
        assert (through_api.exit_code, json.loads(through_api.stdout)) == (0, []), through_api.output
        assert (from_db.exit_code, json.loads(from_db.stdout)) == (0, []), from_db.output
        assert f"statestore: note: the api-server has no {named}\n" in through_api.stderr, through_api.stderr


def test_a_clear_of_nothing_says_so_as_on_the_database(api: ApiServer) -> None:
    for scope in (["--asset-name", "no-such-asset"], task(api, "no_such_task"), task(api, "shard", 2)):
        through_api = over_api(api, "clear", *scope, "--yes")
        from_db = on_db(api, "clear", *scope, "--yes")
        assert through_api.exit_code == from_db.exit_code == 0, (through_api.output, from_db.output)
        assert through_api.stderr == from_db.stderr and through_api.stderr.startswith("nothing to clear: "), scope


def test_the_keys_of_an_asset_nobody_has_answer_as_on_the_database(api: ApiServer) -> None:
    for args in (
        ["get", "--asset-name", "no-such-asset", "k"],
        ["get", "--asset-name", ASSET_NAME + "x", "k"],
        ["get", "--asset-id", "987654", "k"],
        ["get", "--asset-uri", "s3://no/such/asset", "k"],
        ["delete", "--asset-name", "no-such-asset", "k"],
        ["set", "--keep-expiry", "--asset-name", "no-such-asset", "k", "1"],
        ["set", "--asset-name", "no-such-asset", "k", "1"],
        ["set", "--asset-id", "987654", "k", "1"],
        ["list", "--asset-name", "no-such-asset", "-o", "json"],
    ):
        through_api, from_db = over_api(api, *args), on_db(api, *args)
        assert (through_api.exit_code, through_api.stdout) == (from_db.exit_code, from_db.stdout), args
        said = through_api.stderr.replace("statestore: note: through the REST API: 1 request\n", "")
        assert said == from_db.stderr.replace("in this Airflow database", "on this api-server"), args
    hint = over_api(api, "get", "--asset-name", ASSET_NAME + "x", "k")
    assert hint.stderr.endswith(f"; did you mean {ASSET_NAME!r}?\n"), hint.stderr


def test_an_import_through_the_api_restores_what_a_clean_backed_up(api: ApiServer, tmp_path) -> None:
    past = ["--expires-at", "2026-01-01T00:00:00+00:00", "--force"]
    for scope, key in ((task(api, "shard", 1), "offset"), (task(api), "spark_job")):
        assert over_api(api, "set", *scope, key, '{"n": 1}', *past).exit_code == 0
    assert over_api(api, "set", "--asset-name", ASSET_NAME, "watermark", '"2026-11-30"').exit_code == 0
    before = on_db(api, "export", "--dag-id", DAG_ID)
    backup = tmp_path / "b.jsonl"
    assert over_api(api, "clean", "--backup", str(backup)).exit_code == 0
    gone = len(backup.read_text().splitlines())  # these two, and any other test's expired keys
    assert gone >= 2 and on_db(api, "get", *task(api), "spark_job").exit_code == 1
    asset_line = on_db(api, "export", "--asset-name", ASSET_NAME).stdout
    backup.write_text(backup.read_text() + asset_line)
    rehearsed = over_api(api, "import", "--dry-run", str(backup), "-o", "json")
    assert rehearsed.exit_code == 0, rehearsed.output
    assert json.loads(rehearsed.stdout)["task"] == {"inserted": gone, "updated": 0}
    restored = over_api(api, "import", str(backup), "-o", "json")
    assert restored.exit_code == 0, restored.output
    summary = json.loads(restored.stdout)
    assert (summary["task"], summary["asset"]) == ({"inserted": gone, "updated": 0}, {"inserted": 0, "updated": 1})
    assert summary["api_requests"] == 2 * (gone + 1) + 1  # each key read, then written; the asset looked up once

    def without_updated_at(text: str) -> list[dict[str, object]]:
        return [{k: v for k, v in json.loads(line).items() if k != "updated_at"} for line in text.splitlines()]

    after = on_db(api, "export", "--dag-id", DAG_ID)
    assert without_updated_at(after.stdout) == without_updated_at(before.stdout)


def test_an_import_through_the_api_stops_at_a_line_it_cannot_write(api: ApiServer, tmp_path) -> None:
    good = {"store": "task", "dag_id": DAG_ID, "run_id": api.run_id, "task_id": "load", "map_index": -1}
    good |= {"key": "imported", "updated_at": "2026-11-30T00:00:00+00:00", "expires_at": None, "value": 1}
    lines = tmp_path / "keys.jsonl"
    lines.write_text(json.dumps(good) + "\n" + json.dumps({**good, "task_id": "shard", "map_index": 7}) + "\n")
    refused = over_api(api, "import", "--dry-run", str(lines))
    assert refused.exit_code == 2, refused.output
    missing = f"no task instance dag_id={DAG_ID} run_id={api.run_id} task_id=shard map_index=7 on this api-server"
    assert refused.stderr == (
        f"statestore: error: line 2: {missing}; task keys can only be written for task instances Airflow "
        "created; nothing was written (dry run)\n"
    )
    assert on_db(api, "get", *task(api), "imported").exit_code == 1
    partly = over_api(api, "import", str(lines))
    assert partly.exit_code == 2, partly.output
    assert partly.stderr.endswith("created; line 1 was imported, nothing else\n"), partly.stderr
    assert json.loads(on_db(api, "get", *task(api), "imported", "-o", "json").stdout)["expires_at"] is None
    dag_run_key = {k: good[k] for k in ("dag_id", "run_id", "key", "updated_at", "expires_at", "value")}
    lines.write_text(json.dumps({"store": "dag_run", **dag_run_key}) + "\n")
    no_route = over_api(api, "import", str(lines))
    assert no_route.exit_code == 2 and "line 1: a dag-run key" in no_route.stderr, no_route.output


def test_a_clear_of_a_run_walks_it_and_deletes_what_a_clear_on_the_database_would(api: ApiServer, tmp_path) -> None:
    for scope, key in ((task(api), "job"), (task(api, "shard", 0), "a"), (task(api, "shard", 2), "b")):
        assert over_api(api, "set", *scope, key, '{"n": 1}').exit_code == 0
    run = ["--dag-id", DAG_ID, "--run-id", api.run_id]
    before = on_db(api, "export", *run).stdout.splitlines()
    asked = over_api(api, "clear", *run)  # not a terminal: the count, then no answer
    assert asked.exit_code == 2 and "pass --yes" in asked.stderr, asked.output
    backup = tmp_path / "run.jsonl"
    done = over_api(api, "clear", *run, "--yes", "--backup", str(backup))
    assert done.exit_code == 0, done.output
    where = f"dag_id={DAG_ID} run_id={api.run_id} (every task of the run)"
    assert done.stderr.startswith(f"deleted {len(before)} keys of {where} in "), done.stderr
    assert "statestore: note: through the REST API: " in done.stderr
    assert backup.read_text().splitlines() == before and len(before) >= 3
    assert json.loads(on_db(api, "list", *run, "-o", "json").stdout) == []
    again = over_api(api, "clear", *run, "--yes")
    from_db = on_db(api, "clear", *run, "--yes")
    assert again.exit_code == from_db.exit_code == 0, again.output
    assert again.stderr.startswith(from_db.stderr) and from_db.stderr.startswith("nothing to clear: "), again.stderr
    assert over_api(api, "import", str(backup)).exit_code == 0
    assert len(on_db(api, "export", *run).stdout.splitlines()) == len(before)


def test_copy_and_move_through_the_api_write_what_they_write_on_the_database(api: ApiServer) -> None:
    source, target = task(api, "shard", 0), task(api, "shard", 1)
    to = ["--to-map-index", "1"]
    for scope in (source, target, task(api, "shard", 2)):
        assert over_api(api, "clear", *scope, "--yes").exit_code == 0
    assert over_api(api, "set", *source, "job", '{"id": 7}', "--retention", "3d").exit_code == 0
    assert (
        over_api(api, "set", *source, "cursor", "41", "--expires-at", "2026-01-01T00:00:00Z", "--force").exit_code == 0
    )
    assert over_api(api, "set", *target, "cursor", "0").exit_code == 0

    def held(scope: list[str]) -> list[tuple[object, ...]]:
        rows = [json.loads(line) for line in on_db(api, "export", *scope).stdout.splitlines()]
        return [(r["key"], r["value"], r["expires_at"]) for r in rows]

    clash_api, clash_db = over_api(api, "copy", *source, *to), on_db(api, "copy", *source, *to)
    assert (clash_api.exit_code, clash_api.stderr) == (clash_db.exit_code, clash_db.stderr) == (2, clash_db.stderr)
    assert "already has 1 of the keys ('cursor')" in clash_api.stderr
    done = over_api(api, "copy", *source, *to, "--overwrite", "--yes", "-o", "json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["copied"], report["overwritten"], report["moved"]) == (2, 1, False)
    assert held(target) == held(source) and len(held(source)) == 2
    moved = over_api(api, "copy", *source, "--to-map-index", "2", "--move", "--yes")
    assert moved.exit_code == 0, moved.output
    assert held(source) == [] and held(task(api, "shard", 2)) == held(target)
    missing = over_api(api, "copy", *target, "--to-map-index", "9")
    assert missing.exit_code == 2 and "nothing to copy to: no task instance" in missing.stderr, missing.output
    of_a_run = over_api(api, "copy", "--dag-id", DAG_ID, "--run-id", api.run_id, "--to-run-id", "manual__2")
    assert of_a_run.exit_code == 2, of_a_run.output
    assert of_a_run.stderr.startswith("statestore: error: dag-run keys (Airflow 3.4) have no route"), of_a_run.stderr


def test_diff_through_the_api_finds_what_a_diff_of_the_database_finds(api: ApiServer, tmp_path) -> None:
    scope = task(api, "shard", 1)
    assert over_api(api, "clear", *scope, "--yes").exit_code == 0
    for key, value in (("kept", "1"), ("changed", "2"), ("gone", "3")):
        assert over_api(api, "set", *scope, key, value).exit_code == 0
    exported = tmp_path / "before.jsonl"
    exported.write_text(on_db(api, "export", "--dag-id", DAG_ID).stdout)
    assert over_api(api, "diff", str(exported), "--dag-id", DAG_ID).exit_code == 0
    assert over_api(api, "set", *scope, "changed", "20", "--keep-expiry").exit_code == 0
    assert over_api(api, "delete", *scope, "gone").exit_code == 0
    assert over_api(api, "set", *scope, "new", "4").exit_code == 0
    through_api = over_api(api, "diff", str(exported), "--dag-id", DAG_ID, "-o", "json")
    from_db = on_db(api, "diff", str(exported), "--dag-id", DAG_ID, "-o", "json")
    assert (through_api.exit_code, from_db.exit_code) == (1, 1), through_api.output
    assert json.loads(through_api.stdout) == json.loads(from_db.stdout)
    assert sorted((d["change"], d["key"]) for d in json.loads(through_api.stdout)) == [
        ("added", "new"),
        ("changed", "changed"),
        ("removed", "gone"),
    ]


def test_a_clean_through_the_api_walks_only_the_dags_it_is_given(api: ApiServer) -> None:
    past = ["--expires-at", "2026-01-01T00:00:00+00:00", "--force"]
    assert over_api(api, "set", *task(api), "old_job", '"x"', *past).exit_code == 0

    def requests(result: Result) -> int:
        return int(result.stderr.split("through the REST API: ")[1].split()[0])

    everything = over_api(api, "clean", "--dry-run", "-o", "json")
    only = over_api(api, "clean", "--dry-run", "--dag-id", DAG_ID, "-o", "json")
    assert (everything.exit_code, only.exit_code) == (0, 0), only.output
    assert json.loads(only.stdout)["rows"] == json.loads(everything.stdout)["rows"] != []
    assert requests(only) < requests(everything)  # no page of dags, no other dag's task instances
    unknown = over_api(api, "clean", "--dry-run", "--dag-id", "no_such_dag", "-o", "json")
    assert (unknown.exit_code, json.loads(unknown.stdout)["rows"], requests(unknown)) == (0, [], 1)
    assert "statestore: note: the api-server has no dag_id 'no_such_dag'\n" in unknown.stderr
    refused = on_db(api, "clean", "--dry-run", "--dag-id", DAG_ID)
    assert (refused.exit_code, refused.stdout) == (2, ""), refused.output
    assert refused.stderr.startswith("statestore: error: --dag-id narrows a clean through the REST API")
