"""A real ``statestore`` process on a pseudo-terminal, as an operator at a prompt has it: ``Terminal`` (the
terminal its controlling one, keys typed on it), ``terminal_env``, and ``read_terminal`` for a process the test
started on a terminal itself."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import termios
import time
from collections.abc import Callable

import pytest
from cli_running import start_statestore


class Terminal:
    """``statestore ARGS`` with a pseudo-terminal as its controlling terminal (so ^C typed on it is a
    SIGINT, as at a real prompt) on stdin, stdout and stderr."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.primary, secondary = pty.openpty()
        # NOFLSH: a ^C must not discard what the command writes just after it (the kernel's flush on
        # ^C races with that write on a loaded machine; the line would be lost to the test, not the user).
        attrs = termios.tcgetattr(secondary)
        attrs[3] |= termios.NOFLSH
        termios.tcsetattr(secondary, termios.TCSANOW, attrs)
        self.proc = start_statestore(
            *args,
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            env=env,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # the terminal becomes its controlling one
        )
        # The test keeps its own copy of the terminal open until the command has ended: reading a pty
        # whose other side is closed can fail (EIO) before the last lines written to it are readable.
        self.secondary = secondary
        self.seen = b""

    def wait_for(self, text: bytes, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            ready, _, _ = select.select([self.primary], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.proc.kill()
                pytest.fail(f"{text!r} never appeared; so far: {self.seen!r}")
            self.seen += os.read(self.primary, 65536)

    def type(self, keys: bytes) -> None:
        os.write(self.primary, keys)

    def finish(self) -> tuple[int, str]:
        deadline = time.monotonic() + 60
        while True:
            ready, _, _ = select.select([self.primary], [], [], 0.2)
            if ready:
                self.seen += os.read(self.primary, 65536)
            elif self.proc.poll() is not None:
                # Ended: what it wrote between the select above and its exit is still to be read.
                while select.select([self.primary], [], [], 0.2)[0]:
                    self.seen += os.read(self.primary, 65536)
                break
            elif time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"the command did not end; so far: {self.seen!r}")
        os.close(self.secondary)
        os.close(self.primary)
        return self.proc.returncode, self.seen.decode(errors="replace").replace("\r\n", "\n")


def terminal_env(columns: int = 120, **extra: str) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "NO_COLOR": "1", "TERM": "xterm"}
    env.pop("STATESTORE_NO_FAST_PATH", None)
    return {**env, **extra}


def read_terminal(primary: int, proc: subprocess.Popen, on_output: Callable[[bytes], None] | None = None) -> bytes:
    """Everything ``proc`` writes to the pseudo-terminal whose other side is ``primary``, until it closes
    it; ``on_output`` sees what was read so far after each read (to answer a prompt). Closes ``primary``."""
    seen = b""
    while True:
        ready, _, _ = select.select([primary], [], [], 20)
        if not ready:
            proc.kill()
            pytest.fail(f"no output on the terminal; so far {seen!r}")
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if on_output is not None:
            on_output(seen)
    os.close(primary)
    return seen
