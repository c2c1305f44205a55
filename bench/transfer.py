"""Benchmark ``statestore export`` and ``statestore import`` against bare driver scripts (see bench/README.md).

    .venv/bin/python bench/transfer.py                      # 1,000,000 and 10,000 rows; SQLite, PostgreSQL, MariaDB
    .venv/bin/python bench/transfer.py --quick --engines sqlite

Export: ``statestore --conn URL export --file OUT`` against a bare script with the plain driver (the sqlite3
module, psycopg, PyMySQL) that selects the same rows in the same order, turns each into the same JSON line
(``json.loads`` of the value, ``json.dumps`` of the record) and writes them to a file it fsyncs. Both files
must be byte for byte the same, or the run stops.

Import: ``statestore --conn URL import FILE`` of that file into a new empty store (schema by ``db init``)
against a bare script that reads the lines, ``json.loads`` each, creates the dag runs and assets it meets,
and ``executemany``-upserts batches of the same size with the same ``INSERT ... ON CONFLICT DO UPDATE``
(``ON DUPLICATE KEY UPDATE``), one commit per batch. Every import must leave every key in the store.

Times are wall-clock seconds of the whole process, start-up included, the median of --repeat runs with the
two taking turns; peak RSS is each process's own (``/usr/bin/time -f %M``), at the large store and the small.
"""

from __future__ import annotations

import filecmp
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import generate
import harness
import stores
from generate import driver_params
from harness import in_turn, table, turns, verdict
from measure import RSS_METHOD, Sample, median, run_process

from statestore_cli.db.schema import ASSET_WRITER_COLUMNS, ASSET_WRITER_FIELDS

EXPORT, EXPORT_FLOOR = "export --file", "bare export script (floor)"
IMPORT, IMPORT_FLOOR = "import", "bare import script (floor)"
# `diff` of the store against its own export (the same: exit 0), in key order and shuffled (sorted outside
# memory first); reported as a ratio to `export --file` of the same store in the same run, not to a floor.
DIFF, DIFF_SHUFFLED = "diff FILE", "diff FILE (shuffled)"
TARGETS = {EXPORT: (EXPORT_FLOOR, 2.0), IMPORT: (IMPORT_FLOOR, 3.0)}
MEMORY_TARGET = 1.10  # peak RSS at the large store within 1.10x of the small store's
QUICK = {"rows": 4000, "small_rows": 400, "repeat": 1}

