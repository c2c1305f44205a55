"""Benchmark ``statestore clean``, its dry run and its cold start against floors (see bench/README.md).

    .venv/bin/python bench/run.py --rows 1000000 --expired 500000 --json-out /tmp/statestore-bench/results.json
    .venv/bin/python bench/run.py --quick --engines sqlite

Each destructive run starts from an identical copy of the generated store. Times are wall-clock
seconds of the whole process (the median of --repeat runs); peak RSS is that process's own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import floors
import generate
import harness
import stores
from generate import Spec
from harness import turns
from measure import RSS_METHOD, ProcessFailed, Sample, run_process
from results import (
    CLEAN_BATCHED,
    CLEAN_ONE,
    CLEAN_SNAPSHOT,
    CLEAN_WRITER,
    DRY_JSON,
    DRY_TABLE,
    FLOOR_DELETE,
    FLOOR_DRY_RUN,
    FLOOR_GET,
    GET,
    STARTUP,
    Measurement,
    Results,
    evaluate,
    report,
    write_json,
)
from sqlalchemy.engine import make_url
from writer import LatencyStats, Writer

REPO = Path(__file__).resolve().parent.parent
QUICK = {"rows": 4000, "expired": 2000, "small_rows": 400, "repeat": 1, "cold_runs": 2, "batch_size": 500}


@dataclass(frozen=True)
class Plan:
    large: Spec
    small: Spec
    repeat: int
    cold_runs: int
    batch_size: int
    writer_interval: float
    idle_writes: int
    max_writes: int
    timeout: float

    @property
    def batched(self) -> str:
        return CLEAN_BATCHED.format(batch=self.batch_size)


def redact(text: str, store: stores.Stores) -> str:
    """``text`` without the server's password (commands and errors show URLs)."""
    password = make_url(store.admin_url).password if isinstance(store, stores.ServerStores) else None
    return text.replace(str(password), "***") if password else text


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


