"""An ``..._cmd`` option's command, run: its stdout is the option's value, masked in every later message."""

from __future__ import annotations

import os

from statestore_cli.config.sources import named_place
from statestore_cli.errors import ConfigError, ConfigSourceError
from statestore_cli.masking import register_secret


def run_config_command(command: str, where: str, timeout: float) -> str:
    """The stdout of ``command`` (an ``..._cmd`` option at ``where``), without surrounding whitespace.

    As Airflow runs it: split into words as a POSIX shell would (``shlex``), with no shell (pipes and
    ``$VAR`` need an explicit ``sh -c '...'``); unlike Airflow, bounded by ``timeout`` seconds. Its
    output may be a password, so no message quotes it, and it is masked in every later message
    (``register_secret``). Its stderr is dropped: it may hold the secret in any shape."""
    import contextlib
    import shlex
    import signal
    import subprocess

    named = named_place(where)
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"{named}: cannot split the command into words ({exc}); fix its quoting") from None
    if not argv:
        raise ConfigError(f"{named}: the command is empty; give the command that prints the value")
    try:
        # A session of its own: on a timeout the whole group goes, a `sh -c` and what it started.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )
    except OSError as exc:  # not found, not executable
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{named}: cannot run {argv[0]!r}: {reason}; fix the command") from None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException as exc:  # the timeout, Ctrl-C, SIGTERM: the command must not outlive us
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise ConfigSourceError(
                f"{named}: the command did not finish within {timeout:g}s and was stopped; "
                "raise [state_store] command_timeout or make the command answer sooner"
            ) from None
        raise
    value = out.decode("utf-8", "replace").strip()
    register_secret(value)  # masked in every later message: a driver's error, a traceback's last line
    if proc.returncode != 0:
        status = f"exit status {proc.returncode}" if proc.returncode > 0 else f"signal {-proc.returncode}"
        # Its stderr is not shown: it may hold the secret in any shape ("token <password> expired").
        raise ConfigSourceError(
            f"{named}: the command failed ({status}); its output is not shown, as it may hold a password: "
            "run the command yourself to see it"
        ) from None
    if not value:
        raise ConfigError(f"{named}: the command printed nothing; it must print the value on stdout")
    return value
