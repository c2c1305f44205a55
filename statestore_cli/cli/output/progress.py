"""The progress bar of long runs (a clean, a dry run's terminal view): rows done, rate, time left."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn


@contextmanager
def progress_bar(console: Console, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A transient bar on ``console`` while the block runs; the block reports rows done so far."""
    of = "?" if total is None else f"{total:,}"
    # Shorter than the terminal: a line that fills it leaves the cursor in the last column, where the
    # ^C a terminal echoes wraps to a new line and the bar can no longer be erased (it stays frozen).
    others = len(label) + 2 * len(of) + len(" / 999,999 rows/s 0:00:00 ") + 4
    bar = Progress(
        TextColumn(label),
        BarColumn(bar_width=max(5, min(40, console.width - others - 2))),
        TextColumn("{task.fields[done]}/{task.fields[of]}"),  # thousands separators, as the summary line has
        TextColumn("{task.fields[rate]} rows/s"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    started = time.monotonic()
    task = bar.add_task(label, total=total, rate="-", done="0", of=of)

    def advance(done: int) -> None:
        elapsed = time.monotonic() - started
        bar.update(task, completed=done, done=f"{done:,}", rate=f"{done / elapsed:,.0f}" if elapsed > 0 else "-")

    try:  # not `with bar`: a Ctrl-C inside its start must stop it too, or it keeps drawing after the error
        bar.start()
        yield advance
        bar.refresh()  # draw the last count: the bar redraws itself only a few times a second
    finally:
        bar.stop()
