"""The one walk of a batched delete (``clean``, ``clear`` of a run or dag, ``assets sweep``): a batch at a
time, each its own transaction, from where the last one ended, with what happens between two batches (the
progress heard, a stop asked for, the pause an engine needs) said once.

What one batch deletes is the caller's ``step``: given where the batch starts (the value of the walked column
the last batch ended at; the walk's ``start`` for the first), it deletes the batch and returns how many rows
went and where the next batch starts, None when the walk is done. A ``Batch`` of ``ops.backup`` is such a
pair, so a backed-up batch (``backed_up_batch``) is a step as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from statestore_cli.db.database import retry_deadlocks
from statestore_cli.db.engines import impl_of
from statestore_cli.errors import BackendError, InvalidInputError, StopReason

Step = Callable[[Any], tuple[int, Any]]  # where the batch starts -> (rows deleted, where the next one starts)


@dataclass
class Tally:
    """Rows deleted and batches committed so far (a batch that deleted nothing is not counted): what a
    report says, and what the message of a delete that fails midway says stays deleted."""

    deleted: int = 0
    batches: int = 0


@dataclass(frozen=True)
class Hooks:
    """What happens between two batches besides the pause: ``progress`` hears the rows deleted so far after
    every batch; ``stop`` is asked after every batch but the last and returns a reason to stop (or None);
    ``pause`` waits (``time.sleep``; a test's or caller's own)."""

    progress: Callable[[int], None] | None = None
    stop: Callable[[], StopReason | None] | None = None
    pause: Callable[[float], None] = time.sleep


NO_HOOKS = Hooks()


def checked_batch_size(size: int) -> int:
    """``size`` when it is one a batched delete takes: 0 (one statement) or a positive number."""
    if size < 0:
        raise InvalidInputError(f"batch size must be 0 (one statement) or a positive number, got {size}")
    return size


def checked_rowcount(count: int | None) -> int:
    """A delete's rowcount, refused where the driver did not report one (a count of the rows deleted that
    is not one is no figure to report, nor to walk on)."""
    if count is None or count < 0:
        raise BackendError("the database did not report how many rows a delete removed")
    return int(count)


def walk(
    conn: Connection,
    step: Step,
    tally: Tally,
    start: Any = None,
    own_transaction: bool = True,
    hooks: Hooks = NO_HOOKS,
) -> StopReason | None:
    """Run ``step`` from ``start`` until it says the walk is done, each batch added to ``tally``; returns
    why the walk stopped early (None: it ran to its end). ``own_transaction``: each batch runs in a
    transaction begun here; without it the step commits its own (a backed-up batch syncs its lines first).
    A batch the database chose as a deadlock victim runs again."""
    impl = impl_of(conn)
    after = start
    while True:
        started = time.monotonic()

        def batch(after: Any = after) -> tuple[int, Any]:
            if not own_transaction:
                return step(after)
            with conn.begin():
                return step(after)

        deleted, after = retry_deadlocks(batch)
        tally.deleted += deleted
        tally.batches += 1 if deleted else 0
        if hooks.progress:
            hooks.progress(tally.deleted)
        if after is None:
            return None
        stopped = hooks.stop() if hooks.stop else None
        if stopped:
            return stopped
        wait = impl.pause_between_batches(time.monotonic() - started)
        if wait is not None:
            hooks.pause(wait)
