"""``clean`` keeps the expired keys of task instances that have not finished: a task waiting for its retry
(a ``retry_delay`` longer than its keys' retention) finds the job id its earlier try stored in them.

On real Airflow schemas (3.3.2, the 3.4 layout and the one between; tests/fixtures/README.md) on every
engine, with a task instance in every state Airflow has: the dry run lists, and every way a clean deletes
(batched or one statement, with ``--backup`` or without, ``--older-than``, ``--max-runtime``) deletes, the
expired keys of finished task instances and of keys with no task instance, and keeps the others, counted by
state. ``--include-unfinished`` deletes them all, as Airflow's own clean does. A standalone store (no
``task_instance`` table) is cleaned as before, and says nothing of what it spared.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow_schema import BETWEEN, HEAD_34, HEAD_332, airflow_database
from cli_running import run_cli
from metrics_files import read_samples
from servers import ENGINES
from stores import as_utc, sql, sql_each

DAG = "billing_reconciliation_daily"
RUN = "scheduled__2026-11-30T00:00:00+00:00"
NIL = uuid.UUID(int=0)
REGION = uuid.UUID("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab")
PAST = datetime(2020, 1, 1, tzinfo=UTC)
FUTURE = datetime(2030, 6, 1, tzinfo=UTC)

UNFINISHED = ("running", "up_for_retry", "deferred", "queued", "scheduled", "up_for_reschedule", "restarting", None)
FINISHED = ("success", "failed", "skipped", "upstream_failed", "removed")
LAYOUTS = {"3.3": HEAD_332, "3.4-between": BETWEEN, "3.4": HEAD_34}


def _task(state: str | None) -> str:
    return f"t_{state or 'none'}"


class Db:
    def __init__(self, engine: str, layout: str, url: str) -> None:
        self.engine, self.layout, self.url = engine, layout, url

    @property
    def index(self) -> str:
        return "region_index" if self.layout == "3.4" else "map_index"

    @property
    def regions(self) -> bool:
        return self.layout != "3.3"

    def moment(self, when: datetime) -> Any:
        if self.engine == "sqlite":
            return when.strftime("%Y-%m-%d %H:%M:%S.%f")
        return when.replace(tzinfo=None) if self.engine == "mariadb" else when

    def region(self, region: uuid.UUID) -> Any:
        return region if self.engine == "postgresql" else region.hex

    def sql(self, statement: str, **params: object) -> list[tuple]:
        return sql(self.url, statement, **params)

    def seed_instances(self) -> int:
        """A dag run with a task instance in every state (``t_<state>``), and a mapped one, ``mapped`` [2],
        running; the dag run's id."""
        self.sql(
            "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, clear_number, span_status) "
            "VALUES (:d, :r, 'scheduled', :at, 0, 'not_started')",
            d=DAG,
            r=RUN,
            at=self.moment(datetime(2026, 11, 30, tzinfo=UTC)),
        )
        run_pk = int(self.sql("SELECT id FROM dag_run WHERE dag_id = :d AND run_id = :r", d=DAG, r=RUN)[0][0])
        instances = [(_task(s), -1, s) for s in (*UNFINISHED, *FINISHED)] + [("mapped", 2, "running")]
        region = (", region_id", ", :region") if self.regions else ("", "")
        sql_each(
            self.url,
            f"INSERT INTO task_instance (id, task_id, dag_id, run_id, {self.index}, state, try_number, pool, "
            f"pool_slots{region[0]}) VALUES (:id, :t, :d, :r, :mi, :s, 1, 'default_pool', 1{region[1]})",
            [
                {"id": str(uuid.uuid4()), "t": task_id, "d": DAG, "r": RUN, "mi": map_index, "s": state}
                | ({"region": self.region(NIL)} if self.regions else {})
                for task_id, map_index, state in instances
            ],
        )
        return run_pk

    def seed_keys(self, run_pk: int) -> None:
        """For each task instance an expired ``job_id`` and a live ``fresh`` key; expired keys of a task
        with no task instance (``orphan``), of ``mapped`` [3] (none), and on layouts with regions, of
        ``t_running`` in another region (no task instance there)."""
        self.sql("DELETE FROM task_state_store")
        keys = [(_task(s), -1, NIL) for s in (*UNFINISHED, *FINISHED)] + [("mapped", 2, NIL)]
        rows = [(t, mi, r, "job_id", PAST) for t, mi, r in keys] + [(t, mi, r, "fresh", FUTURE) for t, mi, r in keys]
        rows += [("orphan", -1, NIL, "job_id", PAST), ("mapped", 3, NIL, "job_id", PAST)]
        if self.regions:
            rows.append((_task("running"), -1, REGION, "job_id", PAST))
        quote = "`key`" if self.engine == "mariadb" else '"key"'
        region = (", region_id", ", :region") if self.regions else ("", "")
        sql_each(
            self.url,
            f"INSERT INTO task_state_store (dag_run_id, task_id, {self.index}{region[0]}, {quote}, dag_id, "
            f"run_id, value, updated_at, expires_at) VALUES (:pk, :t, :mi{region[1]}, :k, :d, :r, :v, :u, :e)",
            [
                {
                    "pk": run_pk,
                    "t": task_id,
                    "mi": map_index,
                    "k": key,
                    "d": DAG,
                    "r": RUN,
                    "v": json.dumps({"job": f"{task_id}-{map_index}-{where.hex[:4]}"}),
                    "u": self.moment(datetime(2026, 11, 30, 6, tzinfo=UTC)),
                    "e": self.moment(expires),
                }
                | ({"region": self.region(where)} if self.regions else {})
                for task_id, map_index, where, key, expires in rows
            ],
        )

    def expired_left(self) -> set[tuple[str, int]]:
        now = self.moment(datetime.now(UTC))
        rows = self.sql(f"SELECT task_id, {self.index}, expires_at FROM task_state_store WHERE expires_at < :n", n=now)
        assert all(as_utc(e) == PAST for *_, e in rows)
        return {(t, m) for t, m, _ in rows}

    def live_keys(self) -> int:
        now = self.moment(datetime.now(UTC))
        return int(self.sql("SELECT count(*) FROM task_state_store WHERE expires_at > :n", n=now)[0][0])

    def clean(self, *args: str) -> dict[str, Any]:
        result = run_cli("clean", *args, "-o", "json", conn=self.url)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


