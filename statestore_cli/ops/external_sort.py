"""Lines in key order without holding them all: runs sorted in memory, written to a private folder, then
merged (``diff`` of a file not in the store's order)."""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar


class Sorted(Protocol):
    """A parsed line, with the key it sorts by."""

    @property
    def sort(self) -> tuple[Any, ...]: ...


S = TypeVar("S", bound=Sorted)


def external_sort(
    lines: Iterator[tuple[tuple[Any, ...], int, bytes]],
    folder: Path,
    reread: Callable[[int, bytes], S],
    run_lines: int,
    run_bytes: int,
) -> Iterator[S]:
    """``lines`` (key, line number, text) in key order (then by line number), holding at most a run of
    ``run_lines`` lines (``run_bytes`` of text) in memory: each run sorted and written to ``folder``, then
    the runs merged, each line parsed again as it comes out."""
    runs: list[Path] = []
    run: list[tuple[tuple[Any, ...], int, bytes]] = []
    size = 0
    for item in lines:
        run.append(item)
        size += len(item[2])
        if len(run) >= run_lines or size >= run_bytes:
            runs.append(_write_run(run, folder, len(runs)))
            run, size = [], 0
    if not runs:  # the whole file fitted in one run: no file needed
        run.sort(key=lambda item: item[:2])
        for _key, number, text in run:
            yield reread(number, text)
        return
    if run:
        runs.append(_write_run(run, folder, len(runs)))
    del run
    handles = [open(path, "rb") for path in runs]  # noqa: SIM115  (closed below)
    try:
        merged = heapq.merge(*(_read_run(h, reread) for h in handles), key=lambda item: item[:2])
        for _key, _number, side in merged:
            yield side
    finally:
        for handle in handles:
            handle.close()


def _write_run(run: list[tuple[tuple[Any, ...], int, bytes]], folder: Path, index: int) -> Path:
    run.sort(key=lambda item: item[:2])
    path = folder / f"run-{index}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the file's values: owner-only
    with open(fd, "wb") as out:
        for _key, number, text in run:
            out.write(b"%d\t" % number + text.rstrip(b"\r\n") + b"\n")
    return path


def _read_run(handle: IO[bytes], reread: Callable[[int, bytes], S]) -> Iterator[tuple[tuple[Any, ...], int, S]]:
    for line in handle:
        number, _, text = line.partition(b"\t")
        side = reread(int(number), text)
        yield side.sort, int(number), side
