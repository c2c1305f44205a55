"""Real ``statestore`` processes that start without importing the tool again: forked by a server (one per
test worker, ``warm_server.py``) that imported it once.

A test starts hundreds of ``statestore`` processes; a cold one spends 0.4-0.7 s of CPU importing SQLAlchemy,
typer and rich before it reads its arguments (on a 2-core machine, a third of the suite's CPU). A forked one
is as real a process: its own pid (signals, kill, exit status), the descriptors the test gives it (pipes, files,
a pseudo-terminal's side), its own environment and folder; only the imports are already done. ``popen`` gives
such a process where that changes nothing the test can see, and a cold ``python -m statestore_cli`` otherwise:

- options a forked process cannot honour (a new session or process group, ``preexec_fn``, ``pass_fds``...);
- an environment whose interpreter settings (``PYTHON*``, the locale) or the variables a module reads when it is
  imported (typer's, psycopg's) differ from the server's, which it started with;
- ``STATESTORE_TESTS_COLD=1`` in the environment, which makes every process cold (to compare the two).

Start-up itself (imports, their cost, what a command loads) is tested on cold processes: ``statestore_argv``
with ``code=`` or Python flags is never forked.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from warm_launch import send_request

SERVER = Path(__file__).with_name("warm_server.py")
LAUNCH = Path(__file__).with_name("warm_launch.py")  # the benchmarks' stand-in for statestore (launcher)
COLD_PREFIX = [sys.executable, "-m", "statestore_cli"]  # statestore_argv's, without code or flags

# The environment a forked process must share with the server: what the interpreter reads when it starts, and
# what the modules the server imported read when they were imported.
_SAME_PREFIXES = ("PYTHON", "LC_", "PSYCOPG")
_SAME_NAMES = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TYPER_USE_RICH",
        "TERMINAL_WIDTH",
        "_TYPER_FORCE_DISABLE_TERMINAL",
        "GITHUB_ACTIONS",
        "FORCE_COLOR",
        "PY_COLORS",
    }
)
# Popen's options a forked process honours as a cold one would (it holds no descriptor but its three).
_FORKABLE_OPTIONS = frozenset(
    {"stdin", "stdout", "stderr", "text", "universal_newlines", "encoding", "errors", "env", "cwd", "bufsize"}
    | {"close_fds"}
)


class _Server:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="ss-warm-"))
        self.socket = self.folder / "socket"
        self.environ = dict(os.environ)
        log = (self.folder / "server.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), str(self.socket)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=self.environ,
        )
        log.close()
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the warm server did not start: {self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        return (self.folder / "server.log").read_text(errors="replace")[-2000:]

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)


_servers: list[_Server] = []


def _server() -> _Server | None:
    if _servers and not _servers[0].alive():
        _servers.pop().stop()
    if not _servers:
        try:
            _servers.append(_Server())
        except (OSError, RuntimeError):
            return None
        atexit.register(_stop_servers)
    return _servers[0]


def _stop_servers() -> None:
    while _servers:
        _servers.pop().stop()


def _same_interpreter(env: Mapping[str, str], server_env: Mapping[str, str]) -> bool:
    names = {n for n in (*env, *server_env) if n.startswith(_SAME_PREFIXES) or n in _SAME_NAMES}
    return all(env.get(n) == server_env.get(n) for n in names)


def popen(args: Sequence[str], **options: Any) -> subprocess.Popen:
    """``subprocess.Popen(statestore_argv(*args), **options)``: forked from the worker's server where nothing
    the test can see differs (see the module's docstring), a cold process otherwise."""
    argv = [*COLD_PREFIX, *args]
    env = options.get("env")
    if os.environ.get("STATESTORE_TESTS_COLD") or (env or {}).get("STATESTORE_TESTS_COLD"):
        return subprocess.Popen(argv, **options)
    if not set(options) <= _FORKABLE_OPTIONS or not options.get("close_fds", True):
        return subprocess.Popen(argv, **options)
    server = _server()
    if server is None or not _same_interpreter(os.environ if env is None else env, server.environ):
        return subprocess.Popen(argv, **options)
    return _Forked(server, argv, **options)


def launcher(folder: Path) -> dict[str, str]:
    """The environment in which the benchmark scripts start their ``statestore`` processes from the worker's
    server: ``STATESTORE_BENCH_EXECUTABLE``, an executable written into ``folder`` (``warm_launch.py``), and the
    server's socket; empty (cold processes) where ``popen`` would start them cold."""
    server = None if os.environ.get("STATESTORE_TESTS_COLD") else _server()
    if server is None or not _same_interpreter(os.environ, server.environ):
        return {}
    executable = folder / "statestore"
    executable.write_text(f"#!{sys.executable} -IS\n" + LAUNCH.read_text())
    executable.chmod(0o755)
    return {"STATESTORE_BENCH_EXECUTABLE": str(executable), "STATESTORE_WARM_SOCKET": str(server.socket)}


def run(args: Sequence[str], *, input: str | None = None, timeout: float | None = None, **options: Any) -> Any:
    """``subprocess.run(statestore_argv(*args), capture_output=True, text=True, ...)`` through ``popen``."""
    options.setdefault("stdout", subprocess.PIPE)
    options.setdefault("stderr", subprocess.PIPE)
    options.setdefault("text", True)
    if input is not None:
        options["stdin"] = subprocess.PIPE
    with popen(args, **options) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


class _Forked(subprocess.Popen):
    """A ``Popen`` whose process the server forks (``_execute_child``) and reaps, telling its wait status
    (``_try_wait``, ``_internal_poll``); everything else (pipes, communicate, signals, timeouts) is Popen's."""

    def __init__(self, server: _Server, argv: list[str], **options: Any) -> None:
        self._server = server
        self._channel: socket.socket | None = None
        self._pending = b""
        super().__init__(argv, **options)

    def _execute_child(  # type: ignore[override]
        self,
        args: list[str],
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Sequence[int],
        cwd: Any,
        env: Mapping[str, str] | None,
        startupinfo: Any,
        creationflags: int,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *_: Any,
    ) -> None:
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        try:
            channel = send_request(
                str(self._server.socket),
                args[len(COLD_PREFIX) :],
                dict(os.environ if env is None else env),
                os.fspath(cwd) if cwd is not None else os.getcwd(),
                fds,
            )
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        self._channel = channel
        word, value = self._line()
        if word != "pid":
            channel.close()
            raise OSError(f"the warm server did not start the process: {self._server.log()}")
        self.pid = int(value)
        self._child_created = True

    def _line(self) -> tuple[str, str]:
        """The server's next line, waiting for it; ``("gone", "")`` when the server closed the connection."""
        assert self._channel is not None
        while b"\n" not in self._pending:
            chunk = self._channel.recv(256)
            if not chunk:
                return "gone", ""
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        word, _, value = line.decode().partition(" ")
        return word, value

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        if self._channel is None:
            return self.pid, 0
        if wait_flags & os.WNOHANG and b"\n" not in self._pending:
            ready, _, _ = select.select([self._channel], [], [], 0)
            if not ready:
                return 0, 0
        word, value = self._line()
        self._channel.close()
        self._channel = None
        if word != "status":  # the server died first: the process is lost to us
            return self.pid, signal.SIGKILL  # a wait status: killed by SIGKILL
        return self.pid, int(value)

    def _internal_poll(self, _deadstate: Any = None, **_: Any) -> int | None:
        if self.returncode is None:
            if not self._waitpid_lock.acquire(False):  # type: ignore[attr-defined]
                return None
            try:
                if self.returncode is None:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(status)  # type: ignore[attr-defined]
            except OSError:
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return self.returncode
