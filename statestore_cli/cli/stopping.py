"""Signals: SIGTERM ends any command at once with its own exit code, as Ctrl-C does; a clean that has
started deleting stops after the current batch instead, not in the middle."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

from statestore_cli.errors import StopReason

_REASONS: dict[int, StopReason] = {signal.SIGINT: StopReason.INTERRUPTED, signal.SIGTERM: StopReason.TERMINATED}


class Terminated(BaseException):
    """SIGTERM arrived: raised like KeyboardInterrupt is for Ctrl-C, so a blocking connect or read ends
    at once (Python retries an interrupted system call only when the handler returns)."""


def _raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """While active, SIGTERM raises ``Terminated`` in the main thread (the CLI turns it into exit 143)."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread (an embedding program): its own handling stays
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StopOnSignal:
    """While active, SIGINT and SIGTERM stop the command at once (KeyboardInterrupt, ``Terminated``)
    until ``defer()`` is called, typically once the clean is connected and about to delete; from then
    on the first one is remembered (``reason()``) instead, and a second Ctrl-C stops at once, for an
    operator who really means it."""

    def __init__(self) -> None:
        self._reason: StopReason | None = None
        self._previous: dict[int, Any] = {}
        self._deferring = False

    def defer(self) -> None:
        self._deferring = True

    def reason(self) -> StopReason | None:
        return self._reason

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self._deferring:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated
        if self._reason is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self._reason = _REASONS[signum]

    def __enter__(self) -> StopOnSignal:
        for signum in _REASONS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
