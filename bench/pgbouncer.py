"""A batched clean through PgBouncer in transaction mode beside other clients, against the same clean
straight to the PostgreSQL server; and what the pooler-safe defaults cost without a pooler.

    .venv/bin/python bench/pgbouncer.py                                 # 1,000,000 rows, 500,000 expired
    .venv/bin/python bench/pgbouncer.py --rows 100000 --repeat 1        # a quick look
    .venv/bin/python bench/pgbouncer.py --baseline-rev ef9df90          # also the code before the change

PgBouncer is the system's (Debian: /usr/sbin/pgbouncer), started on a free loopback port by the test
suite's own helper (``tests/pgbouncer_proxy.py``: transaction mode, 2 server connections per database and
user, the chart's ``ignore_startup_parameters``). While each clean runs, two other clients run short
transactions (a ``SELECT`` of one key, every 5 ms each) on the same path as the clean: through the
pool when the clean goes through it, straight to the server when it does not, so the pooler is the
only difference. The floor is ``clean --batch-size B`` straight to the server, measured in the same run.

Without a pooler the pooler-safe defaults are measured against:

- ``prepared``: the same code with psycopg preparing statements again (``prepare_threshold=5``, its
  default), which a pooler in transaction mode breaks;
- ``--baseline-rev REV``: the code of commit REV (``git archive``), which prepared statements and set
  the lock timeout once per session.

Every clean runs on its own copy of the generated store (``CREATE DATABASE ... TEMPLATE``, then
``VACUUM ANALYZE`` and a checkpoint; none of it timed); the commands take turns, the median of
--repeat runs counts. Wall-clock seconds of the whole process, start-up included; peak RSS as in
``measure.py``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import generate
import harness
from generate import Spec, analyze, connect, tool_env
from harness import in_turn
from measure import RSS_METHOD, Sample, median, run_process
from sqlalchemy.engine import make_url
from stores import SERVERS

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from pgbouncer_proxy import pgbouncer  # noqa: E402 - the test suite's PgBouncer, so both run the same configuration

# A statestore process running the package found at the path given first, whatever is installed.
RUN = "import sys; sys.path.insert(0, sys.argv.pop(1)); from statestore_cli.__main__ import main; main()"
# The same, with psycopg's own default: a statement run a fifth time on a connection is prepared.
PREPARED = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import psycopg\n"
    "_connect = psycopg.connect\n"
    "def connect(*args, **kwargs):\n"
    "    kwargs['prepare_threshold'] = 5\n"
    "    return _connect(*args, **kwargs)\n"
    "psycopg.connect = connect\n"
    "from statestore_cli.__main__ import main; main()"
)
OTHERS = 2  # other clients
PAUSE = 0.005  # between one other client's transactions


class OtherClients:
    """Clients running short reads on ``conninfo`` until stopped; their transactions and errors counted."""

    def __init__(self, conninfo: dict[str, object]) -> None:
        self.conninfo = conninfo
        self.stop = threading.Event()
        self.transactions = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(OTHERS)]

    def _run(self) -> None:
        import psycopg

        try:
            with psycopg.connect(**self.conninfo, prepare_threshold=None) as conn:  # type: ignore[arg-type]
                while not self.stop.is_set():
                    with conn.transaction():
                        conn.execute("SELECT value FROM task_state_store WHERE id = 1").fetchall()
                    self.transactions += 1
                    time.sleep(PAUSE)
        except Exception as exc:  # reported, and the run is marked broken
            self.errors.append(f"{type(exc).__name__}: {exc}")

    @contextmanager
    def running(self) -> Iterator[OtherClients]:
        for thread in self.threads:
            thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            for thread in self.threads:
                thread.join(30)


def copy_database(admin_url: str, template: str, schema: str) -> str:
    """A new database copied from ``template``, its sessions in ``schema`` (a database setting: PgBouncer
    takes no ``options`` from the URL); its name."""
    name = f"ssbench_pool_{uuid.uuid4().hex[:8]}"
    conn = connect(admin_url, autocommit=True)
    try:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        conn.execute(f"ALTER DATABASE {name} SET search_path = {schema}")
    finally:
        conn.close()
    return name


def drop_database(admin_url: str, name: str) -> None:
    conn = connect(admin_url, autocommit=True)
    try:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        conn.close()


def baseline_tree(rev: str, workdir: Path) -> Path:
    """The package as it was at ``rev``, extracted into ``workdir``."""
    target = workdir / f"rev-{rev}"
    if not (target / "statestore_cli").exists():
        target.mkdir(parents=True, exist_ok=True)
        git = ["git", "-C", str(REPO), "archive", rev, "statestore_cli"]
        archive = subprocess.run(git, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def one_clean(
    admin_url: str,
    template: str,
    schema: str,
    url_of: Callable[[str], str] | None,
    program: str,
    tree: Path,
    batch: int,
    env: dict[str, str],
    args: argparse.Namespace,
) -> tuple[Sample, OtherClients]:
    """One clean on a fresh copy of the store, reached through ``url_of(database)`` (None: straight to the
    server), with the other clients on the same path while it runs."""
    database = copy_database(admin_url, template, schema)
    try:
        direct_url = make_url(admin_url).set(database=database).render_as_string(hide_password=False)
        analyze(direct_url)
        url = url_of(database) if url_of else direct_url
        parsed = make_url(url)
        others = OtherClients({"host": parsed.host, "port": parsed.port, "dbname": database, "user": parsed.username})
        cmd = [sys.executable, "-c", program, str(tree), "--conn", url, "clean", "--batch-size", str(batch)]
        cmd += ["-o", "json"]
        with others.running():
            sample = run_process(cmd, env=env, scratch=args.workdir / "scratch")
        return sample, others
    finally:
        drop_database(admin_url, database)


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(__doc__, rows=1_000_000, expired=True, repeat=3, workdir="statestore-bench-pgbouncer")
    p.add_argument("--batch-sizes", default="500,5000", help="comma-separated: the cleans' --batch-size (500,5000)")
    p.add_argument("--pg-url", default=SERVERS["postgresql"], help="PostgreSQL server (a fresh database is used)")
    p.add_argument("--baseline-rev", default=None, help="also measure the code of this commit, direct")
    args = harness.parse(p, argv)
    admin_url = args.pg_url
    spec = Spec(rows=args.rows, expired=args.expired)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    env = tool_env(args.workdir / "home")
    trees = {"current": REPO}
    if args.baseline_rev:
        trees[f"before ({args.baseline_rev})"] = baseline_tree(args.baseline_rev, args.workdir)

    template = f"ssbench_pool_tpl_{uuid.uuid4().hex[:8]}"
    conn = connect(admin_url, autocommit=True)
    conn.execute(f"CREATE DATABASE {template}")
    conn.close()
    template_url = make_url(admin_url).set(database=template).render_as_string(hide_password=False)
    schema = generate.new_store_name()
    problems: list[str] = []
    try:
        _url, counts = generate.generate_server(template_url, spec, schema, env)
        print(f"store: {spec.rows:,} rows, {counts.expired:,} expired (generated in {counts.seconds:.1f}s)", flush=True)
        with pgbouncer(admin_url, pool_mode="transaction", pool_size=2) as bouncer:
            # name -> (how the clean reaches the database, the program and package it runs)
            variants: dict[str, tuple[str, str, Path]] = {"direct (floor)": ("direct", RUN, REPO)}
            variants["pgbouncer transaction + others"] = ("pgbouncer", RUN, REPO)
            variants["direct, prepared statements"] = ("direct", PREPARED, REPO)
            for label, tree in trees.items():
                if label != "current":
                    variants[f"direct, {label}"] = ("direct", RUN, tree)
            seconds: dict[tuple[str, int], list[float]] = {}
            rss: dict[tuple[str, int], list[int]] = {}
            others_seen: dict[tuple[str, int], list[int]] = {}
            for round_ in range(args.repeat):
                for batch in batch_sizes:
                    for name in in_turn(list(variants), round_):
                        path, program, tree = variants[name]
                        url_of = bouncer.url if path == "pgbouncer" else None
                        sample, others = one_clean(admin_url, template, schema, url_of, program, tree, batch, env, args)
                        if f'"deleted": {counts.expired},' not in sample.stdout:
                            problems.append(f"{name} batch {batch}: wrong count: {sample.stdout[:300]}")
                        problems.extend(f"{name} batch {batch}: other client: {e}" for e in others.errors)
                        seconds.setdefault((name, batch), []).append(sample.seconds)
                        rss.setdefault((name, batch), []).append(sample.peak_rss_kb)
                        others_seen.setdefault((name, batch), []).append(others.transactions)
                        print(f"  {name}, batch {batch}: {sample.seconds:.3f} s", file=sys.stderr, flush=True)
    finally:
        drop_database(admin_url, template)

    print(f"clean of {spec.rows:,} rows ({counts.expired:,} expired), median of {args.repeat}; peak RSS: {RSS_METHOD}")
    print(f"{OTHERS} other clients, a transaction every {PAUSE * 1000:g} ms each, beside every clean")
    rows = []
    for batch in batch_sizes:
        floor = median(seconds[("direct (floor)", batch)])
        for name in variants:
            key = (name, batch)
            rows.append(
                [
                    name,
                    str(batch),
                    f"{median(seconds[key]):.3f}",
                    f"{median(seconds[key]) / floor:.2f}x",
                    f"{max(rss[key]) / 1024:.1f}",
                    str(int(median(others_seen[key]))),
                ]
            )
    header = ["variant", "batch", "median s", "vs floor", "peak RSS MB", "others tx"]
    print(harness.table(header, rows, right={1, 2, 3, 4, 5}))
    for problem in problems:
        print(f"problem: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
