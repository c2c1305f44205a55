"""The operations behind the CLI's key, db, clean and config commands, under the names they had here
first; each lives in the module named for what it does. Every operation takes the ``Store`` first."""

from __future__ import annotations

from statestore_cli.ops.cleaning import (
    BackendCleanup,
    CleanPlan,
    CleanSkipped,
    backend_cleanup,
    clean,
    clean_window,
    count_expired_keys,
    plan_clean,
)
from statestore_cli.ops.config_rows import ConfigRow, config_rows
from statestore_cli.ops.db_report import DbReport, StoreSizes, db_check, db_init
from statestore_cli.ops.keys import (
    backup_metastore,
    clear_scope,
    count_keys,
    delete_key,
    get_entry,
    keys_elsewhere,
    missing_asset,
    replace_value,
    set_value,
    set_value_until,
)
from statestore_cli.ops.listing import list_entries, near_misses, stats, stats_metrics

__all__ = [
    "BackendCleanup",
    "CleanPlan",
    "CleanSkipped",
    "ConfigRow",
    "DbReport",
    "StoreSizes",
    "backend_cleanup",
    "backup_metastore",
    "clean",
    "clean_window",
    "clear_scope",
    "config_rows",
    "count_expired_keys",
    "count_keys",
    "db_check",
    "db_init",
    "delete_key",
    "get_entry",
    "keys_elsewhere",
    "list_entries",
    "missing_asset",
    "near_misses",
    "plan_clean",
    "replace_value",
    "set_value",
    "set_value_until",
    "stats",
    "stats_metrics",
]
