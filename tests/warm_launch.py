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


def main() -> int:
    request = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    channel.connect(os.environ["STATESTORE_WARM_SOCKET"])
    message = json.dumps(request).encode() + b"\n"
    channel.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
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
