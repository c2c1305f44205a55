"""Writer latency: a thread upserting keys of another task through our library while a clean runs.

The writer uses ``MetastoreBackend(make_engine(url)).set(...)``, one transaction per write, as a
worker would, on keys the clean never touches (they expire in a year). It writes every
``interval`` seconds until told to stop, or ``max_writes`` writes, whichever comes first.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from measure import median, percentile

from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.database import make_engine
from statestore_cli.scopes import TaskScope

SCOPE = TaskScope("bench_writer", "manual__bench", "writer")


@dataclass(frozen=True)
class LatencyStats:
    writes: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> LatencyStats:
        if not seconds:
            return cls(0, 0.0, 0.0, 0.0)
        ms = [s * 1000 for s in seconds]
        return cls(len(ms), median(ms), percentile(ms, 99), max(ms))


class Writer:
    def __init__(self, url: str, interval: float, max_writes: int) -> None:
        self.backend = MetastoreBackend(make_engine(url))
        self.interval = interval
        self.max_writes = max_writes
        self.count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latencies: list[float] = []

    def write(self) -> float:
        """One upsert; its latency in seconds."""
        expires = datetime.now(UTC) + timedelta(days=365)
        key = f"w{self.count % 1000:04d}"
        start = time.perf_counter()
        self.backend.set(SCOPE, key, f'{{"n": {self.count}}}', expires_at=expires)
        self.count += 1
        return time.perf_counter() - start

    def run_idle(self, writes: int) -> list[float]:
        """``writes`` paced writes with nothing else going on: the baseline."""
        latencies = []
        for _ in range(writes):
            latencies.append(self.write())
            time.sleep(self.interval)
        return latencies

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="bench-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self._latencies) < self.max_writes:
            self._latencies.append(self.write())
            self._stop.wait(self.interval)

    def stop(self) -> list[float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self._latencies

    def close(self) -> None:
        self.backend.engine.dispose()
