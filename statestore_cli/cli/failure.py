"""The one place where an error becomes what the user sees: one line on stderr (at a terminal, the same
words broken between words at its width, the problem first and each fix on a ``hint:`` line:
``cli.output.message_layout``), control characters escaped, and the exit code its class carries.
``StateStoreGroup`` (the full CLI) and the fast ``get`` path both end here; kept free of typer and rich
so the fast path can use it.

A reader that stops reading (`statestore list | head -1`) is not an error: ``closed_pipe`` ends the
command quietly, as `cat` does, and every exit goes through ``finish``, which flushes stdout first so
that a closed pipe is noticed here and not in the interpreter's own flush at shutdown (which would
print "Exception ignored ... BrokenPipeError").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from statestore_cli.cli.output.message_layout import stderr_message, terminal_width
from statestore_cli.errors import EXIT_OK, StateStoreError
from statestore_cli.masking import mask_text

# The library names an argument by its parameter; the CLI user knows it by its flag.
FLAGS = {
    "all_unreferenced": "--all-unreferenced",
    "api_url_override": "--api-url",
    "backup": "--backup",
    "batch_size": "--batch-size",
    "config_path": "--config",
    "conn_override": "--conn",
    "connect_timeout_override": "--connect-timeout",
    "exclusive": "--exclusive",
    "grace": "--grace",
    "expires_at": "--expires-at",
    "force": "--force",
    "lock_timeout_override": "--lock-timeout",
    "map_index": "--map-index",
    "metrics_file": "--metrics-file",
    "labels": "--metrics-label",
    "older_than": "--older-than",
    "retention": "--retention",
    "statement_seconds": "--statement-timeout",
}


def message(error: StateStoreError) -> str:
    """The error's message in the CLI's terms: a parameter is named by its flag."""
    return error.worded(FLAGS)


def report(text: str, exit_code: int, *, answer: bool = False, problem: str | None = None) -> int:
    """Write ``text`` as the error (``answer``: as the plain line of a question answered no, without
    "error:"); ``problem``: where the author said its problem ends. Returns ``exit_code`` for the caller
    to exit with. A closed stdout or stderr does not hide the exit code: the line is dropped, the code stands."""
    finish(exit_code)  # what the command printed comes before the error
    text = mask_text(text)  # the last line of defence: no password reaches the screen or a cron log
    problem = None if problem is None else mask_text(problem)  # still the start of the text, masked alike
    try:
        prefix = "statestore: " if answer else "statestore: error: "
        sys.stderr.write(stderr_message(prefix, text, terminal_width(sys.stderr), problem=problem))
        sys.stderr.flush()
    except BrokenPipeError:
        closed_pipe()
    return exit_code


def warn(text: str) -> None:
    """A warning on stderr, laid out as an error is, control characters escaped; the command goes on."""
    sys.stderr.write(stderr_message("statestore: warning: ", mask_text(text), terminal_width(sys.stderr)))


@contextmanager
def warnings_as_lines() -> Iterator[None]:
    """While active, the library's warnings about files another user can change (``UntrustedFileWarning``)
    are ``warn`` lines, each time they are raised; other warnings are shown as Python shows them."""
    import warnings

    from statestore_cli.config.trust import UntrustedFileWarning

    with warnings.catch_warnings():
        warnings.simplefilter("always", UntrustedFileWarning)
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if issubclass(category, UntrustedFileWarning):
                warn(str(message))
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


def closed_pipe(exit_code: int = EXIT_OK) -> int:
    """The reader of our output has gone: say nothing and return ``exit_code`` (0 unless the command's
    own result decided another code before the pipe closed, as a clean stopped early does).

    What is still buffered for a closed stream can never be written, and Python would try again at
    exit and complain; such a stream is pointed at the null device, so those writes go nowhere."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            _to_devnull(stream)
        except (OSError, ValueError):  # closed or not a file: nothing is buffered for the OS
            pass
    return exit_code


def finish(exit_code: int) -> int:
    """Flush stdout before the process exits with ``exit_code``; a closed pipe noticed only now
    (output small enough to sit in the buffer) changes nothing about the code."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe(exit_code)
    except (OSError, ValueError):
        pass
    return exit_code


def _to_devnull(stream: TextIO) -> None:
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not backed by a descriptor (a test's capture): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def report_error(error: StateStoreError) -> int:
    return report(message(error), error.exit_code, answer=error.answer, problem=error.worded_problem(FLAGS))
