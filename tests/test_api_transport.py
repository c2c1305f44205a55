"""API mode's transport (``ApiClient``) against a stand-in for what sits in front of an api-server: a local HTTPS
endpoint whose certificate a private CA signed (verified only with ``[state_store] api_ca_bundle``), and a proxy
that answers 429 and 503 before it lets a request through (retried, with ``Retry-After`` honoured). Airflow
itself is in ``test_api_mode``; these need no Airflow."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from cli_running import run_cli, run_statestore_process

ASSET = {"id": 7, "name": "orders", "uri": "s3://warehouse/orders.parquet"}
KEY = {"key": "watermark", "value": {"until": "2026-11-30"}, "updated_at": "2026-11-30T00:00:00Z"}
PROXIED = "http://127.0.0.1:9"  # the API's URL where a test reaches it through the stand-in as a proxy


class StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections stay open between requests, as uvicorn's do
    refusals: ClassVar[list[int]] = []  # statuses answered, one per request, before the real answer
    seen: ClassVar[list[str]] = []
    served: ClassVar[dict[str, object]] = {}  # more routes and their answers, as a test sets them
    ports: ClassVar[list[int]] = []  # the client's port of each request: one per connection
    hang_up = False  # close each connection after its answer, without saying so (as an idle timeout does)
    walked: ClassVar[list[str]] = []  # the task instances whose keys were asked for (``task_keys``)
    refuse_first = False  # the walk: t00's keys refused at once, each other's answered after a second
    # A clean: each task instance holds two expired keys, whose deletes are heard; those of ``refused`` are
    # refused (403), those of ``vanished`` are not found (404: the task instance went meanwhile).
    expired = False
    deleted: ClassVar[list[str]] = []
    refused: str | None = None
    vanished: str | None = None
    refused_put: str | None = None  # "task_id/key": a write refused (403)
    # The walk's tokens: after ``expire_after`` task instances every token so far expires (401), and
    # ``token_file`` holds a new one; /auth/token hands out new ones. ``accepted`` None: any token goes.
    expire_after = 0
    accepted: ClassVar[set[str] | None] = None
    token_file: Path | None = None
    issued: ClassVar[list[str]] = []
    # Where /ui/ sends a request: a sign-on page elsewhere (here a port of loopback where nothing listens).
    login = "http://127.0.0.1:9/authorize?client=airflow&state=s3cr3t"

    def do_GET(self) -> None:
        self.ports.append(self.client_address[1])
        self.close_connection = self.hang_up
        self.path = self.path.removeprefix(PROXIED)  # a proxy is asked for the whole URL
        self.seen.append(f"{self.path} {self.headers.get('Authorization')}")
        if self.path.startswith("/ui/"):  # the UI behind a single sign-on, as some deployments put it
            self.send_response(302)
            self.send_header("Location", self.login)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if "/taskInstances/" in self.path:
            self._task_keys()
            return
        if self.path == "/api/v2/assets/8":  # a body with no end, as /dev/zero served would be
            self._endless()
            return
        if self.refusals:
            self.send_response(self.refusals.pop(0))
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        answers = {"/api/v2/assets/7": ASSET, "/api/v2/assets/7/state-store/watermark": KEY, **self.served}
        self._answer(200 if self.path in answers else 404, answers.get(self.path, {"detail": "Not Found"}))

    def _task_keys(self) -> None:
        """A task instance's keys (none), after the refusals and pauses the test asked for."""
        task_id = self.path.split("/taskInstances/")[1].split("/")[0]
        self.walked.append(task_id)
        if self.expire_after and StandIn.accepted is None and len(self.walked) >= self.expire_after:
            StandIn.accepted = {"tok-renewed"}
            assert self.token_file is not None
            self.token_file.write_text("tok-renewed\n", encoding="utf-8")
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if StandIn.accepted is not None and token not in StandIn.accepted:
            self._answer(401, {"detail": "Invalid JWT token"})
            return
        if self.refuse_first:
            if task_id == "t00":
                self._answer(403, {"detail": "Forbidden"})
                return
            time.sleep(1)
        if "/state-store/" in self.path:  # one key, read before an import writes it: none is there
            self._answer(404, {"detail": "Not Found"})
            return
        keys = [
            {"key": f"k{n}", "value": n, "updated_at": "2026-11-01T00:00:00Z", "expires_at": "2026-11-02T00:00:00Z"}
            for n in range(2 if self.expired else 0)
        ]
        self._answer(200, {"task_state_store": keys, "total_entries": len(keys)})

    def do_PUT(self) -> None:
        """A write: heard, but k5's and ``refused_put``'s refused after a pause (those sent with it end first)."""
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        key = self.path.split("/state-store/")[1].split("?")[0]
        if key == "k5" or f"/taskInstances/{self.refused_put}?" in self.path.replace("/state-store/", "/"):
            time.sleep(1.0)
            self._answer(403, {"detail": "Forbidden"})
            return
        self.deleted.append(f"put {key}")
        self.send_response(204)
        self.end_headers()

    def do_DELETE(self) -> None:
        task_id, key = self.path.split("/taskInstances/")[1].split("?")[0].split("/state-store/")
        if task_id in (self.refused, self.vanished):
            self._answer(403 if task_id == self.refused else 404, {"detail": "Forbidden or not found"})
            return
        time.sleep(0.2)
        self.deleted.append(f"{task_id}/{key}")
        self.send_response(204)
        self.end_headers()

    def _endless(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(1 << 40))
        self.end_headers()
        chunk = b" " * (1 << 20)
        try:
            while True:
                self.wfile.write(chunk)
        except OSError:  # the client stopped reading and closed
            self.close_connection = True

    def do_POST(self) -> None:
        """``/auth/token``: a new token each time, taken from then on."""
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        fresh = f"tok-exchanged-{len(self.issued)}"
        self.issued.append(fresh)
        if StandIn.accepted is not None:
            StandIn.accepted.add(fresh)
        self._answer(201, {"access_token": fresh})

    def _answer(self, status: int, answer: object) -> None:
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()  # bytes: a page, as it is
        self.send_response(status)
        self.send_header("Content-Type", "text/html" if isinstance(answer, bytes) else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for 127.0.0.1 it signed: (ca.pem, server.pem, server.key)."""
    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    openssl = ["openssl"]
    run = lambda *args: subprocess.run([*openssl, *args], check=True, capture_output=True)  # noqa: E731
    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        "/CN=statestore test CA",
    )
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = folder / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n", encoding="utf-8")
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    return ca, cert, key


@pytest.fixture
def stand_in(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path | None]]:
    """The stand-in on 127.0.0.1 (``https`` when the test is parametrized so), and the CA bundle that signs it."""
    StandIn.refusals, StandIn.seen, StandIn.served, StandIn.ports, StandIn.hang_up = [], [], {}, [], False
    StandIn.walked, StandIn.issued, StandIn.accepted = [], [], None
    StandIn.refuse_first, StandIn.expire_after = False, 0
    StandIn.expired, StandIn.deleted, StandIn.refused, StandIn.vanished = False, [], None, None
    StandIn.refused_put = None
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    ca = None
    if getattr(request, "param", "http") == "https":
        ca, cert, key = _certificates(tmp_path)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scheme = "https" if ca is not None else "http"
    yield f"{scheme}://127.0.0.1:{server.server_address[1]}", ca
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STATESTORE_API_TOKEN", "tok-3f9a1c")
    return "tok-3f9a1c"


@pytest.mark.parametrize("stand_in", ["https"], indirect=True)
def test_a_private_ca_is_verified_with_the_ca_bundle_only(stand_in, monkeypatch) -> None:
    url, ca = stand_in
    refused = run_cli("--api-url", url, "get", "--asset-id", "7", "watermark")
    assert refused.exit_code == 3, refused.output
    assert "certificate that cannot be verified" in refused.stderr and "api_ca_bundle" in refused.stderr
    assert StandIn.seen == []  # nothing sent before the certificate was checked
    monkeypatch.setenv("AIRFLOW__STATE_STORE__API_CA_BUNDLE", str(ca))
    done = run_cli("--api-url", url, "get", "--asset-id", "7", "watermark")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"until": "2026-11-30"}
    assert StandIn.seen[-1] == "/api/v2/assets/7/state-store/watermark Bearer tok-3f9a1c"


def test_a_missing_ca_bundle_is_one_line(stand_in, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AIRFLOW__STATE_STORE__API_CA_BUNDLE", str(tmp_path / "no-such.pem"))
    refused = run_cli("--api-url", stand_in[0].replace("http:", "https:"), "get", "--asset-id", "7", "watermark")
    assert refused.exit_code == 2, refused.output
    assert "cannot read the CA bundle" in refused.stderr and refused.stderr.count("\n") <= 2


def test_429_and_503_are_retried_then_answered(stand_in) -> None:
    StandIn.refusals = [429, 503]
    done = run_cli("--api-url", stand_in[0], "get", "--asset-id", "7", "watermark")
    assert done.exit_code == 0, done.output
    assert [seen.split()[0] for seen in StandIn.seen] == ["/api/v2/assets/7"] * 3 + [
        "/api/v2/assets/7/state-store/watermark"
    ]


def test_a_server_that_keeps_refusing_is_exit_3_after_the_retries(stand_in, token) -> None:
    StandIn.refusals = [503] * 10
    refused = run_cli("--api-url", stand_in[0], "get", "--asset-id", "7", "watermark")
    assert refused.exit_code == 3, refused.output
    assert "answered 503" in refused.stderr and token not in refused.stderr
    assert len(StandIn.seen) == 4  # the request and three retries


def test_a_redirect_is_refused_not_followed_with_the_token(stand_in, token) -> None:
    refused = run_cli("--api-url", stand_in[0] + "/ui", "get", "--asset-id", "7", "watermark")
    assert refused.exit_code == 2, refused.output
    assert refused.stderr == (
        f"statestore: error: the API at {stand_in[0]}/ui answered /api/v2/assets/7 with a redirect (302) to "
        "http://127.0.0.1:9/authorize, which statestore does not follow (the token would go with it): "
        "give --api-url the api-server's own root, where /api/v2 is served\n"
    )
    assert len(StandIn.seen) == 1 and token not in refused.output  # one request, to the URL given


@pytest.mark.parametrize(
    ("served", "error"),
    [
        ({}, "has no /api/v2/version: is it Airflow 3's api-server?"),
        ({"/api/v2/version": {"version": "3.2.0"}}, "runs Airflow 3.2.0, whose REST API has no state store: it needs"),
        (
            {
                "/api/v2/version": {"version": "3.3.2"},
                "/api/v2/monitor/health": {"metadatabase": {"status": "unhealthy"}},
            },
            "reports its metadata database unhealthy",
        ),
    ],
)
def test_db_check_of_an_api_that_cannot_serve_the_store_is_exit_3(stand_in, served, error) -> None:
    StandIn.served = served
    refused = run_cli("--api-url", stand_in[0], "db", "check", "-o", "json")
    assert refused.exit_code == 3, refused.output
    doc = json.loads(refused.stdout)
    assert doc["ok"] is False and error in doc["error"], doc
    assert refused.stderr.startswith("statestore: error: ") and refused.stderr.count("\n") == 1, refused.stderr
    assert not any(seen.endswith("tok-3f9a1c") for seen in StandIn.seen)  # nothing that needs a token was asked


def test_a_page_that_is_not_json_is_one_line_naming_the_url(stand_in) -> None:
    StandIn.served = {"/api/v2/assets/7": b"<html><body>Sign in to continue</body></html>"}
    refused = run_cli("--api-url", stand_in[0], "get", "--asset-id", "7", "watermark")
    assert refused.exit_code == 3, refused.output
    assert refused.stderr == (
        f"statestore: error: the API at {stand_in[0]} answered /api/v2/assets/7 with a page that is not JSON: is "
        "--api-url the api-server's root, where /api/v2 is served?\n"
    )


def test_an_answer_with_no_end_is_refused_not_read_into_memory(stand_in) -> None:
    refused = run_cli("--api-url", stand_in[0], "get", "--asset-id", "8", "watermark")
    assert refused.exit_code == 3, refused.output
    assert refused.stderr == (
        f"statestore: error: the API at {stand_in[0]} sent an answer larger than 256 MiB, more than any page of "
        "Airflow's API holds; statestore stopped reading: is --api-url an Airflow api-server's root?\n"
    )


def test_a_commands_requests_share_one_connection(stand_in) -> None:
    done = run_cli("--api-url", stand_in[0], "get", "--asset-id", "7", "watermark")
    assert done.exit_code == 0, done.output
    assert len(StandIn.ports) == 2 and len(set(StandIn.ports)) == 1, StandIn.ports  # the asset, then its key


def test_a_connection_the_server_closed_is_opened_again(stand_in) -> None:
    StandIn.hang_up = True
    done = run_cli("--api-url", stand_in[0], "get", "--asset-id", "7", "watermark")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"until": "2026-11-30"}
    assert len(set(StandIn.ports)) == 2, StandIn.ports


def test_a_proxy_in_the_environment_is_used(stand_in, monkeypatch) -> None:
    monkeypatch.setenv("http_proxy", stand_in[0])
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    done = run_cli("--api-url", PROXIED, "get", "--asset-id", "7", "watermark")
    assert done.exit_code == 0, done.output
    assert [seen.split()[0] for seen in StandIn.seen] == ["/api/v2/assets/7", "/api/v2/assets/7/state-store/watermark"]


def _forty_task_instances() -> None:
    instances = [{"dag_id": "etl", "dag_run_id": "r", "task_id": f"t{n:02}", "state": "success"} for n in range(40)]
    page = {"task_instances": instances, "total_entries": len(instances)}
    StandIn.served = {"/api/v2/dags/etl/dagRuns/~/taskInstances?limit=100&offset=0": page}


def test_a_walk_sends_no_request_queued_behind_a_failed_one(stand_in) -> None:
    """Eight at once and eight more queued: when the first task instance's request is refused, the queued ones
    are dropped (the ones in flight finish), and the refusal is the command's one line."""
    _forty_task_instances()
    StandIn.refuse_first = True
    refused = run_cli("--api-url", stand_in[0], "list", "--dag-id", "etl")
    assert refused.exit_code == 2, refused.output
    assert "VIEWER role" in refused.stderr, refused.stderr
    assert 8 <= len(StandIn.walked) <= 12, StandIn.walked  # 16 had been handed to the threads


def test_a_clean_stops_at_a_refused_delete_and_its_backup_holds_every_key_deleted(stand_in, tmp_path) -> None:
    """Batches of 32 keys (8 requests at once, 4 each): the first batch, t00-t15, is written to the backup and
    synced before its deletes are sent; t05's is refused, the deletes still queued are never sent, and the
    backup is cut back to the keys that went."""
    _forty_task_instances()
    StandIn.served["/api/v2/dags?limit=100&offset=0"] = {"dags": [{"dag_id": "etl"}], "total_entries": 1}
    StandIn.expired, StandIn.refused = True, "t05"
    backup = tmp_path / "clean.jsonl"
    refused = run_cli("--api-url", stand_in[0], "clean", "--backup", str(backup))
    assert refused.exit_code == 2, refused.output
    assert "USER role" in refused.stderr, refused.stderr
    first_batch = [f"t{n:02}/k{k}" for n in range(16) for k in (0, 1)]
    assert 6 <= len(StandIn.deleted) <= 24, StandIn.deleted  # those in flight finished; none queued was sent
    assert set(StandIn.deleted) < set(first_batch) - {"t05/k0", "t05/k1"}
    backed_up = [json.loads(line) for line in backup.read_text().splitlines()]  # cut back to what went
    assert [f"{r['task_id']}/{r['key']}" for r in backed_up] == [k for k in first_batch if k in StandIn.deleted]
    gone = len(StandIn.deleted)
    assert f"(the clean had deleted {gone} expired keys in 1 committed batch;" in refused.stderr, refused.stderr
    assert f"{backup} holds the {gone} deleted keys: `statestore import {backup}` restores them\n" in refused.stderr


def test_a_clean_counts_no_key_of_a_task_instance_that_went_meanwhile(stand_in) -> None:
    _forty_task_instances()
    StandIn.served["/api/v2/dags?limit=100&offset=0"] = {"dags": [{"dag_id": "etl"}], "total_entries": 1}
    StandIn.expired, StandIn.vanished = True, "t07"
    done = run_cli("--api-url", stand_in[0], "clean", "-o", "json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["deleted"] == 78 == len(StandIn.deleted)


def test_a_copy_stopped_midway_says_how_many_keys_went_and_how_to_finish(stand_in) -> None:
    StandIn.expired, StandIn.refused_put = True, "t01/k1"  # each task instance holds k0 and k1
    scope = ["--dag-id", "etl", "--run-id", "r", "--task-id", "t00"]
    refused = run_cli("--api-url", stand_in[0], "copy", *scope, "--to-task-id", "t01", "--overwrite", "--yes")
    assert refused.exit_code == 2, refused.output
    assert StandIn.deleted == ["put k0"]
    assert refused.stderr.endswith(
        "(1 of the 2 keys were written to the target: run the same command with --overwrite to finish)\n"
    ), refused.stderr


def test_an_import_stopped_by_a_refused_write_names_every_line_it_wrote(stand_in, tmp_path) -> None:
    """Ten lines in one batch, eight at once: line 6 (k5) is refused after the others were written."""
    lines = tmp_path / "keys.jsonl"
    where = {"store": "task", "dag_id": "etl", "run_id": "r", "task_id": "t00", "map_index": -1}
    when = {"updated_at": "2026-11-01T00:00:00Z", "expires_at": None}
    lines.write_text("".join(json.dumps({**where, "key": f"k{n}", **when, "value": n}) + "\n" for n in range(10)))
    refused = run_cli("--api-url", stand_in[0], "import", str(lines))
    assert refused.exit_code == 2, refused.output
    assert sorted(StandIn.deleted) == sorted(f"put k{n}" for n in range(10) if n != 5)
    assert refused.stderr.startswith("statestore: error: line 6: the API at "), refused.stderr
    assert refused.stderr.endswith("; lines 1-5, 7-10 were imported, nothing else\n"), refused.stderr


def test_a_token_that_expires_during_a_walk_is_printed_again_by_its_command(stand_in, tmp_path) -> None:
    _forty_task_instances()
    held, ran = tmp_path / "token", tmp_path / "ran"
    held.write_text("tok-first\n", encoding="utf-8")
    StandIn.token_file, StandIn.expire_after = held, 10
    cfg = tmp_path / "airflow.cfg"
    command = f"sh -c 'echo ran >> {ran}; cat {held}'"
    cfg.write_text(f"[state_store]\napi_url = {stand_in[0]}\napi_token_cmd = {command}\n", encoding="utf-8")
    cfg.chmod(0o600)
    done = run_cli("--config", str(cfg), "list", "--dag-id", "etl", "-o", "json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == []
    assert ran.read_text(encoding="utf-8").count("ran") == 2  # at the start, then once for every thread
    assert sorted(set(StandIn.walked)) == [f"t{n:02}" for n in range(40)]


def test_a_token_exchanged_for_a_password_is_exchanged_again_when_it_expires(stand_in, monkeypatch, tmp_path) -> None:
    _forty_task_instances()
    StandIn.token_file, StandIn.expire_after = tmp_path / "unused", 10
    monkeypatch.delenv("STATESTORE_API_TOKEN")
    monkeypatch.setenv("STATESTORE_API_USERNAME", "viewer")
    monkeypatch.setenv("STATESTORE_API_PASSWORD", "weiverweiver")
    done = run_cli("--api-url", stand_in[0], "list", "--dag-id", "etl", "-o", "json")
    assert done.exit_code == 0, done.output
    assert StandIn.issued == ["tok-exchanged-0", "tok-exchanged-1"]


def test_a_token_given_as_it_is_cannot_be_renewed(stand_in, token, tmp_path) -> None:
    _forty_task_instances()
    StandIn.token_file, StandIn.expire_after = tmp_path / "unused", 10
    refused = run_cli("--api-url", stand_in[0], "list", "--dag-id", "etl")
    assert refused.exit_code == 2, refused.output
    assert "did not accept the credentials from environment variable STATESTORE_API_TOKEN" in refused.stderr
    assert token not in refused.output


@pytest.mark.parametrize("how", ["variable", "config"])
def test_get_goes_to_the_api_not_to_the_local_sqlite_file(clean_environment, tmp_path, how) -> None:
    """The cold `get` path reads SQLite itself; with an API URL (variable or config) it must not: here the local
    file holds the key, and the API's address refuses connections, so only a read of the file would succeed."""
    scope = ["--dag-id", "etl", "--run-id", "r1", "--task-id", "load"]
    assert run_cli("db", "init").exit_code == 0
    assert run_cli("set", *scope, "job_id", "42").exit_code == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    env = {**os.environ, "STATESTORE_API_TOKEN": "tok-3f9a1c"}
    if how == "variable":
        env["STATESTORE_API_URL"] = closed
    else:
        (clean_environment / "airflow.cfg").write_text(f"[state_store]\napi_url = {closed}\n", encoding="utf-8")
    done = run_statestore_process("get", *scope, "job_id", env=env)
    assert done.exit_code == 3, done.output
    assert "connection refused" in done.stderr


def test_conn_on_the_command_line_wins_over_an_api_url_from_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STATESTORE_API_URL", PROXIED)  # nothing listens there: a request would fail
    conn = f"sqlite:///{tmp_path / 'state.db'}"
    assert run_cli("db", "init", conn=conn).exit_code == 0
    scope = ("--dag-id", "etl", "--run-id", "manual__1", "--task-id", "extract")
    done = run_cli("set", *scope, "job_id", "42", conn=conn)
    assert done.exit_code == 0, done.output
    read = run_cli("get", *scope, "job_id", conn=conn)
    assert (read.exit_code, read.stdout) == (0, "42\n"), read.output
    both = run_cli("--api-url", PROXIED, "get", *scope, "job_id", conn=conn)
    assert (both.exit_code, both.stdout) == (2, ""), both.output
    assert (
        both.stderr == "statestore: error: --conn names a database and --api-url Airflow's REST API: give one of them\n"
    )