_CONNECT = {
    "sqlite": "import sqlite3\ncon = sqlite3.connect(sys.argv[1])\n",
    "postgresql": (
        "import psycopg\ncon = psycopg.connect(**json.loads(os.environ['BENCH_DB']))\n"
        "con.execute(\"SET TIME ZONE 'UTC'\")\n"
    ),
    "mariadb": (
        "import pymysql\ncon = pymysql.connect(**json.loads(os.environ['BENCH_DB']))\n"
        "con.cursor().execute(\"SET time_zone = '+00:00'\")\n"
    ),
}
_ISO = {  # a timestamp as the driver returns it -> ISO 8601 in UTC, as the export writes it
    "sqlite": "def iso(t):\n    return t[:10] + 'T' + t[11:19] + ('' if t[20:] == '000000' else t[19:]) + '+00:00'\n",
    "postgresql": "def iso(t):\n    return t.isoformat()\n",
    "mariadb": "def iso(t):\n    return t.isoformat() + '+00:00'\n",
}
_EXPORT = """\
import json, os, sys
{connect}{iso}
cur = con.cursor()
out = open(sys.argv[2], "w", encoding="utf-8")
cur.execute(
    "SELECT dag_id, run_id, task_id, map_index, {key}, updated_at, expires_at, value FROM task_state_store "
    "ORDER BY dag_id, run_id, task_id, map_index, {key}"
)
for dag_id, run_id, task_id, map_index, key, updated_at, expires_at, value in cur:
    record = {{"store": "task", "dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}}
    record["key"] = key
    record["updated_at"] = iso(updated_at)
    record["expires_at"] = None if expires_at is None else iso(expires_at)
    record["value"] = json.loads(value)
    out.write(json.dumps(record, ensure_ascii=False) + "\\n")
cur.execute(
    "SELECT a.name, a.uri, s.{key}, s.updated_at, s.value, {writer_columns} "
    "FROM asset_state_store s JOIN asset a ON a.id = s.asset_id ORDER BY a.name, a.uri, s.{key}"
)
for name, uri, key, updated_at, value, *writer in cur:
    by = None if all(w is None for w in writer) else dict(zip({writer_fields!r}, writer))
    record = {{"store": "asset", "name": name, "uri": uri, "key": key, "updated_at": iso(updated_at)}}
    record.update(expires_at=None, updated_by=by, value=json.loads(value))
    out.write(json.dumps(record, ensure_ascii=False) + "\\n")
out.flush()
os.fsync(out.fileno())
out.close()
"""
_MOMENT = {  # an ISO 8601 text -> what the engine's column takes (as the tool stores it)
    "sqlite": (
        "def moment(t):\n"
        "    return datetime.fromisoformat(t).astimezone(UTC).replace(tzinfo=None).isoformat(' ', 'microseconds')\n"
    ),
    "postgresql": "def moment(t):\n    return datetime.fromisoformat(t)\n",
    "mariadb": "def moment(t):\n    return datetime.fromisoformat(t).astimezone(UTC).replace(tzinfo=None)\n",
}
_NEW_ID = {  # the id of the row the cursor just inserted
    "sqlite": "cur.lastrowid",
    "postgresql": "cur.fetchone()[0]",
    "mariadb": "cur.lastrowid",
}
_IMPORT = """\
import json, os, sys
from datetime import UTC, datetime
{connect}{moment}
P = "{mark}"
TASK = ("INSERT INTO task_state_store (dag_run_id, task_id, map_index, {key}, dag_id, run_id, value, updated_at, "
        "expires_at) VALUES (" + ", ".join([P] * 9) + ") {task_update}")
ASSET = ("INSERT INTO asset_state_store (asset_id, {key}, value, updated_at, {writer_columns}) "
         "VALUES (" + ", ".join([P] * {asset_columns}) + ") {asset_update}")
batch = int(sys.argv[3])
cur = con.cursor()
runs, assets, tasks, asset_keys = {{}}, {{}}, [], []


def run_pk(dag_id, run_id):
    found = runs.get((dag_id, run_id))
    if found is None:
        cur.execute(f"INSERT INTO dag_run (dag_id, run_id) VALUES ({{P}}, {{P}}){returning}", (dag_id, run_id))
        found = runs[(dag_id, run_id)] = {new_id}
    return found


def asset_pk(name, uri):
    found = assets.get((name, uri))
    if found is None:
        cur.execute(f"INSERT INTO asset (name, uri) VALUES ({{P}}, {{P}}){returning}", (name, uri))
        found = assets[(name, uri)] = {new_id}
        cur.execute(f"INSERT INTO asset_active (name, uri) VALUES ({{P}}, {{P}})", (name, uri))
    return found


def flush():
    if tasks:
        cur.executemany(TASK, tasks)
    if asset_keys:
        cur.executemany(ASSET, asset_keys)
    con.commit()
    tasks.clear()
    asset_keys.clear()


with open(sys.argv[2], "rb") as source:
    for line in source:
        r = json.loads(line)
        value = json.dumps(r["value"])
        if r["store"] == "task":
            expires = None if r["expires_at"] is None else moment(r["expires_at"])
            run = run_pk(r["dag_id"], r["run_id"])
            tasks.append((run, r["task_id"], r["map_index"], r["key"], r["dag_id"], r["run_id"], value,
                          moment(r["updated_at"]), expires))
        else:
            by = r["updated_by"] or dict.fromkeys({writer_fields!r})
            asset_keys.append((asset_pk(r["name"], r["uri"]), r["key"], value, moment(r["updated_at"]),
                               *(by[field] for field in {writer_fields!r})))
        if len(tasks) + len(asset_keys) == batch:
            flush()
flush()
con.close()
"""
_TASK_UPDATE = ("value", "updated_at", "expires_at")
_ASSET_UPDATE = ("value", "updated_at", *ASSET_WRITER_COLUMNS)


def _update(kind: str, conflict: str, columns: tuple[str, ...]) -> str:
    if kind == "mariadb":
        return "ON DUPLICATE KEY UPDATE " + ", ".join(f"{c} = VALUES({c})" for c in columns)
    return f"ON CONFLICT ({conflict}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in columns)


def export_script(engine: str) -> str:
    key = "`key`" if engine == "mariadb" else "key"
    writer = ", ".join(f"s.{name}" for name in ASSET_WRITER_COLUMNS)
    return _EXPORT.format(
        connect=_CONNECT[engine], iso=_ISO[engine], key=key, writer_columns=writer, writer_fields=ASSET_WRITER_FIELDS
    )


def import_script(engine: str) -> str:
    key = "`key`" if engine == "mariadb" else '\\"key\\"'
    return _IMPORT.format(
        connect=_CONNECT[engine],
        moment=_MOMENT[engine],
        mark="?" if engine == "sqlite" else "%s",
        key=key,
        task_update=_update(engine, f"dag_run_id, task_id, map_index, {key}", _TASK_UPDATE),
        asset_update=_update(engine, f"asset_id, {key}", _ASSET_UPDATE),
        returning=" RETURNING id" if engine == "postgresql" else "",
        new_id=_NEW_ID[engine],
        writer_columns=", ".join(ASSET_WRITER_COLUMNS),
        writer_fields=ASSET_WRITER_FIELDS,
        asset_columns=4 + len(ASSET_WRITER_COLUMNS),
    )


