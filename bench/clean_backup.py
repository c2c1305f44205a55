"""What ``clean --backup FILE`` costs, against the same clean without it, in the same run (see bench/README.md).

    .venv/bin/python bench/clean_backup.py                          # 1,000,000 rows, half expired; every engine
    .venv/bin/python bench/clean_backup.py --engines sqlite,postgresql --repeat 3
    .venv/bin/python bench/clean_backup.py --quick

The store is ``run.py``'s (``generate.py``: 200 keys per dag run, small JSON values). On each engine four
cleans take turns on fresh copies of it, median of --repeat: ``clean --batch-size B`` and the same with
``--backup FILE`` (each backed-up batch writes its rows' lines and fsyncs the file before it commits), and
the one-statement clean (``--batch-size 0``) with and without. Each must delete the expired rows, and the
backup hold exactly as many lines. Wall-clock seconds of the whole process; peak RSS of the process, at
--rows and at --small-rows (memory must not grow with the rows).

Beside them the floor of any backup (``backup_floor.py``, a bare driver script): the same batches deleted with
their rows' columns returned (``DELETE ... RETURNING``; ``COPY`` of it on PostgreSQL), appended to a file as the
driver gives them and fsynced before each commit: what moving the rows and syncing them costs before anything
is put in the export format; and the same script's one statement, beside ``--batch-size 0``. What the fsync
per batch costs on its own: the batched clean's backup of the large store (its last round) is written again by
this script, in the clean's batches (B lines each), with and without an fsync after each batch. The floors run
beside the large store only, where the report compares them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import generate
import harness
import stores
from generate import Spec
from measure import RSS_METHOD, run_process
from sqlalchemy.engine import make_url

FLOOR = "backup floor (bare script)"
FLOOR_ONE = "backup floor, one statement"  # the same script, --batch-size 0's one transaction
FLOORS = {FLOOR: None, FLOOR_ONE: 0}  # the batch size each floor deletes with (None: the benchmark's)
HERE = Path(__file__).resolve().parent

TIME_TARGET = 2.0  # a clean with --backup within 2x of the same clean without it
RSS_TARGET = 1.10  # peak RSS at --rows within 1.10x of that at --small-rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(
        __doc__,
        rows=1_000_000,
        small_rows=10_000,
        repeat=3,
        batch_size=10_000,
        engines=True,
        json_out=True,
        quick={"rows": 4000, "small_rows": 400, "repeat": 1, "batch_size": 500},
    )
    args = harness.parse(parser, argv)
    workdir = args.workdir
    env = generate.tool_env(workdir / "airflow-home")
    statestore = generate.statestore_executable()
    batch = str(args.batch_size)
    variants = {
        f"clean --batch-size {batch}": ["--batch-size", batch],
        f"clean --batch-size {batch} --backup": ["--batch-size", batch, "--backup"],
        "clean --batch-size 0": ["--batch-size", "0"],
        "clean --batch-size 0 --backup": ["--batch-size", "0", "--backup"],
    }
    results: dict[str, Any] = {"rss_method": RSS_METHOD, "batch_size": args.batch_size, "engines": {}}
    problems: list[str] = []

    def measure(engine: str, store: stores.Stores) -> None:
        scratch = workdir / "backup-run" / engine
        scratch.mkdir(parents=True, exist_ok=True)
        backup = scratch / "backup.jsonl"
        kept = scratch / "batched-backup.jsonl"  # the large store's batched backup, for the fsync figure
        measured: dict[str, Any] = {}
        try:
            for rows, repeat in ((args.rows, args.repeat), (args.small_rows, 1)):
                spec = Spec(rows=rows, expired=rows // 2)
                log(f"{engine}: store of {rows:,} rows")
                original = store.original(spec)
                floors = list(FLOORS) if rows == args.rows else []  # the report sets them beside the large store
                for round_ in range(repeat):
                    names = list(variants)
                    names = names[round_ % len(names) :] + names[: round_ % len(names)]  # each goes first in turn
                    for name in [*names, *floors]:
                        with store.fresh(original) as url:
                            backup.unlink(missing_ok=True)
                            if name in FLOORS:
                                cmd, extra_env = floor_command(engine, url, floor_batch(name, args), backup)
                                sample = run_process(cmd, env={**env, **extra_env}, scratch=scratch)
                            else:
                                extra = [*variants[name], str(backup)] if name.endswith("--backup") else variants[name]
                                cmd = [statestore, "--conn", url, "clean", *extra, "-o", "json"]
                                sample = run_process(cmd, env=env, scratch=scratch)
                        if name in FLOORS:
                            deleted = lines = int(sample.stdout.strip())
                            if deleted != spec.expired:
                                problems.append(f"{engine} {name} at {rows}: deleted {deleted}")
                            entry = measured.setdefault(f"{name}@{rows}", {"seconds": [], "rss_kb": []})
                            entry["seconds"].append(sample.seconds)
                            entry["rss_kb"].append(sample.peak_rss_kb)
                            log(f"{engine}: {name} at {rows:,}: {sample.seconds:.3f} s")
                            continue
                        deleted = json.loads(sample.stdout)["deleted"]
                        lines = count_lines(backup) if name.endswith("--backup") else deleted
                        if (deleted, lines) != (spec.expired, spec.expired):
                            problems.append(f"{engine} {name} at {rows}: deleted {deleted}, backed up {lines} lines")
                        if rows == args.rows and name == f"clean --batch-size {batch} --backup" and backup.exists():
                            backup.replace(kept)
                        entry = measured.setdefault(f"{name}@{rows}", {"seconds": [], "rss_kb": []})
                        entry["seconds"].append(sample.seconds)
                        entry["rss_kb"].append(sample.peak_rss_kb)
                        log(f"{engine}: {name} at {rows:,}: {sample.seconds:.3f} s, {sample.peak_rss_kb / 1024:.1f} MB")
                if rows == args.rows and kept.exists():
                    measured["fsync"] = fsync_cost(kept, args.batch_size, scratch / "rewrite.jsonl", args.repeat)
        finally:
            backup.unlink(missing_ok=True)
            kept.unlink(missing_ok=True)
        results["engines"][engine] = measured

    for engine, why in harness.each_engine(args, env, measure).items():
        results["engines"][engine] = {"skipped": why}
    text, targets = report(results, args, variants)
    print(text)
    if args.json_out:
        document = {**results, "targets": targets, "problems": problems}
        args.json_out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


def floor_batch(name: str, args: argparse.Namespace) -> int:
    """The batch size the floor ``name`` deletes with, that of the clean it stands beside."""
    size = FLOORS[name]
    return args.batch_size if size is None else size


def floor_command(engine: str, url: str, batch_size: int, backup: Path) -> tuple[list[str], dict[str, str]]:
    script = str(HERE / "backup_floor.py")
    if engine == "sqlite":
        return [sys.executable, script, engine, make_url(url).database or "", str(batch_size), str(backup)], {}
    params = json.dumps(generate.driver_params(url))
    return [sys.executable, script, engine, "-", str(batch_size), str(backup)], {"BENCH_DB": params}


def count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


def fsync_cost(backup: Path, batch_size: int, target: Path, repeat: int) -> dict[str, Any]:
    """The backup written again in batches of ``batch_size`` lines, with and without an fsync after each."""
    lines = backup.read_bytes().splitlines(keepends=True)
    batches = [b"".join(lines[i : i + batch_size]) for i in range(0, len(lines), batch_size)]
    seconds: dict[str, list[float]] = {"write": [], "write+fsync": []}
    for _ in range(max(1, repeat)):
        for name in seconds:
            target.unlink(missing_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            started = time.perf_counter()
            for data in batches:
                os.write(fd, data)
                if name == "write+fsync":
                    os.fsync(fd)
            seconds[name].append(time.perf_counter() - started)
            os.close(fd)
    target.unlink(missing_ok=True)
    return {"bytes": backup.stat().st_size, "batches": len(batches), **seconds}


def report(
    results: dict[str, Any], args: argparse.Namespace, variants: dict[str, list[str]]
) -> tuple[str, list[dict[str, Any]]]:
    """The printed report, and each target with whether it passed."""
    out = [
        f"clean --backup: {args.rows:,} task keys ({args.rows // 2:,} expired), small store {args.small_rows:,}; "
        f"median of {args.repeat}; peak RSS: {results['rss_method']}",
        f"{'engine':<11} {'measurement':<36} {'rows':>9} {'median s':>9} {'vs no backup':>13} {'peak RSS MB':>12}",
    ]
    targets: list[dict[str, Any]] = []

    def target(engine: str, what: str, measured: float, limit: float) -> None:
        passed = measured <= limit
        text = f"{engine:<11} {what}: {measured:.3f}x (<= {limit}x) {'PASS' if passed else 'FAIL'}"
        targets.append(
            {"engine": engine, "target": what, "measured": measured, "limit": limit, "passed": passed, "text": text}
        )

    for engine, measured in results["engines"].items():
        if "skipped" in measured:
            out.append(f"{engine:<11} skipped: {measured['skipped']}")
            continue
        for rows in (args.rows, args.small_rows):
            for name in variants:
                entry = measured.get(f"{name}@{rows}")
                if entry is None:
                    continue
                median = statistics.median(entry["seconds"])
                ratio = ""
                if name.endswith("--backup"):
                    plain = statistics.median(measured[f"{name.removesuffix(' --backup')}@{rows}"]["seconds"])
                    ratio = f"{median / plain:.2f}x"
                    if rows == args.rows:
                        target(engine, f"{name} / without --backup", median / plain, TIME_TARGET)
                rss = max(entry["rss_kb"]) / 1024
                out.append(f"{engine:<11} {name:<36} {rows:>9,} {median:>9.3f} {ratio:>13} {rss:>12.1f}")
        for name in FLOORS:
            floor = measured.get(f"{name}@{args.rows}")
            if not floor:
                continue
            clean = f"clean --batch-size {floor_batch(name, args)}"
            seconds = statistics.median(floor["seconds"])
            plain = statistics.median(measured[f"{clean}@{args.rows}"]["seconds"])
            ours = statistics.median(measured[f"{clean} --backup@{args.rows}"]["seconds"])
            out.append(
                f"{engine:<11} {name:<36} {args.rows:>9,} {seconds:>9.3f} {seconds / plain:>12.2f}x "
                f"{max(floor['rss_kb']) / 1024:>12.1f}   (--backup / floor: {ours / seconds:.2f}x)"
            )
        for name in variants:
            large, small = measured.get(f"{name}@{args.rows}"), measured.get(f"{name}@{args.small_rows}")
            if large and small:
                ratio = max(large["rss_kb"]) / max(small["rss_kb"])
                target(engine, f"{name}: peak RSS {args.rows:,} / {args.small_rows:,} rows", ratio, RSS_TARGET)
        fsync = measured.get("fsync")
        if fsync:
            write, synced = statistics.median(fsync["write"]), statistics.median(fsync["write+fsync"])
            out.append(
                f"{engine:<11} the {fsync['bytes'] / 1e6:.0f} MB backup written again in {fsync['batches']} batches: "
                f"{write:.3f} s, with an fsync after each {synced:.3f} s (the fsyncs: {synced - write:.3f} s)"
            )
    return "\n".join([*out, "", "Targets", *(t["text"] for t in targets)]), targets


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
