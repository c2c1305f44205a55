"""Small answers people read: a dag, task or asset that matches nothing names the closest one
("did you mean"), an asset scope that names no asset says so, and a question answered no is an
answer, not an error."""

from __future__ import annotations

import json

import pytest

ALL_ENGINES = True

DAG, RUN, TASK = "etl_orders_daily", "scheduled__2026-11-30T00:00:00+00:00", "submit_spark_job"
KEY = "spark_application_id_for_partition_submission_attempt"
ASSET = "orders_curated_daily_snapshot_eu_west_1"


@pytest.fixture
def store(cli):
    for dag, task in ((DAG, TASK), (DAG, "load_orders_to_warehouse"), ("customers_dim_refresh", "extract")):
        assert cli("set", "--dag-id", dag, "--run-id", RUN, "--task-id", task, KEY, '"v"').exit_code == 0
    assert cli("set", "--asset-name", ASSET, "--asset-uri", f"s3://lake/{ASSET}/", "watermark", '"x"').exit_code == 0
    return cli


def test_list_of_a_mistyped_dag_names_the_closest_dag(store):
    result = store("list", "--dag-id", "etl_order_daily", "-o", "json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert result.stderr == "statestore: note: no dag_id 'etl_order_daily' has keys; did you mean 'etl_orders_daily'?\n"
    # an existing dag whose filter finds nothing, and an id close to none, add nothing
    assert store("list", "--dag-id", DAG, "--key", "no_such_key", "-o", "json").stderr == ""
    assert store("list", "--dag-id", "completely_unrelated_pipeline_name", "-o", "json").stderr == ""


def test_list_of_a_mistyped_task_names_the_closest_task_of_the_dag(store):
    result = store("list", "--dag-id", DAG, "--task-id", "submit_spark_jobs", "-o", "plain")
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == (
        f"statestore: note: no task_id 'submit_spark_jobs' of dag_id '{DAG}' has keys; did you mean '{TASK}'?\n"
    )


def test_stats_of_a_mistyped_asset_names_the_closest_asset(store):
    result = store("stats", "--asset-name", "orders_curated_daily_snapshot_eu_west_2", "-o", "json")
    assert result.exit_code == 0
    assert result.stderr == (
        f"statestore: note: no asset is named 'orders_curated_daily_snapshot_eu_west_2'; did you mean '{ASSET}'?\n"
    )


def test_get_of_an_asset_that_does_not_exist_says_no_such_asset(store):
    result = store("get", "--asset-name", "orders_curated_daily_snapshot_eu_west1", "watermark")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        "statestore: error: no such asset name=orders_curated_daily_snapshot_eu_west1: no active asset has that "
        f"name; did you mean '{ASSET}'?\n"
    )
    by_id = store("get", "--asset-id", "987654", "watermark")
    assert (by_id.exit_code, by_id.stderr) == (1, "statestore: error: no such asset: no asset has asset_id=987654\n")
    missing_key = store("get", "--asset-name", ASSET, "cursor")
    assert missing_key.stderr == f"statestore: error: no key 'cursor' for name={ASSET}\n"