class EngineBench:
    """Every measurement on one engine, in a fixed order, each destructive run on a fresh copy."""

    def __init__(self, store: stores.Stores, plan: Plan, env: dict[str, str], scratch: Path, results: Results) -> None:
        self.stores = store
        self.engine = store.engine
        self.plan = plan
        self.env = env
        self.scratch = scratch
        self.results = results
        self.statestore = generate.statestore_executable()

    def run(self) -> None:
        large = self._original(self.plan.large)
        small = self._original(self.plan.small)
        steps = [(self.deletes, large), (self.dry_runs, large)]
        if self.engine == "sqlite":
            steps.append((self.cold_start, large))
        else:
            steps.append((self.snapshot_held, large))
        steps += [(self.small_store, small), (self.writer_latency, large)]
        for step, original in steps:
            try:
                step(original)
            except ProcessFailed as exc:  # one broken command costs its step, not the whole run
                message = redact(str(exc), self.stores)
                self.results.problems.append(f"{self.engine}: {message}")
                log(f"{self.engine}: FAILED: {message}")

    def _original(self, spec: Spec) -> stores.Original:
        log(f"{self.engine}: store of {spec.rows} rows ({spec.expired} expired)")
        original = self.stores.original(spec)
        how = "from cache" if original.generated_seconds is None else f"generated in {original.generated_seconds:.1f} s"
        self.results.meta.setdefault("generation", {})[f"{self.engine}:{spec.rows}"] = how
        log(f"{self.engine}: {how}")
        return original

    # -- running ------------------------------------------------------------------------------------------
    def _run(
        self, argv: list[str], *, extra_env: dict[str, str] | None = None, keep_stdout: bool = True, **kw: Any
    ) -> Sample:
        env = {**self.env, **(extra_env or {})}
        return run_process(
            argv, env=env, scratch=self.scratch, keep_stdout=keep_stdout, timeout=self.plan.timeout, **kw
        )

    def ours(self, url: str, *args: str) -> list[str]:
        return [self.statestore, "--conn", url, *args]

    def _record(self, name: str, spec: Spec, sample: Sample, **kw: Any) -> Measurement:
        m = self.results.add(self.engine, name, spec.rows, sample, **kw)
        log(f"{self.engine}: {name} at {spec.rows} rows: {sample.seconds:.3f} s, {sample.peak_rss_kb / 1024:.1f} MB")
        return m

    def _check_deleted(self, m: Measurement, deleted: int, spec: Spec) -> None:
        m.deleted.append(deleted)
        if deleted != spec.expired:
            self.results.problems.append(f"{self.engine} {m.name}: deleted {deleted} rows, expected {spec.expired}")

    # -- the measurements ---------------------------------------------------------------------------------
    def deletes(self, original: stores.Original) -> None:
        """The raw DELETE and our clean, one statement and batched, rotating their order each round."""
        cases = [FLOOR_DELETE, CLEAN_ONE, self.plan.batched]
        for name in turns(cases, self.plan.repeat):
            with self.stores.fresh(original) as url:
                if name == FLOOR_DELETE:
                    self.floor_delete(url, original.spec)
                else:
                    self.clean(url, name, original.spec)

    def floor_delete(self, url: str, spec: Spec) -> None:
        cmd = floors.delete_command(self.engine, url)
        sample = self._run(cmd.argv, extra_env=cmd.env)
        m = self._record(FLOOR_DELETE, spec, sample, how=cmd.label)
        self._check_deleted(m, floors.deleted_count(self.engine, sample.stdout), spec)
        server_ms = floors.server_milliseconds(sample.stdout)
        if server_ms is not None:
            m.server_ms.append(server_ms)

    def clean(self, url: str, name: str, spec: Spec) -> None:
        batch = "0" if name == CLEAN_ONE else str(self.plan.batch_size)
        sample = self._run(self.ours(url, "clean", "--batch-size", batch, "-o", "json"))
        m = self._record(name, spec, sample, floor=FLOOR_DELETE)
        self._check_deleted(m, json.loads(sample.stdout)["deleted"], spec)

    def snapshot_held(self, original: stores.Original) -> None:
        """The batched clean while another session holds a consistent snapshot open for all of it, as a
        backup (``--single-transaction``) or a long report does: the server may then remove none of the
        deleted rows' old versions until the clean is over."""
        name = CLEAN_SNAPSHOT.format(batch=self.plan.batch_size)
        batch = str(self.plan.batch_size)
        for _ in range(self.plan.repeat):
            with self.stores.fresh(original) as url:
                reader = generate.connect(url)
                try:
                    with reader.cursor() as cur:
                        if self.engine == "postgresql":
                            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                        else:
                            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                        cur.execute("SELECT count(*) FROM task_state_store")
                        cur.fetchall()
                    sample = self._run(self.ours(url, "clean", "--batch-size", batch, "-o", "json"))
                finally:
                    reader.rollback()
                    reader.close()
                m = self._record(name, original.spec, sample, floor=FLOOR_DELETE)
                self._check_deleted(m, json.loads(sample.stdout)["deleted"], original.spec)

    def dry_runs(self, original: stores.Original) -> None:
        """The bare script, our JSON dry run and our terminal view, all with stdout to /dev/null."""
        spec, url = original.spec, original.url
        cases = [FLOOR_DRY_RUN, DRY_JSON, DRY_TABLE]
        for name in turns(cases, self.plan.repeat):
            if name == FLOOR_DRY_RUN:
                cmd = floors.dry_run_command(self.engine, url)
                sample = self._run(cmd.argv, extra_env=cmd.env, keep_stdout=False)
                self._record(name, spec, sample, how=cmd.label)
            else:
                self.dry_run(url, name, spec, keep_stdout=False)

    def dry_run(self, url: str, name: str, spec: Spec, keep_stdout: bool) -> None:
        output = "json" if name == DRY_JSON else "table"
        sample = self._run(self.ours(url, "clean", "--dry-run", "--output", output), keep_stdout=keep_stdout)
        self._record(name, spec, sample, floor=FLOOR_DRY_RUN if name == DRY_JSON else DRY_JSON)
        if keep_stdout and name == DRY_JSON and json.loads(sample.stdout)["would_delete"] != spec.expired:
            self.results.problems.append(f"{self.engine} {name}: would_delete is not {spec.expired}")

    def cold_start(self, original: stores.Original) -> None:
        """``get`` of one live key, alternating with the bare SELECT, --cold-runs times each."""
        scope = stores.live_scope(original)
        dag_id, run_id, task_id, map_index, key = scope
        ours = self.ours(original.url, "get", "--dag-id", dag_id, "--run-id", run_id, "--task-id", task_id)
        ours += ["--map-index", str(map_index), key]
        floor = floors.get_command(original.name, scope)
        for _ in range(self.plan.cold_runs):
            self._record(FLOOR_GET, original.spec, self._run(floor.argv), how=floor.label)
            self._record(GET, original.spec, self._run(ours), floor=FLOOR_GET)

    def small_store(self, original: stores.Original) -> None:
        """Our four commands once on the small store: the baseline of the memory targets."""
        for name in (CLEAN_ONE, self.plan.batched):
            with self.stores.fresh(original) as url:
                self.clean(url, name, original.spec)
                if name == CLEAN_ONE:  # the store is clean now: what remains is our start-up
                    for _ in range(self.plan.repeat):
                        sample = self._run(self.ours(url, "clean", "--batch-size", "0", "-o", "json"))
                        self._record(STARTUP, original.spec, sample)
        for name in (DRY_JSON, DRY_TABLE):
            self.dry_run(original.url, name, original.spec, keep_stdout=True)

    def writer_latency(self, original: stores.Original) -> None:
        """A batched clean while a writer upserts other keys; the writer's latency idle and during the clean."""
        plan = self.plan
        with self.stores.fresh(original) as url:
            writer = Writer(url, plan.writer_interval, plan.max_writes)
            try:
                warm_up = writer.write()  # connects and creates the writer's dag run: not measured
                if warm_up.error:
                    self.results.problems.append(f"{self.engine}: the writer cannot write: {warm_up.error}")
                    return
                idle = writer.run_idle(plan.idle_writes)
                name = CLEAN_WRITER.format(batch=plan.batch_size)
                batch = str(plan.batch_size)
                sample = self._run(self.ours(url, "clean", "--batch-size", batch, "-o", "json"), on_start=writer.start)
                during = writer.stop()
            finally:
                writer.close()
        m = self._record(name, original.spec, sample, floor=FLOOR_DELETE)
        self._check_deleted(m, json.loads(sample.stdout)["deleted"], original.spec)
        self.results.writer_latency[self.engine] = {
            "idle": vars(LatencyStats.of(idle)),
            "during_clean": vars(LatencyStats.of(during)),
        }


