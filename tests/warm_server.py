"""The fork server behind ``warm.py``: a process that has imported the tool once and forks a ``statestore``
process for each request, so that a test's process skips the 0.4-0.7 s of CPU an interpreter spends
importing SQLAlchemy, typer and rich.

    python warm_server.py SOCKET

Each connection to the Unix socket ``SOCKET`` is one request: a JSON object (``argv``: the arguments after
``statestore``, ``env``, ``cwd``) sent with three file descriptors (the new process's stdin, stdout and
stderr). The server answers ``pid <n>`` once the process runs and ``status <wait status>`` when it has ended
(this server is its parent and reaps it). The new process then does what ``python -m statestore_cli`` does
after start-up: standard streams made as the interpreter makes them, its own environment and folder, the
signal handling of a new interpreter, ``runpy`` of the package's ``__main__``, and the interpreter's own exit
(flushing, exit status). The server ends when its parent does.
"""

from __future__ import annotations

import array
import contextlib
import gc
import io
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any

# What a command imports on its way: the CLI and every command module, SQLAlchemy's dialects and drivers.
PRELOAD = (
    "statestore_cli.cli.root_command",
    "statestore_cli.cli.failure",
    "statestore_cli.cli.fast_get",
    "sqlalchemy",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "psycopg",
    "pymysql",
    "rich.console",
    "rich.table",
    "rich.progress",
)


def preload() -> None:
    import importlib
    import pkgutil

    for name in PRELOAD:
        importlib.import_module(name)
    import statestore_cli

    for found in pkgutil.walk_packages(statestore_cli.__path__, "statestore_cli."):
        if found.name.endswith("__main__"):
            continue
        with contextlib.suppress(ImportError):  # an optional dependency missing here: the process finds out itself
            importlib.import_module(found.name)


def serve(path: str) -> tuple[dict[str, Any], list[int]] | None:
    """Answer requests until the parent ends; in a forked process, return its request and descriptors."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and listening before it takes ``path``: the client waits for ``path`` to exist,
    # and a socket bound but not yet listening refuses a connection.
    listener.bind(path + ".binding")
    listener.listen(64)
    os.rename(path + ".binding", path)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the pipe
    waiting: dict[int, socket.socket] = {}  # pid: the connection its status goes to
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    gc.freeze()  # what the import made stays shared with the forked processes
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj == wake_read:
                os.read(wake_read, 4096)
                continue
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, EOFError, ValueError):  # a client that went away midway: nothing to start
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:  # the new process: out of the server, into the command
                selector.close()
                listener.close()
                conn.close()
                for other in waiting.values():
                    other.close()
                signal.set_wakeup_fd(-1)
                os.close(wake_read)
                os.close(wake_write)
                return request, fds
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):  # a client gone already still has its process reaped
                conn.sendall(f"pid {pid}\n".encode())
            waiting[pid] = conn
        _reap(waiting)
    return None


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data = bytearray()
    fds = array.array("i")
    while not data.endswith(b"\n"):
        chunk, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * fds.itemsize))
        if not chunk:
            raise EOFError("the request ended early")
        data += chunk
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), list(fds)


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):  # the test has gone: nobody to tell
                conn.sendall(f"status {status}\n".encode())
            conn.close()


def become(request: dict[str, Any], fds: list[int]) -> None:
    """Turn the forked server into ``statestore ARGV`` run by a new interpreter."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.stdin, sys.stdout, sys.stderr = (_stream(fd, stream) for fd, stream in enumerate(_STREAMS))
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    sys.argv = ["statestore", *request["argv"]]


_STREAMS = (sys.__stdin__, sys.__stdout__, sys.__stderr__)
# -u or PYTHONUNBUFFERED (the same as the server's): the interpreter wrote straight to the descriptor.
_UNBUFFERED = isinstance(getattr(sys.__stdout__, "buffer", None), io.RawIOBase)


def _stream(fd: int, before: Any) -> io.TextIOWrapper:
    """A standard stream on ``fd`` as the interpreter makes one at start-up (its encoding and errors those of
    the server's, whose environment matched)."""
    writing = fd > 0
    unbuffered = writing and _UNBUFFERED
    raw = io.FileIO(fd, "wb" if writing else "rb", closefd=False)
    buffer: Any = raw if unbuffered else (io.BufferedWriter(raw) if writing else io.BufferedReader(raw))
    line_buffering = not unbuffered and (raw.isatty() or fd == 2)
    stream = io.TextIOWrapper(
        buffer,
        encoding=before.encoding,
        errors=before.errors,
        newline="\n",
        line_buffering=line_buffering,
        write_through=unbuffered,
    )
    stream.mode = "w" if writing else "r"  # type: ignore[misc]
    return stream


if __name__ == "__main__":
    preload()
    job = serve(sys.argv[1])
    if job is None:
        sys.exit(0)
    become(*job)
    import runpy

    runpy.run_module("statestore_cli", run_name="__main__", alter_sys=True)
