"""The one place where an error becomes what the user sees: one line on stderr, control characters
escaped, and the exit code its class carries. ``StateStoreGroup`` (the full CLI) and the fast ``get``
path both end here; kept free of typer and rich so the fast path can use it."""

from __future__ import annotations

import sys

from statestore_cli.cli.safe_text import error_line
from statestore_cli.errors import StateStoreError

# The library names an argument by its parameter; the CLI user knows it by its flag.
FLAGS = {
    "config_path": "--config",
    "conn_override": "--conn",
    "exclusive": "--exclusive",
    "expires_at": "--expires-at",
    "force": "--force",
    "lock_seconds": "--lock-timeout",
    "retention": "--retention",
    "statement_seconds": "--statement-timeout",
}


def message(error: StateStoreError) -> str:
    """The error's message in the CLI's terms: a parameter is named by its flag."""
    return error.worded(FLAGS)


def report(text: str, exit_code: int) -> int:
    """Write ``text`` as the one error line; returns ``exit_code`` for the caller to exit with."""
    sys.stdout.flush()
    sys.stderr.write(error_line(text))
    return exit_code


def report_error(error: StateStoreError) -> int:
    return report(message(error), error.exit_code)