SPARED = {(_task(s), -1) for s in UNFINISHED} | {("mapped", 2)}
DELETED = {(_task(s), -1) for s in FINISHED} | {("orphan", -1), ("mapped", 3)}
BY_STATE = {"running": 2, **{("no_status" if s is None else s): 1 for s in UNFINISHED if s != "running"}}


def _deleted(db: Db) -> set[tuple[str, int, bool]]:
    """What a clean deletes: (task, map index, in another region)."""
    base = {(t, m, False) for t, m in DELETED}
    return base | ({(_task("running"), -1, True)} if db.regions else set())


@pytest.fixture(params=[(e, layout) for e in ENGINES for layout in LAYOUTS], ids=lambda p: f"{p[0]}-{p[1]}")
def airflow(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    engine, layout = request.param
    with airflow_database(engine, LAYOUTS[layout], tmp_path) as url:
        yield Db(engine, layout, url)


def _backed_up(path: Path) -> set[tuple[str, int, bool]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {(d["task_id"], d["map_index"], d.get("region_id", str(NIL)) not in (None, str(NIL))) for d in lines}


def test_clean_keeps_the_keys_of_unfinished_task_instances_every_way_it_deletes(airflow, tmp_path):
    db = airflow
    run_pk = db.seed_instances()
    db.seed_keys(run_pk)
    deleted = _deleted(db)

    plan = db.clean("--dry-run")
    listed = {(r["task_id"], r["map_index"]) for r in plan["rows"]}
    assert listed == {(t, m) for t, m, _ in deleted}
    assert plan["would_delete"] == len(deleted)
    assert (plan["spared_unfinished"], plan["spared_by_state"]) == (len(SPARED), BY_STATE)

    runs = [
        ("--batch-size", "2", "--backup", str(tmp_path / "batched.jsonl")),
        ("--batch-size", "0", "--backup", str(tmp_path / "one.jsonl")),
        ("--batch-size", "3", "--older-than", "1d", "--max-runtime", "1h"),
        ("--batch-size", "0"),
    ]
    for args in runs:
        db.seed_keys(run_pk)
        report = db.clean(*args)
        assert report["deleted"] == len(deleted), args
        assert (report["spared_unfinished"], report["spared_by_state"]) == (len(SPARED), BY_STATE), args
        assert db.expired_left() == SPARED, args
        assert db.live_keys() == len(SPARED) + len(FINISHED), args
        if "--backup" in args:
            backup = Path(args[args.index("--backup") + 1])
            assert report["backup"]["lines"] == len(deleted)
            assert _backed_up(backup) == deleted, args


@pytest.mark.parametrize("batch", ["0", "2"])
def test_include_unfinished_deletes_them_too(airflow, tmp_path, batch):
    db = airflow
    db.seed_keys(db.seed_instances())
    everything = len(_deleted(db)) + len(SPARED)
    plan = db.clean("--dry-run", "--include-unfinished")
    assert plan["would_delete"] == everything and "spared_unfinished" not in plan
    backup = tmp_path / "all.jsonl"
    report = db.clean("--include-unfinished", "--batch-size", batch, "--backup", str(backup))
    assert report["deleted"] == everything and "spared_unfinished" not in report
    assert db.expired_left() == set()
    assert len(backup.read_text().splitlines()) == everything


ALL_ENGINES = True


def test_a_standalone_store_is_cleaned_as_before(cli, db_url):
    for task in ("a", "b"):
        cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", task, "job_id", "1", "--retention", "1s")
    cli("set", "--dag-id", "d", "--run-id", "r", "--task-id", "c", "job_id", "1")
    import time

    time.sleep(1.1)
    result = run_cli("clean", "--dry-run", "-o", "json", conn=db_url)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["would_delete"] == 2 and "spared_unfinished" not in plan
    result = run_cli("clean", "--batch-size", "1", "-o", "json", conn=db_url)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["deleted"] == 2 and "spared_unfinished" not in report


@pytest.fixture
def airflow_sqlite(tmp_path: Path) -> Any:
    with airflow_database("sqlite", HEAD_34, tmp_path) as url:
        db = Db("sqlite", "3.4", url)
        db.seed_keys(db.seed_instances())
        yield db


def test_the_metrics_file_counts_what_was_kept_and_leaves_it_out_of_what_remains(airflow_sqlite, tmp_path):
    metrics = tmp_path / "clean.prom"
    result = run_cli("clean", "--batch-size", "2", "--metrics-file", str(metrics), conn=airflow_sqlite.url)
    assert result.exit_code == 0, result.output
    values = {name: next(iter(found.values())) for name, found in read_samples(metrics).items() if len(found) == 1}
    assert values["statestore_clean_spared_unfinished"] == len(SPARED)
    assert values["statestore_clean_expired_rows_remaining"] == 0  # the kept keys are not a clean left behind
    assert values["statestore_clean_rows_deleted"] == len(_deleted(airflow_sqlite))


def test_what_was_kept_is_said_in_plain_and_table_modes(airflow_sqlite):
    states = (
        "2 running, 1 deferred, 1 no_status, 1 queued, 1 restarting, 1 scheduled, 1 up_for_reschedule, 1 up_for_retry"
    )
    plain = run_cli("clean", "--dry-run", "-o", "plain", conn=airflow_sqlite.url)
    assert plain.exit_code == 0, plain.output
    assert plain.stderr.splitlines()[-1] == (
        f"would keep 9 expired task keys of unfinished task instances ({states}): a retry may need them; "
        "--include-unfinished deletes them too."
    )
    done = run_cli("clean", "-o", "plain", conn=airflow_sqlite.url)
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines()[-1] == (
        f"kept 9 expired task keys of unfinished task instances ({states}): a retry may need them; "
        "--include-unfinished deletes them too."
    )
    fields = dict(line.split("\t") for line in done.stdout.splitlines()[1:])
    by_state = (
        "running=2, deferred=1, no_status=1, queued=1, restarting=1, scheduled=1, up_for_reschedule=1, up_for_retry=1"
    )
    assert (fields["spared_unfinished"], fields["spared_by_state"]) == ("9", by_state)
