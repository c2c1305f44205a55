"""The progress bar of long runs (a clean, an import, a walk of the REST API): done, rate, time left."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn


class Advance(Protocol):
    """What the block calls with its count so far, and the total once it is known (a walk learns it late)."""

    def __call__(self, done: int, total: int | None = None) -> None: ...


@contextmanager
def progress_bar(console: Console, label: str, total: int | None, unit: str = "rows") -> Iterator[Advance]:
    """A transient bar on ``console`` while the block runs; the block reports ``unit`` done so far."""
    of = "?" if total is None else f"{total:,}"
    widest = len(of) if total is not None else len("999,999")  # room for a total that arrives later
    # Shorter than the terminal: a line that fills it leaves the cursor in the last column, where the
    # ^C a terminal echoes wraps to a new line and the bar can no longer be erased (it stays frozen).
    others = len(label) + 2 * widest + len(f" / 999,999 {unit}/s 0:00:00 ") + 4
    bar = Progress(
        TextColumn(label),
        BarColumn(bar_width=max(5, min(40, console.width - others - 2))),
        TextColumn("{task.fields[done]}/{task.fields[of]}"),  # thousands separators, as the summary line has
        TextColumn(f"{{task.fields[rate]}} {unit}/s" if unit else "{task.fields[rate]}/s"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    started = time.monotonic()
    task = bar.add_task(label, total=total, rate="-", done="0", of=of)

    def advance(done: int, total: int | None = None) -> None:
        elapsed = time.monotonic() - started
        rate = f"{done / elapsed:,.0f}" if elapsed > 0 else "-"
        if total is None:
            bar.update(task, completed=done, done=f"{done:,}", rate=rate)
        else:
            bar.update(task, completed=done, total=total, done=f"{done:,}", of=f"{total:,}", rate=rate)

    try:  # not `with bar`: a Ctrl-C inside its start must stop it too, or it keeps drawing after the error
        bar.start()
        yield advance
        bar.refresh()  # draw the last count: the bar redraws itself only a few times a second
    finally:
        bar.stop()
