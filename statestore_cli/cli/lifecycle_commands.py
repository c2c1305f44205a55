"""``assets sweep``, ``assets delete`` and ``runs delete``."""

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from statestore_cli.cli.backup_option import BackupOpt, close_backup, name_restore, open_backup, refuse_with_dry_run
from statestore_cli.cli.command_groups import assets_app, runs_app
from statestore_cli.cli.confirm import confirm_delete, key_count
from statestore_cli.cli.context import store_of
from statestore_cli.cli.help_text import examples, section
from statestore_cli.cli.options import (
    DeleteDryRunOpt,
    HeaderOpt,
    LockTimeoutOpt,
    OutputOpt,
    batch_size_option,
    choose_output,
)
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.render import Output
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.errors import (
    InvalidInputError,
)

if TYPE_CHECKING:
    from statestore_cli.ops.lifecycle import SweptAsset


# -- assets and runs --------------------------------------------------------------------------------
@assets_app.command(
    "sweep",
    epilog=examples(
        "assets sweep --dry-run",
        "assets sweep --batch-size 1000",
        "assets sweep --backup /var/backups/statestore/sweep-2026-11-30.jsonl --yes",
        "assets sweep -o json",
    ),
)
def assets_sweep(
    ctx: typer.Context,
    dry_run: DeleteDryRunOpt = False,
    batch_size: Annotated[
        Optional[int],
        batch_size_option(
            "Keys per committed batch; 0 = one statement per asset. "
            f"Default: {section('state_store')} state_cleanup_batch_size."
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    backup: BackupOpt = None,
    lock_timeout: LockTimeoutOpt = None,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> None:
    """Delete the keys of assets that are no longer active.

    An asset is inactive when it has no asset_active row: Airflow removes that row when no dag
    defines the asset any more, also while the dag that defines it fails to parse. Their keys
    never expire (watermarks): check with --dry-run first. Active assets' keys stay.
    Asks on a terminal with the count and the assets, and then sweeps only those assets; anywhere
    else it needs --yes (exit 2). Answering no exits 1, nothing deleted.

    --backup FILE first writes every key it deletes to FILE (the export format, each batch synced to disk
    before it commits); `statestore import FILE` puts them back. FILE must be new or empty, its folder
    writable (else exit 2, nothing deleted); left empty when nothing is swept. A dry run refuses it. A
    worker-side backend's objects are then kept: the backup's references point at them."""
    from statestore_cli.ops import lifecycle

    out = choose_output(output, header)
    refuse_with_dry_run(backup, dry_run, "a sweep")
    saved = open_backup(backup)  # checked before anything is counted, asked or deleted
    store = store_of(ctx)
    settings = store.settings
    if dry_run:
        out.sweep_plan(lifecycle.plan_sweep(store))
        return
    name_restore(saved, settings)
    confirmed = None  # with --yes: every asset inactive when the sweep runs
    if not yes:
        plan = list(lifecycle.plan_sweep(store))
        if plan:
            confirm_delete(False, "assets sweep deletes keys", _sweep_question(plan))
        confirmed = [found.asset_id for found in plan]  # an asset that goes inactive meanwhile was not asked about
    try:
        report = lifecycle.sweep(store, batch_size, backup=saved, only=confirmed)
    finally:
        close_backup(saved)
    out.sweep_report(report, saved)
    if saved is not None and saved.lines and settings.worker_backend:
        out.line(
            f"kept the objects of [workers] state_store_backend behind the {key_count(saved.lines)}, so that the "
            "backup's references restore; `statestore orphans` lists them meanwhile"
        )


def _sweep_question(plan: list["SweptAsset"], shown: int = 3) -> str:
    """The count and the assets: "Delete 3 keys (they never expire) of 2 inactive assets: orders, invoices?"."""
    keys = sum(len(found.keys) for found in plan)
    names = ", ".join(safe_text(found.name) for found in plan[:shown])
    more = f" and {len(plan) - shown:,} more" if len(plan) > shown else ""
    assets = f"{len(plan):,} inactive asset{'s' if len(plan) != 1 else ''}"
    return f"Delete {key_count(keys)} (they never expire) of {assets}: {names}{more}?"


@assets_app.command("delete", epilog=examples("assets delete --asset-name orders", "assets delete --asset-id 7 --yes"))
def assets_delete(
    ctx: typer.Context,
    asset_name: Annotated[Optional[str], typer.Option("--asset-name", help="Asset name.")] = None,
    asset_uri: Annotated[Optional[str], typer.Option("--asset-uri", help="Asset URI.")] = None,
    asset_id: Annotated[Optional[int], typer.Option("--asset-id", help="Asset id (as in the asset table).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    lock_timeout: LockTimeoutOpt = None,
) -> None:
    """Delete an asset of a standalone store; its keys go with it.

    Active or not. Refused on an Airflow database (exit 2): there Airflow owns its assets.
    Asks on a terminal; anywhere else it needs --yes."""
    from statestore_cli.model.scopes import AssetScope
    from statestore_cli.ops import lifecycle

    store = store_of(ctx)
    if asset_name is None and asset_uri is None and asset_id is None:
        raise InvalidInputError("assets delete needs --asset-name, --asset-uri or --asset-id")
    scope = AssetScope(asset_id=asset_id, name=asset_name, uri=asset_uri)
    lifecycle.require_standalone(store, "delete assets")
    found = lifecycle.find_asset(store, scope)
    where = safe_text(f"asset_id={found.asset_id} name={found.name} uri={found.uri}")
    confirm_delete(yes, "assets delete deletes an asset", f"Delete {where} and its {key_count(found.keys)}?")
    gone = lifecycle.delete_asset(store, scope)
    Output.choose().line(f"deleted {where} and its {key_count(gone.keys)}")


@runs_app.command("delete", epilog=examples("runs delete --dag-id etl --run-id manual__1 --yes"))
def runs_delete(
    ctx: typer.Context,
    dag_id: Annotated[str, typer.Option("--dag-id", help="DAG id of the run.")],
    run_id: Annotated[str, typer.Option("--run-id", help="Run id.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    lock_timeout: LockTimeoutOpt = None,
) -> None:
    """Delete a dag run of a standalone store; its task keys go with it.

    A run that does not exist exits 1. Refused on an Airflow database (exit 2): there Airflow owns
    its runs. Asks on a terminal; anywhere else it needs --yes."""
    from statestore_cli.errors import NotFoundError
    from statestore_cli.ops import lifecycle

    store = store_of(ctx)
    where = safe_text(lifecycle.describe_run_or_dag(dag_id, run_id))
    lifecycle.require_standalone(store, "delete dag runs")
    keys = lifecycle.count_run_keys(store, dag_id, run_id)
    if keys is None:
        raise NotFoundError(f"no dag run {where}")
    confirm_delete(yes, "runs delete deletes a run", f"Delete the dag run {where} and its {key_count(keys)}?")
    removed = lifecycle.delete_run(store, dag_id, run_id)
    Output.choose().line(f"deleted the dag run {where} and its {key_count(removed)}")