# -- setup --------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = harness.arguments(
        __doc__,
        rows=1_000_000,
        expired=True,
        small_rows=10_000,
        repeat=3,
        batch_size=10_000,
        engines=True,
        json_out=True,
        quick=QUICK,
    )
    p.add_argument("--cold-runs", type=int, default=15, help="runs of the cold-start get and its floor (15)")
    p.add_argument("--require-servers", action="store_true", help="fail, not skip, when a server is unreachable")
    p.add_argument("--regenerate", action="store_true", help="generate the SQLite stores even when cached")
    p.add_argument("--writer-interval", type=float, default=0.005, help="seconds between the writer's upserts")
    p.add_argument("--timeout", type=float, default=3600.0, help="kill a measured process after this many seconds")
    return harness.parse(p, argv)


def make_plan(args: argparse.Namespace) -> Plan:
    large = Spec(rows=args.rows, expired=args.expired)
    small_expired = round(args.small_rows * args.expired / args.rows) if args.rows else 0
    return Plan(
        large=large,
        small=replace(large, rows=args.small_rows, expired=small_expired),
        repeat=max(1, args.repeat),
        cold_runs=max(1, args.cold_runs),
        batch_size=args.batch_size,
        writer_interval=args.writer_interval,
        idle_writes=20 if args.quick else 200,
        max_writes=100_000,
        timeout=args.timeout,
    )


def server_version(url: str) -> str:
    conn = generate.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT version()")
            return str(cur.fetchone()[0])
    finally:
        conn.close()


def git_commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--", "statestore_cli") else "")


def metadata(args: argparse.Namespace, plan: Plan, workdir: Path) -> dict[str, object]:
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "rows": plan.large.rows,
        "expired": plan.large.expired,
        "small_rows": plan.small.rows,
        "small_expired": plan.small.expired,
        "repeat": plan.repeat,
        "cold_runs": plan.cold_runs,
        "batch_size": plan.batch_size,
        "writer_interval_ms": round(plan.writer_interval * 1000, 1),
        "quick": args.quick,
        "workdir": str(workdir),
        "python": platform.python_version(),
        "sqlite_module": sqlite3.sqlite_version,
        "sqlite_shell": floors.sqlite_shell_version(),
        "rss_method": RSS_METHOD,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    env = generate.tool_env(args.workdir / "airflow-home")
    results = Results(meta=metadata(args, plan, args.workdir))
    started = time.perf_counter()

    def measure(engine: str, store: stores.Stores) -> None:
        if isinstance(store, stores.ServerStores):
            results.meta.setdefault("servers", {})[engine] = server_version(store.admin_url)
        EngineBench(store, plan, env, args.workdir / "run" / engine, results).run()

    skipped = harness.each_engine(args, env, measure, regenerate=args.regenerate, require_servers=args.require_servers)
    results.skipped.update(skipped)
    results.meta["total_seconds"] = round(time.perf_counter() - started, 1)
    targets = evaluate(results, plan.batch_size, plan.large.rows, plan.small.rows)
    print(report(results, targets))
    if args.json_out:
        write_json(args.json_out, results, targets)
        log(f"results written to {args.json_out}")
    return 1 if results.problems else 0


if __name__ == "__main__":
    sys.exit(main())
