"""The progress bar of long runs (a clean, a dry run's terminal view): rows done, rate, time left."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


@contextmanager
def progress_bar(console: Console, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A transient bar on ``console`` while the block runs; the block reports rows done so far."""
    bar = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} rows/s"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    started = time.monotonic()
    task = bar.add_task(label, total=total, rate="-")

    def advance(done: int) -> None:
        elapsed = time.monotonic() - started
        bar.update(task, completed=done, rate=f"{done / elapsed:,.0f}" if elapsed > 0 else "-")

    with bar:
        yield advance
