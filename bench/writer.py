"""Writer latency: a thread upserting keys of another task through our library while a clean runs.

The writer uses ``MetastoreBackend(make_engine(url)).set(...)``, one transaction per write, as a
worker would, on keys the clean never touches (they expire in a year). It writes every
``interval`` seconds until told to stop, or ``max_writes`` writes, whichever comes first. A write
that fails (a lock timeout) is counted as an error with its time until the error, and the writer
goes on.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from measure import median, percentile

from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.db.database import make_engine
from statestore_cli.model.scopes import TaskScope

SCOPE = TaskScope("bench_writer", "manual__bench", "writer")


@dataclass(frozen=True)
class LatencyStats:
    """Latency of every attempted write, failed ones included (their time until the error)."""

    writes: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    first_error: str | None = None

    @classmethod
    def of(cls, attempts: list[Attempt]) -> LatencyStats:
        if not attempts:
            return cls(0, 0, 0.0, 0.0, 0.0)
        ms = [a.seconds * 1000 for a in attempts]
        errors = [a.error for a in attempts if a.error]
        first = errors[0] if errors else None
        return cls(len(ms), len(errors), median(ms), percentile(ms, 99), max(ms), first)


@dataclass(frozen=True)
class Attempt:
    seconds: float
    error: str | None = None


class Writer:
    def __init__(self, url: str, interval: float, max_writes: int) -> None:
        self.backend = MetastoreBackend(make_engine(url))
        self.interval = interval
        self.max_writes = max_writes
        self.count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._attempts: list[Attempt] = []

    def write(self) -> Attempt:
        """One upsert: how long it took, and its error if it failed (a lock timeout, say)."""
        expires = datetime.now(UTC) + timedelta(days=365)
        key = f"w{self.count % 1000:04d}"
        self.count += 1
        start = time.perf_counter()
        try:
            self.backend.set(SCOPE, key, f'{{"n": {self.count}}}', expires_at=expires)
        except Exception as exc:  # a failed write is a result to report, not a reason to stop
            return Attempt(time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
        return Attempt(time.perf_counter() - start)

    def run_idle(self, writes: int) -> list[Attempt]:
        """``writes`` paced writes with nothing else going on: the baseline."""
        attempts = []
        for _ in range(writes):
            attempts.append(self.write())
            time.sleep(self.interval)
        return attempts

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="bench-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self._attempts) < self.max_writes:
            self._attempts.append(self.write())
            self._stop.wait(self.interval)

    def stop(self) -> list[Attempt]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self._attempts

    def close(self) -> None:
        self.backend.engine.dispose()
