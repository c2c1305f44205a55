"""A task scope given without --map-index whose keys are at other map indices: get, clear and delete
say how many and where, and name --map-index N (and --all-map-indices), keeping their exit codes."""

from __future__ import annotations

import pytest

ALL_ENGINES = True

DAG, RUN, TASK = "etl_orders_daily", "scheduled__2026-11-30T00:00:00+00:00", "submit_spark_job"
KEY = "spark_application_id_for_partition_submission_attempt"  # 54 characters
SCOPE = ("--dag-id", DAG, "--run-id", RUN, "--task-id", TASK)
WHERE = f"dag_id={DAG} run_id={RUN} task_id={TASK} map_index=-1"


@pytest.fixture
def mapped(cli):
    """submit_spark_job mapped over 21 indices, one key each."""
    for index in range(21):
        assert (
            cli("set", *SCOPE, "--map-index", str(index), KEY, f'"application_1764460800000_{index:04d}"').exit_code
            == 0
        )
    return cli


def test_get_without_map_index_says_where_the_key_is_and_exits_1(mapped):
    result = mapped("get", *SCOPE, KEY)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        f"statestore: error: no key {KEY!r} for {WHERE}; the key is at map indices 0-20 of {TASK}: give --map-index N\n"
    )
    nowhere = mapped("get", *SCOPE, "no_such_key_anywhere")  # a key the task has nowhere: the short message
    assert (nowhere.exit_code, nowhere.stderr) == (1, f"statestore: error: no key 'no_such_key_anywhere' for {WHERE}\n")


def test_clear_without_map_index_counts_the_keys_elsewhere_and_deletes_nothing(mapped):
    result = mapped("clear", *SCOPE, "--yes")
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == (
        f"nothing to clear: no keys for {WHERE}; 21 keys of {TASK} are at map indices 0-20: "
        "give --map-index N or --all-map-indices\n"
    )
    assert mapped("get", *SCOPE, "--map-index", "7", KEY).exit_code == 0


def test_delete_without_map_index_says_where_the_key_is(mapped):
    result = mapped("delete", *SCOPE, KEY)
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == (
        f"no such key, nothing deleted: {KEY!r} for {WHERE}; the key is at map indices 0-20 of {TASK}: "
        "give --map-index N\n"
    )


def test_gaps_in_the_map_indices_show_as_ranges():
    from statestore_cli.model.scopes import index_ranges

    assert index_ranges([0, 1, 2, 3, 5, 9, 10, 11]) == "0-3, 5, 9-11"
    assert index_ranges([4]) == "4"
    assert index_ranges(list(range(0, 30, 2)), most=3) == "0, 2, 4, ..."
