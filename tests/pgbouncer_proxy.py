"""PgBouncer from the system's package in front of the PostgreSQL server, configured as Airflow's Helm chart
runs it, for the tests and the benchmark of a store behind a transaction pool."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from servers import throwaway_database
from sqlalchemy import make_url

PGBOUNCER = os.environ.get("STATESTORE_TEST_PGBOUNCER", "/usr/sbin/pgbouncer")  # where Debian's package puts it


def require_pgbouncer() -> str:
    """The PgBouncer binary; skips the test (fails it under CI=true, where .ci/run installs it) without one."""
    found = PGBOUNCER if os.access(PGBOUNCER, os.X_OK) else shutil.which("pgbouncer")
    if found is None:
        message = f"pgbouncer is not installed at {PGBOUNCER} or on PATH; install it with: apt-get install -y pgbouncer"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def throwaway_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (``throwaway_database``): its name; dropped afterwards.

    Through PgBouncer a schema cannot be chosen with the URL's ``options`` (PgBouncer refuses that startup
    parameter, and ignoring it would put the tables in ``public`` of the shared database), so a store
    behind it gets a database of its own and uses its ``public`` schema."""
    with throwaway_database("postgresql", "ss") as url:
        name = make_url(url).database
        assert name is not None
        yield name


class PgBouncer(NamedTuple):
    port: int
    folder: Path  # its configuration and log, removed when it stops

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def log(self) -> str:
        return (self.folder / "pgbouncer.log").read_text(errors="replace")

    def connect(self, database: str) -> Any:
        """A psycopg connection through PgBouncer that prepares nothing, as another client of the pool."""
        import psycopg

        where = {"host": "127.0.0.1", "port": self.port, "dbname": database, "user": "postgres"}
        return psycopg.connect(**where, prepare_threshold=None)

    def pinned(self, database: str, count: int) -> list[Any]:
        """``count`` connections through PgBouncer, each inside a transaction, so each holds a server
        connection of its own; with ``count`` the pool size they hold every server connection of the pool
        (and the pool has them all open afterwards). Roll them back to give the server connections back."""
        held = [self.connect(database) for _ in range(count)]
        pids = {conn.execute("SELECT pg_backend_pid()").fetchone()[0] for conn in held}
        assert len(pids) == count, f"{count} transactions shared server connections: {pids}"
        return held


@contextmanager
def pgbouncer(server_url: str, pool_mode: str = "transaction", pool_size: int = 2) -> Iterator[PgBouncer]:
    """PgBouncer from the system's package on a free loopback port, in front of the server of ``server_url``
    (every database of it), configured as Airflow's Helm chart runs it: ``pool_mode`` (transaction there),
    ``ignore_startup_parameters = extra_float_digits``; ``pool_size`` server connections per database and
    user, so that every client shares them. Consecutive transactions of one client go to different server
    connections (``server_round_robin``), as they do on a busy pool, so state left on one is found missing
    on the next. Its configuration and log are in a temporary folder of its own, removed with it; it is
    stopped (SIGTERM, then SIGKILL) afterwards."""
    binary = require_pgbouncer()
    server = make_url(server_url)
    # A folder of its own under the system's temporary directory: PgBouncer runs as another user when we
    # are root, and pytest's folders are private to us.
    folder = Path(tempfile.mkdtemp(prefix="statestore-pgbouncer-"))
    port = _free_port()
    (folder / "users.txt").write_text('"postgres" ""\n', encoding="utf-8")
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"logfile = {folder / 'pgbouncer.log'}\npidfile = {folder / 'pgbouncer.pid'}\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
        "max_client_conn = 200\nserver_round_robin = 1\n"
        "ignore_startup_parameters = extra_float_digits\n",
        encoding="utf-8",
    )
    argv = [binary, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: it runs as the server's own user
        import pwd

        user = pwd.getpwnam("postgres")
        argv[1:1] = ["-u", "postgres"]
        for path in (folder, *folder.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                log = folder / "pgbouncer.log"
                said = proc.stderr.read().decode(errors="replace") if proc.stderr and proc.poll() is not None else ""
                said += log.read_text(errors="replace")[-2000:] if log.exists() else ""
                pytest.fail(f"pgbouncer did not start on 127.0.0.1:{port}: {said}")
            time.sleep(0.05)
        yield PgBouncer(port, folder)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
