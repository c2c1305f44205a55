#!/bin/sh
# A tour on a throw-away store: write keys (two already expired), preview the clean, then clean.
set -eu
AIRFLOW_HOME=$(mktemp -d)
export AIRFLOW_HOME
echo "AIRFLOW_HOME=$AIRFLOW_HOME"
statestore db init
statestore set --dag-id etl --run-id manual__1 --task-id submit job_id '{"id": "j-123"}' --retention 1s
statestore set --dag-id etl --run-id manual__1 --task-id load --map-index 0 offset 1200 --retention 1s
statestore set --dag-id etl --run-id manual__2 --task-id submit job_id '{"id": "j-456"}' --retention 7d
statestore set --dag-id etl --run-id manual__2 --task-id submit checkpoint 42 --retention never
statestore set --asset-uri s3://lake/orders watermark '"2026-11-30T00:00:00Z"'
sleep 2
statestore list --output table
statestore clean --dry-run --output table
statestore clean
statestore list --output table
