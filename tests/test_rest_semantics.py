"""Airflow's REST semantics from the command line: `set --keep-expiry` (PATCH), `set --expires-at`,
keys with `/` and spaces, and the values Airflow's API refuses. On every engine."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from sample_backends import NullBackend
from stores import as_utc, sql

ALL_ENGINES = True

RUN_ID = "scheduled__2026-11-30T00:00:00+00:00"
TASK = ("--dag-id", "etl_orders_daily", "--run-id", RUN_ID, "--task-id", "submit")


def _row(db_url: str, key: str) -> tuple:
    rows = sql(db_url, "SELECT value, updated_at, expires_at FROM task_state_store WHERE {key} = :k", k=key)
    assert len(rows) == 1, rows
    return rows[0]


def test_keep_expiry_replaces_the_value_and_keeps_expires_at(cli, db_url):
    assert cli("set", *TASK, "job", '{"id": 1}', "--retention", "6h").exit_code == 0
    value, updated, expires = _row(db_url, "job")
    result = cli("set", *TASK, "job", '{"id": 2}', "--keep-expiry")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("replaced 'job' for dag_id=etl_orders_daily")
    new_value, new_updated, new_expires = _row(db_url, "job")
    assert (json.loads(value), json.loads(new_value)) == ({"id": 1}, {"id": 2})
    assert as_utc(new_expires) == as_utc(expires)
    assert as_utc(new_updated) >= as_utc(updated)


def test_keep_expiry_keeps_never_expiring_keys_never_expiring(cli, db_url):
    assert cli("set", *TASK, "pinned", "1", "--retention", "never").exit_code == 0
    assert cli("set", *TASK, "pinned", "2", "--keep-expiry").exit_code == 0
    assert _row(db_url, "pinned")[2] is None


def test_keep_expiry_on_a_missing_key_exits_1_and_creates_nothing(cli, db_url):
    result = cli("set", *TASK, "absent", "1", "--keep-expiry")
    assert result.exit_code == 1
    assert "no key 'absent' for dag_id=etl_orders_daily" in result.stderr
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]
    result = cli("set", "--asset-name", "orders", "absent", "1", "--keep-expiry")
    assert result.exit_code == 1
    assert sql(db_url, "SELECT count(*) FROM asset_state_store") == [(0,)]


def test_keep_expiry_on_an_asset_key_replaces_its_value(cli, db_url):
    assert cli("set", "--asset-name", "orders", "watermark", '"2026-11-29"').exit_code == 0
    assert cli("set", "--asset-name", "orders", "watermark", '"2026-11-30"', "--keep-expiry").exit_code == 0
    assert json.loads(cli("get", "--asset-name", "orders", "watermark").stdout) == "2026-11-30"
    assert sql(db_url, "SELECT last_updated_by_kind FROM asset_state_store") == [("api",)]


def test_expires_at_stores_the_instant_in_utc(cli, db_url):
    result = cli("set", *TASK, "job", "1", "--expires-at", "2030-01-01T02:00:00+02:00")
    assert result.exit_code == 0, result.output
    assert result.stderr.endswith("(expires 2030-01-01 00:00:00 UTC)\n")
    assert as_utc(_row(db_url, "job")[2]) == datetime(2030, 1, 1, tzinfo=UTC)
    listed = json.loads(cli("list", "-o", "json").stdout)
    assert [d["expires_at"] for d in listed] == ["2030-01-01T00:00:00+00:00"]


def test_expires_at_needs_a_time_zone(cli, db_url):
    result = cli("set", *TASK, "job", "1", "--expires-at", "2030-01-01T00:00:00")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: --expires-at '2030-01-01T00:00:00' has no time zone; add one, "
        "e.g. 2030-01-01T00:00:00Z or 2030-01-01T00:00:00+00:00\n"
    )
    assert cli("set", *TASK, "job", "1", "--expires-at", "soon").exit_code == 2
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]


def test_expires_at_in_the_past_is_refused_unless_forced(cli, db_url):
    past = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
    result = cli("set", *TASK, "job", "1", "--expires-at", past.isoformat())
    assert result.exit_code == 2
    assert "is in the past: the next clean would delete the key; pass --force to write it anyway" in result.stderr
    assert sql(db_url, "SELECT count(*) FROM task_state_store") == [(0,)]
    assert cli("set", *TASK, "job", "1", "--expires-at", past.isoformat(), "--force").exit_code == 0
    plan = json.loads(cli("clean", "--dry-run", "-o", "json").stdout)
    assert [r["key"] for r in plan["rows"]] == ["job"]


def test_expiry_options_exclude_each_other_and_asset_keys(cli, db_url):
    for extra in (("--retention", "1d"), ("--keep-expiry",)):
        result = cli("set", *TASK, "job", "1", "--expires-at", "2030-01-01T00:00:00Z", *extra)
        assert result.exit_code == 2 and "each decide the expiry; give one of them" in result.stderr
    result = cli("set", *TASK, "job", "1", "--force")
    assert result.exit_code == 2 and "--force goes with --expires-at" in result.stderr
    result = cli("set", "--asset-name", "orders", "k", "1", "--expires-at", "2030-01-01T00:00:00Z")
    assert result.exit_code == 2
    assert (
        result.stderr
        == "statestore: error: --expires-at applies to task and dag-run keys only; asset keys never expire\n"
    )
    assert sql(db_url, "SELECT count(*) FROM task_state_store UNION ALL SELECT count(*) FROM asset") == [(0,), (0,)]


def test_keys_may_hold_slashes_and_spaces(cli, db_url):
    keys = ["s3/prefix/part-0001", "key with spaces", " leading and trailing ", "a/../b"]
    for number, key in enumerate(keys):
        assert cli("set", *TASK, key, str(number)).exit_code == 0
        assert cli("set", "--asset-name", "orders/eu west", key, str(number)).exit_code == 0
    for number, key in enumerate(keys):
        assert json.loads(cli("get", *TASK, key).stdout) == number
        assert json.loads(cli("get", "--asset-name", "orders/eu west", key).stdout) == number
    listed = json.loads(cli("list", "--store", "task", "-o", "json").stdout)
    assert sorted(d["key"] for d in listed) == sorted(keys)
    assert cli("delete", *TASK, "a/../b").exit_code == 0
    assert cli("get", *TASK, "a/../b").exit_code == 1


def test_values_airflows_api_refuses_are_refused(cli, db_url):
    refused = {
        "null": "VALUE is JSON null, which cannot be stored",
        "NaN": "VALUE contains NaN, which JSON does not allow",
        "Infinity": "VALUE contains Infinity, which JSON does not allow",
        "[1, -Infinity]": "VALUE contains -Infinity, which JSON does not allow",
        '{"ratio": NaN}': "VALUE contains NaN, which JSON does not allow",
    }
    for value, message in refused.items():
        result = cli("set", *TASK, "k", value)
        assert result.exit_code == 2, value
        assert message in result.stderr, result.stderr
    big = '"' + "x" * 65534 + '"'  # 65536 bytes stored: one over the default limit
    result = cli("set", *TASK, "k", "-", input=big)
    assert result.exit_code == 2
    assert "is 65536 bytes, over [state_store] max_value_storage_bytes = 65535" in result.stderr
    assert cli("set", "--asset-name", "orders", "k", "-", input=big).exit_code == 2
    assert sql(db_url, "SELECT count(*) FROM task_state_store UNION ALL SELECT count(*) FROM asset_state_store") == [
        (0,),
        (0,),
    ]
    assert cli("set", *TASK, "k", "-", input=big[:-2] + '"').exit_code == 0  # exactly the limit is fine


def test_keep_expiry_refuses_oversized_and_nan_values_and_keeps_the_old_one(cli, db_url):
    assert cli("set", *TASK, "k", '"old"').exit_code == 0
    assert cli("set", *TASK, "k", "NaN", "--keep-expiry").exit_code == 2
    assert cli("set", *TASK, "k", "-", "--keep-expiry", input='"' + "x" * 70000 + '"').exit_code == 2
    assert json.loads(cli("get", *TASK, "k").stdout) == "old"


# -- the library: accessors ---------------------------------------------------------------------------------
def test_accessor_replace_and_set_until(db_url):
    import pytest

    from statestore_cli import AssetScope, NotFoundError, TaskScope, accessor, load_settings
    from statestore_cli.errors import InvalidInputError

    settings = load_settings(conn_override=db_url)
    task = accessor(settings, TaskScope("etl", RUN_ID, "submit", 4))
    when = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    task.set_until("job", {"id": 1}, when)  # type: ignore[union-attr]
    task.replace("job", {"id": 2})
    assert task.get("job") == {"id": 2}
    assert as_utc(_row(db_url, "job")[2]) == when
    with pytest.raises(NotFoundError, match="no key 'missing'"):
        task.replace("missing", 1)
    with pytest.raises(InvalidInputError, match="has no time zone"):
        task.set_until("job", 1, datetime(2031, 1, 1))  # type: ignore[union-attr]
    with pytest.raises(InvalidInputError, match="NaN or Infinity"):
        task.replace("job", float("nan"))
    asset = accessor(settings, AssetScope(name="orders"))
    with pytest.raises(NotFoundError):
        asset.replace("wm", 1)
    asset.set("wm", 1)
    asset.replace("wm", 2)
    assert asset.get("wm") == 2


class PayloadStore(NullBackend):
    """A worker-side backend keeping payloads in a dict (an object store), references being paths."""

    def __init__(self) -> None:
        self.objects: dict[str, str] = {}

    def serialize_task_state_store_to_ref(self, *, value, key, scope):
        ref = f"{scope.dag_id}/{scope.task_id}/{key}"
        self.objects[ref] = json.dumps(value)
        return ref

    def deserialize_task_state_store_from_ref(self, stored):
        return json.loads(self.objects[stored])


def test_replace_through_a_worker_backend_writes_no_payload_for_a_missing_key(db_url):
    import pytest

    from statestore_cli import MetastoreBackend, NotFoundError, TaskScope, TaskStateStoreAccessor
    from statestore_cli.db.database import make_engine

    payloads = PayloadStore()
    backend = MetastoreBackend(make_engine(db_url))
    acc = TaskStateStoreAccessor(TaskScope("etl", RUN_ID, "submit"), backend, worker_backend=payloads)
    with pytest.raises(NotFoundError):
        acc.replace("job", {"id": 1})
    assert payloads.objects == {}
    acc.set("job", {"id": 1})
    acc.replace("job", {"id": 2})
    assert acc.get("job") == {"id": 2} and payloads.objects == {"etl/submit/job": '{"id": 2}'}
    backend.engine.dispose()


# -- db check on an Airflow database --------------------------------------------------------------------------
def test_db_check_on_an_airflow_database_names_its_release_and_counts(cli, db_url):
    """The store made Airflow's by its alembic_version table (the way the tool tells them apart)."""
    assert cli("set", *TASK, "old", "1", "--expires-at", "2020-01-01T00:00:00Z", "--force").exit_code == 0
    assert cli("set", *TASK, "new", "1").exit_code == 0
    assert cli("set", "--asset-name", "orders", "watermark", "1").exit_code == 0
    sql(db_url, "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    sql(db_url, "INSERT INTO alembic_version VALUES ('d2f4e1b3c5a7')")
    doc = json.loads(cli("db", "check", "-o", "json").stdout)
    assert (doc["ok"], doc["mode"], doc["airflow_version"]) == (True, "airflow", "3.3.0")
    assert (doc["task_keys"], doc["task_keys_expired"], doc["asset_keys"]) == (2, 1, 1)

    sql(db_url, "UPDATE alembic_version SET version_num = '1d6611b6ab7c'")
    sql(db_url, "DROP TABLE task_state_store")
    sql(db_url, "DROP TABLE asset_state_store")
    result = cli("db", "check", "-o", "json")
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert (doc["ok"], doc["airflow_version"], doc["task_keys"]) == (False, "3.2.0", None)
    assert "this is an Airflow 3.2.0 metadata database (revision 1d6611b6ab7c) without the state store, which " in (
        result.stderr
    )
    sql(db_url, "UPDATE alembic_version SET version_num = 'abcdef012345'")  # a revision no release has
    result = cli("db", "check", "-o", "json")
    assert json.loads(result.stdout)["airflow_version"] is None
    assert "this is an Airflow metadata database (revision abcdef012345) without the state store" in result.stderr