def floor_env(engine: str, url: str) -> dict[str, str]:
    return {} if engine == "sqlite" else {"BENCH_DB": json.dumps(driver_params(url))}


def floor_argv(engine: str, script: str, url: str, *args: str) -> list[str]:
    database = url.removeprefix("sqlite:///") if engine == "sqlite" else "-"
    return [sys.executable, "-c", script, database, *args]


# -- stores ---------------------------------------------------------------------------------------------------
class EmptyStores:
    """New empty stores (schema only) to import into; each is removed after its run."""

    def __init__(self, engine: str, workdir: Path, env: dict[str, str], admin_url: str | None) -> None:
        self.engine, self.workdir, self.env, self.admin_url = engine, workdir, env, admin_url
        self.name: str | None = None

    def new(self) -> str:
        self.drop()
        if self.admin_url is None:
            path = self.workdir / "import.db"
            for suffix in ("", "-journal", "-wal"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            url = f"sqlite:///{path.resolve()}"
            generate.db_init(url, self.env)
            return url
        self.name = generate.new_store_name()
        return generate.create_store(self.admin_url, self.name, self.env)

    def drop(self) -> None:
        if self.admin_url is not None and self.name is not None:
            generate.drop_store(self.admin_url, self.name)
            self.name = None


def stored_keys(url: str) -> int:
    conn = generate.connect(url) if not url.startswith("sqlite") else None
    if conn is None:
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as con:
            return sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _STATE_TABLES)
    try:
        with conn.cursor() as cur:
            total = 0
            for table in _STATE_TABLES:
                cur.execute(f"SELECT count(*) FROM {table}")
                total += cur.fetchone()[0]
            return total
    finally:
        conn.close()


_STATE_TABLES = ("task_state_store", "asset_state_store")


# -- measuring ------------------------------------------------------------------------------------------------
@dataclass
class Row:
    engine: str
    rows: int
    seconds: dict[str, list[float]] = field(default_factory=dict)
    rss_kb: dict[str, list[int]] = field(default_factory=dict)
    file_mb: float = 0.0

    def add(self, name: str, sample: Sample) -> None:
        self.seconds.setdefault(name, []).append(sample.seconds)
        self.rss_kb.setdefault(name, []).append(sample.peak_rss_kb)

    def median(self, name: str) -> float:
        return median(self.seconds[name])

    def peak_mb(self, name: str) -> float:
        return max(self.rss_kb[name]) / 1024


def measure_store(
    engine: str,
    original: stores.Original,
    empty: EmptyStores,
    repeat: int,
    batch: int,
    scratch: Path,
    env: dict[str, str],
) -> Row:
    ours = generate.statestore_executable()
    spec, url = original.spec, original.url
    keys = spec.rows + spec.assets
    row = Row(engine, spec.rows)
    exported, floor_file = scratch / "ours.jsonl", scratch / "floor.jsonl"
    scratch.mkdir(parents=True, exist_ok=True)
    exports = {
        EXPORT: ([ours, "--conn", url, "export", "--file", str(exported)], env),
        EXPORT_FLOOR: (
            floor_argv(engine, export_script(engine), url, str(floor_file)),
            {**env, **floor_env(engine, url)},
        ),
    }
    for round_ in range(repeat):
        for name in in_turn(list(exports), round_):
            argv, run_env = exports[name]
            row.add(name, run_process(argv, env=run_env, scratch=scratch / "p", keep_stdout=False))
        if not filecmp.cmp(exported, floor_file, shallow=False):
            raise SystemExit(f"{engine}: the export and the floor's file differ ({exported}, {floor_file})")
    row.file_mb = exported.stat().st_size / 1e6
    floor_file.unlink()
    shuffled = scratch / "shuffled.jsonl"
    shuffle_lines(exported, shuffled)
    diffs = {DIFF: exported, DIFF_SHUFFLED: shuffled}
    for round_ in range(repeat):
        for name in in_turn(list(diffs), round_):
            argv = [ours, "--conn", url, "diff", str(diffs[name]), "-o", "plain"]
            row.add(name, run_process(argv, env=env, scratch=scratch / "p", keep_stdout=False))
    shuffled.unlink()
    for name in turns([IMPORT, IMPORT_FLOOR], repeat):
        target = empty.new()
        if name == IMPORT:
            argv = [ours, "--conn", target, "import", str(exported), "--batch-size", str(batch), "-o", "json"]
            run_env = env
        else:
            argv = floor_argv(engine, import_script(engine), target, str(exported), str(batch))
            run_env = {**env, **floor_env(engine, target)}
        row.add(name, run_process(argv, env=run_env, scratch=scratch / "p", keep_stdout=False))
        if stored_keys(target) != keys:
            raise SystemExit(f"{engine}: {name} left {stored_keys(target)} keys in the store, expected {keys}")
    empty.drop()
    exported.unlink()
    return row


