"""What a benchmark run measured, the targets it is judged by, and how both are printed and saved."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import harness
from harness import table
from measure import Sample, median

# Measurement names; the batch size is filled in by the run.
FLOOR_DELETE = "raw DELETE (floor)"
CLEAN_ONE = "clean --batch-size 0"
CLEAN_BATCHED = "clean --batch-size {batch}"
CLEAN_WRITER = "clean --batch-size {batch} + writer"
CLEAN_SNAPSHOT = "clean --batch-size {batch} + open snapshot"  # servers: a reader holds a snapshot open
FLOOR_DRY_RUN = "bare dry-run script (floor)"
DRY_JSON = "clean --dry-run -o json"
DRY_TABLE = "clean --dry-run -o table"
FLOOR_GET = "bare python get (floor)"
GET = "get (cold start)"
STARTUP = "clean, nothing expired (start-up)"

MB = 1024  # ru_maxrss is in KiB on Linux


@dataclass
class Measurement:
    engine: str
    name: str
    rows: int
    floor: str | None = None  # the measurement (same engine and rows) this one is compared with
    how: str = ""
    samples: list[Sample] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)  # what each destructive run removed
    server_ms: list[float] = field(default_factory=list)  # psql's \timing of the floor's DELETE

    @property
    def seconds(self) -> float:
        return median([s.seconds for s in self.samples])

    @property
    def peak_rss_mb(self) -> float:
        return max(s.peak_rss_kb for s in self.samples) / MB

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "name": self.name,
            "rows": self.rows,
            "seconds": self.seconds,
            "samples": [s.seconds for s in self.samples],
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "floor": self.floor,
            "how": self.how,
            "deleted": self.deleted,
            "server_ms": self.server_ms,
        }


@dataclass(frozen=True)
class Target:
    engine: str
    what: str
    measured: float
    limit: float
    unit: str  # "x" (a ratio), "s" or "MB"

    @property
    def passed(self) -> bool:
        return self.measured <= self.limit


@dataclass
class Results:
    meta: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)
    writer_latency: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def find(self, engine: str, name: str, rows: int) -> Measurement | None:
        for m in self.measurements:
            if (m.engine, m.name, m.rows) == (engine, name, rows):
                return m
        return None

    def add(
        self, engine: str, name: str, rows: int, sample: Sample, *, floor: str | None = None, how: str = ""
    ) -> Measurement:
        found = self.find(engine, name, rows)
        if found is None:
            found = Measurement(engine, name, rows, floor, how)
            self.measurements.append(found)
        found.samples.append(sample)
        return found

    def ratio(self, m: Measurement) -> float | None:
        base = self.find(m.engine, m.floor, m.rows) if m.floor else None
        return m.seconds / base.seconds if base and base.seconds > 0 else None


# -- targets ----------------------------------------------------------------------------------------------
RATIO_TARGETS = (  # (measurement, limit): its time over its floor's
    (CLEAN_ONE, 1.2),
    (CLEAN_BATCHED, 1.5),
    (DRY_JSON, 2.0),
    (DRY_TABLE, 1.0),  # its "floor" is the JSON dry run: no slower than that
    (GET, 4.0),
)
MEMORY_LIMIT_MB = 80.0
MEMORY_GROWTH = 1.10  # peak RSS on the large store at most 10% over the small store's
COLD_START_LIMIT_S = 0.30


# On a server the floor is a statement that starts in milliseconds (psql), so the targets allow our own
# start-up on top: one statement within floor + start-up, batches within 3 x floor + start-up.
SERVER_CLEAN_TARGETS = ((CLEAN_ONE, 1.0), (CLEAN_BATCHED, 3.0), (CLEAN_SNAPSHOT, 3.0))


def evaluate(results: Results, batch: int, large: int, small: int) -> list[Target]:
    targets: list[Target] = []
    for engine in dict.fromkeys(m.engine for m in results.measurements):
        if engine == "sqlite":
            targets += _ratio_targets(results, engine, batch, large)
        else:
            targets += _server_targets(results, engine, batch, large, small)
        get = results.find(engine, GET, large)
        if get is not None:
            targets.append(Target(engine, "get cold start, median", get.seconds, COLD_START_LIMIT_S, "s"))
        targets += _memory_targets(results, engine, batch, large, small)
    return targets


def _ratio_targets(results: Results, engine: str, batch: int, large: int, skip: tuple[str, ...] = ()) -> list[Target]:
    found = []
    for template, limit in RATIO_TARGETS:
        if template in skip:
            continue
        m = results.find(engine, template.format(batch=batch), large)
        ratio = results.ratio(m) if m else None
        if m is not None and ratio is not None:
            found.append(Target(engine, f"{m.name} / {m.floor}", ratio, limit, "x"))
    return found


def _server_targets(results: Results, engine: str, batch: int, large: int, small: int) -> list[Target]:
    found = _ratio_targets(results, engine, batch, large, skip=(CLEAN_ONE, CLEAN_BATCHED))
    floor, startup = results.find(engine, FLOOR_DELETE, large), results.find(engine, STARTUP, small)
    if floor is None or startup is None:
        return found
    for template, times in SERVER_CLEAN_TARGETS:
        m = results.find(engine, template.format(batch=batch), large)
        if m is not None:
            allowed = times * floor.seconds + startup.seconds
            what = f"{m.name} / ({times:g} x floor + start-up = {allowed:.3f} s)"
            found.append(Target(engine, what, m.seconds / allowed, 1.0, "x"))
    return found


def _memory_targets(results: Results, engine: str, batch: int, large: int, small: int) -> list[Target]:
    found = []
    for template in (CLEAN_ONE, CLEAN_BATCHED, DRY_JSON, DRY_TABLE):
        name = template.format(batch=batch)
        big, little = results.find(engine, name, large), results.find(engine, name, small)
        if big is None:
            continue
        found.append(Target(engine, f"{name}: peak RSS at {large} rows", big.peak_rss_mb, MEMORY_LIMIT_MB, "MB"))
        if little is not None:
            growth = big.peak_rss_mb / little.peak_rss_mb
            found.append(Target(engine, f"{name}: peak RSS {large} / {small} rows", growth, MEMORY_GROWTH, "x"))
    return found


# -- output -----------------------------------------------------------------------------------------------
def _fmt(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.3f}x"
    if unit == "s":
        return f"{value:.3f} s"
    return f"{value:.1f} MB"


def measurementtable(results: Results) -> str:
    rows = []
    for m in results.measurements:
        ratio = results.ratio(m)
        rows.append(
            [
                m.engine,
                m.name,
                str(m.rows),
                str(len(m.samples)),
                f"{m.seconds:.3f}",
                m.floor if ratio is not None else "",
                f"{ratio:.2f}x" if ratio is not None else "",
                f"{m.peak_rss_mb:.1f}",
            ]
        )
    header = ["engine", "measurement", "rows", "runs", "median s", "compared with", "ratio", "peak RSS MB"]
    return table(header, rows, right={2, 3, 4, 6, 7})


def targettable(targets: list[Target]) -> str:
    rows = [
        [t.engine, t.what, _fmt(t.measured, t.unit), f"<= {_fmt(t.limit, t.unit)}", harness.verdict(t.passed)]
        for t in targets
    ]
    return table(["engine", "target", "measured", "limit", "result"], rows, right={2, 3})


def writertable(results: Results) -> str:
    rows = []
    for engine, phases in results.writer_latency.items():
        for phase in ("idle", "during_clean"):
            s = phases[phase]
            timings = [f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}", f"{s['max_ms']:.2f}"]
            rows.append([engine, phase, str(s["writes"]), str(s["errors"]), *timings, (s["first_error"] or "")[:100]])
    header = ["engine", "phase", "writes", "errors", "p50 ms", "p99 ms", "max ms", "first error"]
    return table(header, rows, right={2, 3, 4, 5, 6})


def report(results: Results, targets: list[Target]) -> str:
    meta = results.meta
    parts = [
        f"statestore benchmark: {meta['rows']} task keys, {meta['expired']} expired "
        f"(small store {meta['small_rows']} / {meta['small_expired']}); median of {meta['repeat']} runs, "
        f"cold start of {meta['cold_runs']}; "
        f"commit {meta['commit']}, {meta['date']}",
        "",
        measurementtable(results),
        "",
        "Targets",
        targettable(targets),
    ]
    if results.writer_latency:
        parts += ["", f"Writer latency (MetastoreBackend.set of other keys every {meta['writer_interval_ms']} ms)"]
        parts.append(writertable(results))
    parts += ["", *notes(results)]
    return "\n".join(parts)


def notes(results: Results) -> list[str]:
    lines = [f"{m.engine} {m.name} at {m.rows} rows: {m.how}" for m in results.measurements if m.how]
    for m in results.measurements:
        if m.server_ms:
            lines.append(
                f"floor {m.engine} at {m.rows} rows: the DELETE statement itself took "
                f"{median(m.server_ms):.0f} ms (psql \\timing)"
            )
    lines += [f"skipped {engine}: {why}" for engine, why in results.skipped.items()]
    lines += [f"PROBLEM: {p}" for p in results.problems]
    return lines


def write_json(path: Path, results: Results, targets: list[Target]) -> None:
    doc = {
        "meta": results.meta,
        "measurements": [m.as_json() for m in results.measurements],
        "targets": [{**asdict(t), "passed": t.passed} for t in targets],
        "writer_latency": results.writer_latency,
        "problems": results.problems,
        "skipped": results.skipped,
    }
    harness.write_json(path, doc)
