"""The two ways the tests run the CLI.

- ``run_cli`` (or the ``cli`` fixture, which adds ``--conn`` of the test's store) runs it in-process; every
  test that only looks at exit code, stdout and stderr uses it.
- ``run_statestore_process`` / ``statestore_argv`` / ``start_statestore`` start a real process, for what needs
  one: signals, a terminal, the start-up fast path, an interpreter without the database drivers, an installed
  wheel (forked by the worker's warm server where that changes nothing, ``warm.py``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer.main
import warm
from typer.testing import CliRunner

from statestore_cli.cli.root_command import app

# A program for `python -c` that runs the CLI on its arguments, then reports the heavy modules it loaded on
# stdout, in its last line (stderr may be the terminal under test).
LOADED_PROBE = """
import sys
sys.argv[0] = "statestore"
from statestore_cli.__main__ import main

try:
    main()
finally:
    print("LOADED=" + ",".join(sorted({m.split(".")[0] for m in sys.modules} & {"typer", "rich", "sqlalchemy"})))
"""


class Result:
    """What one CLI run produced: exit code, stdout and stderr kept apart."""

    def __init__(self, exit_code: int, stdout: str, stderr: str, exception: BaseException | None) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.exception = exception

    @property
    def output(self) -> str:  # for assertion messages
        return f"exit {self.exit_code}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


_root_command: list[Any] = []  # the click command typer makes of the app, made once per process


def run_cli(*args: str, conn: str | None = None, input: str | None = None) -> Result:
    """Run ``statestore [--conn CONN] ARGS`` in this process; without ``conn`` the configuration decides.

    As ``typer.testing.CliRunner.invoke`` does (stdin, stdout, stderr and the environment isolated, the exit
    code from SystemExit), but with the click command typer makes of the app made once, not on each
    call, where it took two thirds of a run's time: a process makes it once too, and keeps no state in it."""
    argv = (["--conn", conn] if conn else []) + list(args)
    if not _root_command:
        _root_command.append(typer.main.get_command(app))
    command = _root_command[0]
    runner = CliRunner()
    exception: BaseException | None = None
    with runner.isolation(input=input) as (stdout, stderr, _):
        try:
            command.main(args=argv, prog_name=runner.get_default_prog_name(command))
            exit_code = 0
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code
            if code != 0:
                exception = exc
            if not isinstance(code, int):
                sys.stdout.write(f"{code}\n")
                code = 1
            exit_code = code
        except Exception as exc:  # as CliRunner: the exception is the result's, exit code 1
            exception, exit_code = exc, 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = stdout.getvalue(), stderr.getvalue()

    def decoded(data: bytes) -> str:
        return data.decode(runner.charset, "replace").replace("\r\n", "\n")

    return Result(exit_code, decoded(out), decoded(err), exception)


def statestore_argv(*args: str, code: str | None = None, python_flags: Sequence[str] = ()) -> list[str]:
    """The command line of a real ``statestore ARGS`` process: ``python -m statestore_cli ARGS``.

    With ``code`` it is ``python -c CODE ARGS`` instead: CODE prepares the process (blocks an import,
    reports what was loaded...) and calls ``statestore_cli.__main__.main()``, or only imports the package.
    """
    how = ["-c", code] if code is not None else ["-m", "statestore_cli"]
    return [sys.executable, *python_flags, *how, *args]


def run_statestore_process(
    *args: str,
    code: str | None = None,
    python_flags: Sequence[str] = (),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float = 300,
) -> Result:
    """Run ``statestore ARGS`` as a real process (see ``statestore_argv``) and wait for it to exit; without
    ``code`` or flags, one the worker's warm server forks where that changes nothing (``warm.py``)."""
    if code is None and not python_flags:
        done = warm.run(args, env=env, cwd=cwd, input=input, timeout=timeout)
    else:
        argv = statestore_argv(*args, code=code, python_flags=python_flags)
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=cwd, input=input, timeout=timeout, check=False
        )
    return Result(done.returncode, done.stdout, done.stderr, None)


def start_statestore(*args: str, **options: Any) -> subprocess.Popen:
    """``subprocess.Popen(statestore_argv(*args), **options)``: a real ``statestore`` process, forked by the
    worker's warm server where that changes nothing the test can see (``warm.py``)."""
    return warm.popen(args, **options)


def ok(*args: str, conn: str, input: str | None = None) -> str:
    """``run_cli``, which must succeed: its stdout."""
    run = run_cli(*args, conn=conn, input=input)
    assert run.exit_code == 0, run.output
    return run.stdout
