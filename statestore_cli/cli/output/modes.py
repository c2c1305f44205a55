"""The output modes, defined once: the ``--output`` choices of every command and of the fast ``get``
path, and how ``auto`` is decided."""

from __future__ import annotations

import sys
from enum import StrEnum


class OutputMode(StrEnum):
    auto = "auto"
    table = "table"
    plain = "plain"
    json = "json"


MODES: tuple[str, ...] = tuple(OutputMode)


def resolve(requested: str = "auto") -> OutputMode:
    """The mode to write in: ``auto`` is rich tables on a terminal, plain lines when stdout is a pipe
    or a file; a value that is not a mode raises ``ValueError``."""
    mode = OutputMode(requested)
    if mode is OutputMode.auto:
        return OutputMode.table if sys.stdout.isatty() else OutputMode.plain
    return mode
