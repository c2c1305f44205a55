"""Stopping a clean cleanly: Ctrl-C and SIGTERM end it after the current batch, not in the middle."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from statestore_cli.errors import StopReason

_REASONS: dict[int, StopReason] = {signal.SIGINT: StopReason.INTERRUPTED, signal.SIGTERM: StopReason.TERMINATED}


class StopOnSignal:
    """While active, the first SIGINT or SIGTERM is remembered (``reason()``) instead of killing the
    process; a second Ctrl-C stops at once, for an operator who really means it."""

    def __init__(self) -> None:
        self._reason: StopReason | None = None
        self._previous: dict[int, Any] = {}

    def reason(self) -> StopReason | None:
        return self._reason

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
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
