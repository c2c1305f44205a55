"""A ``statestore`` executable for the benchmarks' smoke tests: the command runs in a process forked by the test
worker's warm server (``warm_server.py``), and this one stands in for it (``warm.launcher`` writes it).

    STATESTORE_WARM_SOCKET=SOCKET python warm_launch.py ARGS...

The benchmark scripts start hundreds of ``statestore`` processes, each of which would spend 0.4-0.7 s importing
the tool; a smoke test checks that every measurement runs, not what a cold start costs (``test_startup`` and
``test_bench_startup`` do, on cold processes). This process hands its arguments, environment, folder and three
standard descriptors to the server, passes on the signals it gets (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and ends
as the command ended: its exit status, or killed by the same signal. It imports nothing beyond the standard
library's socket layer, so it starts in milliseconds.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def send_request(server: str, argv: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> socket.socket:
    """Ask the warm server listening on ``server`` to run ``argv`` in ``env`` and ``cwd``, on ``fds`` as its
    standard input, output and error: one JSON line, the descriptors passed along with it. The server answers
    on the connection returned: ``pid N`` once the command runs, ``status N`` (a wait status) when it ended."""
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        channel.connect(server)
        message = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode() + b"\n"
        channel.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    except OSError:
        channel.close()
        raise
    return channel


def main() -> int:
    server = os.environ["STATESTORE_WARM_SOCKET"]
    channel = send_request(server, sys.argv[1:], dict(os.environ), os.getcwd(), [0, 1, 2])
    replies = channel.makefile("rb")
    word, _, value = replies.readline().decode().partition(" ")
    if word != "pid":
        print("statestore (warm launcher): the warm server did not start the command", file=sys.stderr)
        return 70
    pid = int(value)
    for number in FORWARDED:
        signal.signal(number, lambda received, _frame: os.kill(pid, received))
    word, _, value = replies.readline().decode().partition(" ")
    if word != "status":  # the server went away first: the command is lost to us
        return 70
    status = int(value)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
