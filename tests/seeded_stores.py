"""Stores as operators have them, written by the library with fixed timestamps, for goldens and screenshots."""

from __future__ import annotations

from datetime import UTC, datetime

from stores import sql

# A store as operators have them: scheduled and manual runs, long task ids, mapped tasks with 4-digit
# map indexes, 60-character keys; fixed timestamps, so what is shown does not depend on the day.
REALISTIC_RUNS = ("scheduled__2026-11-30T00:00:00+00:00", "manual__2026-11-29T17:45:12.345678+00:00")
REALISTIC_KEY = "external_system_reference_for_partition_2026_11_30_eu_west_1"  # 60 characters
REALISTIC_UPDATED = datetime(2026, 11, 29, 10, 15, 30, tzinfo=UTC)
REALISTIC_EXPIRED = datetime(2026, 11, 1, 3, 0, 0, tzinfo=UTC)
REALISTIC_LATER = datetime(2037, 6, 1, 12, 0, 0, tzinfo=UTC)  # far off: goldens do not change as time passes


def realistic_keys() -> list[tuple[str, str, str, int, str, datetime | None]]:
    """(dag_id, run_id, task_id, map_index, key, expires_at) of the realistic store's task keys."""
    keys = []
    for dag_id in ("etl_orders_daily", "ml_feature_store_refresh_with_a_rather_long_dag_id"):
        for run_id in REALISTIC_RUNS:
            keys.append((dag_id, run_id, "submit_spark_job", -1, "job_id", REALISTIC_EXPIRED))
            keys.append((dag_id, run_id, "submit_spark_job", -1, REALISTIC_KEY, REALISTIC_LATER))
            keys.append((dag_id, run_id, "wait_for_emr_cluster_to_finish_processing", 7, "checkpoint", None))
            keys.append((dag_id, run_id, "load_partition", 1023, REALISTIC_KEY, REALISTIC_EXPIRED))
    return keys


def seed_realistic(url: str) -> None:
    """Write the realistic store's task keys and two asset keys, with fixed ``updated_at``."""
    from statestore_cli import AssetScope, MetastoreBackend, TaskScope
    from statestore_cli.db.database import make_engine

    backend = MetastoreBackend(make_engine(url))
    try:
        for dag_id, run_id, task_id, map_index, key, expires_at in realistic_keys():
            value = '{"job_id": "spark-application-1764460800123_0042", "attempt": 2}'
            backend.set(TaskScope(dag_id, run_id, task_id, map_index), key, value, expires_at=expires_at)
        for name in ("s3://warehouse/orders/daily_partitions", "watermark"):
            backend.set(AssetScope(name=name, uri=name), "last_processed_partition", '"2026-11-29"')
    finally:
        backend.engine.dispose()
    moment: object = REALISTIC_UPDATED  # as each engine stores it: SQLite text, MySQL naive UTC
    if url.startswith("sqlite"):
        moment = REALISTIC_UPDATED.strftime("%Y-%m-%d %H:%M:%S.%f")
    elif url.startswith(("mysql", "mariadb")):
        moment = REALISTIC_UPDATED.replace(tzinfo=None)
    for table in ("task_state_store", "asset_state_store"):
        sql(url, f"UPDATE {table} SET updated_at = :moment", moment=moment)


# The store of an operator's report, as seen in tmux at 80x30: one dag run, a task mapped over 21 indexes,
# keys of 40-60 characters, three of them differing only in their middle (what a shortened key hid).
OPERATOR_DAG = "etl_orders_daily"
OPERATOR_RUN = "scheduled__2026-11-30T00:00:00+00:00"
OPERATOR_TASK = "submit_spark_job"
OPERATOR_REGION_KEYS = tuple(
    f"last_committed_offset_for_region_{region}_kafka_topic_orders"  # 60 characters and more
    for region in ("eu_west_1", "us_east_1", "ap_south_1")
)
OPERATOR_KEY = "spark_application_id_of_the_submitted_job"  # 41 characters, one per map index
OPERATOR_ASSET_URI = "s3://warehouse-prod-eu-west-1/orders/daily_partitions/version_2"
OPERATOR_ASSET_KEY = "last_processed_partition_of_the_orders_daily_export"


def seed_operator_store(url: str) -> None:
    """The operator's store: ``submit_spark_job`` over map indexes 0-20, each with ``OPERATOR_KEY`` (expired
    below index 3), index 0 also with the three region keys (expired) and ``job_id``; an active asset and
    an inactive one (no dag uses it) with a long key each; fixed ``updated_at``."""
    from statestore_cli import AssetScope, MetastoreBackend, TaskScope
    from statestore_cli.db.database import make_engine

    backend = MetastoreBackend(make_engine(url))
    try:
        for index in range(21):
            scope = TaskScope(OPERATOR_DAG, OPERATOR_RUN, OPERATOR_TASK, index)
            expires = REALISTIC_EXPIRED if index < 3 else REALISTIC_LATER
            backend.set(scope, OPERATOR_KEY, '"application_1764460800123_0042"', expires_at=expires)
        first = TaskScope(OPERATOR_DAG, OPERATOR_RUN, OPERATOR_TASK, 0)
        for key in OPERATOR_REGION_KEYS:
            backend.set(first, key, "1764460800", expires_at=REALISTIC_EXPIRED)
        backend.set(first, "job_id", '"j-42"', expires_at=None)
        for name in ("orders_daily_partitions", "orders_daily_partitions_legacy"):
            backend.set(AssetScope(name=name, uri=OPERATOR_ASSET_URI + name[23:]), OPERATOR_ASSET_KEY, '"2026-11-29"')
    finally:
        backend.engine.dispose()
    sql(url, "DELETE FROM asset_active WHERE name = 'orders_daily_partitions_legacy'")
    moment = REALISTIC_UPDATED.strftime("%Y-%m-%d %H:%M:%S.%f")  # SQLite's text
    for table in ("task_state_store", "asset_state_store"):
        sql(url, f"UPDATE {table} SET updated_at = :moment", moment=moment)
