"""Faults a test sets up around a real command: a server that accepts connections and never answers, a session
found on the server and killed, a row held locked by another transaction."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from servers import engine_of
from sqlalchemy import make_url, text


class SilentServer:
    """A TCP port that accepts every connection and never sends a byte, as a hung database server does."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed at the end of the test
                return
            self._held.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


@contextmanager
def named_session(db_url: str) -> Iterator[tuple[str, str]]:
    """``db_url`` with a marker that lets the test find the server session that uses it: the URL to
    give the command, and the marker (PostgreSQL's application_name; MariaDB's database name)."""
    url = make_url(db_url)
    if url.get_backend_name() == "postgresql":
        name = f"victim_{uuid.uuid4().hex[:8]}"
        yield url.update_query_dict({"application_name": name}).render_as_string(hide_password=False), name
    else:
        assert url.database
        yield db_url, url.database


def kill_session(
    db_url: str, marker: str, proc: subprocess.Popen, *, waiting_for_lock: bool = False, deadline: float = 60
) -> None:
    """End the server session of the command (``pg_terminate_backend`` / ``KILL``) once it is there
    (and, with ``waiting_for_lock``, waiting for a row lock)."""
    admin = engine_of(db_url, isolation_level="AUTOCOMMIT")
    postgres = admin.dialect.name == "postgresql"
    if postgres:
        find = "SELECT pid FROM pg_stat_activity WHERE application_name = :m"
        find += " AND wait_event_type = 'Lock'" if waiting_for_lock else ""
    else:  # the lock holder sleeps between statements; the command waiting for its lock is in a query
        find = "SELECT id FROM information_schema.processlist WHERE db = :m AND id <> CONNECTION_ID()"
        # for 2 s or more: no statement of these commands takes that long on a test's few rows but a lock wait
        # (INNODB_TRX does not list a locking read that waits; a session caught in any short query may not be there yet)
        find += " AND command = 'Query' AND time >= 2" if waiting_for_lock else ""
    give_up = time.monotonic() + deadline
    try:
        with admin.connect() as conn:
            while time.monotonic() < give_up and proc.poll() is None:
                ids = [row[0] for row in conn.execute(text(find), {"m": marker})]
                if ids:
                    for session in ids:
                        if postgres:
                            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": session})
                        else:
                            conn.exec_driver_sql(f"KILL {int(session)}")
                    return
                time.sleep(0.02)
    finally:
        admin.dispose()
    proc.kill()
    pytest.fail(f"the command's session never appeared; the command: {proc.communicate()}")


@contextmanager
def row_locked(db_url: str, key: str) -> Iterator[None]:
    """Hold the row lock of task key ``key`` (SELECT ... FOR UPDATE in an open transaction)."""
    engine = engine_of(db_url)
    quoted = "`key`" if engine.dialect.name in ("mysql", "mariadb") else '"key"'
    with engine.connect() as conn, conn.begin():
        found = conn.execute(text(f"SELECT id FROM task_state_store WHERE {quoted} = :k FOR UPDATE"), {"k": key})
        assert found.first() is not None
        yield
    engine.dispose()