def shuffle_lines(source: Path, target: Path) -> None:
    """``source``'s lines in a fixed random order (an export from a server whose collation is not code
    point order, or a backup, is out of the order diff merges in)."""
    import random

    lines = source.read_bytes().splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    target.write_bytes(b"".join(lines))


# -- the report -----------------------------------------------------------------------------------------------
def report(rows: list[Row], large: int, small: int, batch: int) -> str:
    header = ["engine", "rows", "measurement", "median s", "x floor", "peak RSS"]
    lines = []
    for r in rows:
        for name in (EXPORT_FLOOR, EXPORT, IMPORT_FLOOR, IMPORT, DIFF, DIFF_SHUFFLED):
            ratio = f"{r.median(name) / r.median(TARGETS[name][0]):.2f}x" if name in TARGETS else ""
            if name in (DIFF, DIFF_SHUFFLED):
                ratio = f"{r.median(name) / r.median(EXPORT):.2f}x export"
            lines.append([r.engine, f"{r.rows:,}", name, f"{r.median(name):.3f}", ratio, f"{r.peak_mb(name):.1f} MB"])
    out = [table(header, lines, right={1, 3, 4, 5}), ""]
    for engine in dict.fromkeys(r.engine for r in rows):
        big = next((r for r in rows if r.engine == engine and r.rows == large), None)
        little = next((r for r in rows if r.engine == engine and r.rows == small), None)
        if big is None:
            continue
        out.append(
            f"{engine}: the export file of {large:,} rows is {big.file_mb:.1f} MB; imports in batches of {batch:,}"
        )
        for name, (floor, limit) in TARGETS.items():
            ratio = big.median(name) / big.median(floor)
            out.append(
                f"{engine}: {name} at {large:,} rows is {ratio:.2f}x its floor (target <= {limit}x): "
                f"{verdict(ratio <= limit)}"
            )
            if little is not None:
                memory = big.peak_mb(name) / little.peak_mb(name)
                out.append(
                    f"{engine}: {name} peak RSS at {large:,} rows is {memory:.2f}x that at {small:,} "
                    f"(target <= {MEMORY_TARGET}x): {verdict(memory <= MEMORY_TARGET)}"
                )
        for name in (DIFF, DIFF_SHUFFLED):
            ratio = big.median(name) / big.median(EXPORT)
            memory = f", peak RSS {big.peak_mb(name) / big.peak_mb(EXPORT):.2f}x export's"
            flat = "" if little is None else f", {big.peak_mb(name) / little.peak_mb(name):.2f}x its own at {small:,}"
            out.append(f"{engine}: {name} at {large:,} rows takes {ratio:.2f}x the export's time{memory}{flat}")
    out.append(f"peak RSS: {RSS_METHOD}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = harness.arguments(
        __doc__, rows=1_000_000, small_rows=10_000, repeat=3, batch_size=1000, engines=True, json_out=True, quick=QUICK
    )
    args = harness.parse(p, argv)
    env = generate.tool_env(args.workdir / "airflow-home")
    rows: list[Row] = []

    def measure(engine: str, store: stores.Stores) -> None:
        admin_url = None if engine == "sqlite" else harness.server_url(engine, args)
        scratch = args.workdir / "transfer" / engine
        scratch.mkdir(parents=True, exist_ok=True)
        empty = EmptyStores(engine, scratch, env, admin_url)
        try:
            for original in harness.large_and_small(engine, store, args):
                rows.append(measure_store(engine, original, empty, args.repeat, args.batch_size, scratch, env))
        finally:
            empty.drop()

    skipped = harness.each_engine(args, env, measure)
    print(report(rows, args.rows, args.small_rows, args.batch_size))
    harness.print_skipped(skipped)
    if args.json_out:
        doc = {
            "rows": args.rows,
            "small_rows": args.small_rows,
            "repeat": args.repeat,
            "batch_size": args.batch_size,
            "rss_method": RSS_METHOD,
            "skipped": skipped,
            "measurements": [
                {
                    "engine": r.engine,
                    "rows": r.rows,
                    "file_mb": round(r.file_mb, 1),
                    "median_seconds": {name: round(r.median(name), 4) for name in r.seconds},
                    "samples": r.seconds,
                    "peak_rss_kb": r.rss_kb,
                }
                for r in rows
            ],
        }
        harness.write_json(args.json_out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
