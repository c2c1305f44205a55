"""``copy`` (and ``copy --move``): a scope's keys carried over to another scope."""

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from statestore_cli.cli.command_groups import app
from statestore_cli.cli.confirm import confirm_delete, key_count
from statestore_cli.cli.context import store_of
from statestore_cli.cli.help_text import TASK_EXAMPLE, examples
from statestore_cli.cli.options import LockTimeoutOpt, OutputOpt, choose_output
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.cli.scope_options import scope_of, with_scope_options
from statestore_cli.model.entries import KeyFilter

if TYPE_CHECKING:  # loaded when the command runs: SQLAlchemy is not needed for --help
    from statestore_cli.cli.output.render import Output
    from statestore_cli.ops.copying import CopyReport

_PANEL = "Target"


@app.command(
    "copy",
    epilog=examples(
        f"copy {TASK_EXAMPLE} --to-task-id submit_v2",
        f"copy {TASK_EXAMPLE} job_id --to-run-id manual__2",
        "copy --asset-name orders --to-asset-name orders_v2 --move --yes",
        "copy --asset-id 7 --to-asset-id 12 watermark --overwrite --yes -o json",
    ),
)
@with_scope_options
def copy(
    ctx: typer.Context,
    scope_args: KeyFilter,
    keys: Annotated[
        Optional[list[str]],
        typer.Argument(
            metavar="[KEY]...", help="Copy only these keys of the scope (default: all of them).", show_default=False
        ),
    ] = None,
    to_dag_id: Annotated[
        Optional[str], typer.Option("--to-dag-id", help="Target DAG id.", rich_help_panel=_PANEL)
    ] = None,
    to_run_id: Annotated[
        Optional[str], typer.Option("--to-run-id", help="Target run id.", rich_help_panel=_PANEL)
    ] = None,
    to_task_id: Annotated[
        Optional[str], typer.Option("--to-task-id", help="Target task id.", rich_help_panel=_PANEL)
    ] = None,
    to_map_index: Annotated[
        Optional[int], typer.Option("--to-map-index", help="Target map index.", rich_help_panel=_PANEL)
    ] = None,
    to_asset_name: Annotated[
        Optional[str], typer.Option("--to-asset-name", help="Target asset name.", rich_help_panel=_PANEL)
    ] = None,
    to_asset_uri: Annotated[
        Optional[str], typer.Option("--to-asset-uri", help="Target asset URI.", rich_help_panel=_PANEL)
    ] = None,
    to_asset_id: Annotated[
        Optional[int], typer.Option("--to-asset-id", help="Target asset id.", rich_help_panel=_PANEL)
    ] = None,
    move: Annotated[
        bool, typer.Option("--move", help="Delete the keys from the source in the same transaction.")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace keys the target holds already (else exit 2).")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    output: OutputOpt = OutputMode.auto,
    lock_timeout: LockTimeoutOpt = None,
) -> None:
    """Copy a scope's keys to another scope (a renamed task or asset keeps its state).

    The source is given by the scope options, the target by the --to-* options: what is not given stays
    as in the source (a task's keys go to a task, a dag run's to a dag run, an asset's to an asset).
    Values and expiries are carried as stored; updated_at is the time of the copy. With a worker-side
    backend each object is read through it and written again for the target.
    On an Airflow database the target dag run, task instance or asset must exist (exit 2).

    A key the target holds already is refused (exit 2, nothing written) unless --overwrite.
    --move deletes the source keys in the same transaction. --move, and --overwrite onto existing keys,
    ask on a terminal and need --yes anywhere else; answering no exits 1."""
    from statestore_cli.ops import copying

    out = choose_output(output)
    source = scope_of(scope_args)
    to = KeyFilter(
        dag_id=to_dag_id,
        run_id=to_run_id,
        task_id=to_task_id,
        map_index=to_map_index,
        asset_id=to_asset_id,
        name=to_asset_name,
        uri=to_asset_uri,
    )
    target = copying.target_scope(source, to)
    store = store_of(ctx)
    wanted = tuple(keys or ())
    plan = copying.plan_copy(store, source, target, wanted)
    where = f"from {safe_text(source.describe())} to {safe_text(target.describe())}"
    if not plan.keys:
        _said(
            out,
            copying.CopyReport(source, target, 0, 0, move),
            f"nothing to copy: no keys for {safe_text(source.describe())}",
        )
        return
    if plan.clashes and not overwrite:
        raise copying.clash_error(plan)
    if move or plan.clashes:
        verb = "Move" if move else "Copy"
        replacing = f", replacing {key_count(len(plan.clashes))} there" if plan.clashes else ""
        action = "--move deletes the source keys" if move else "--overwrite replaces keys"
        confirm_delete(yes, action, f"{verb} {key_count(len(plan.keys))} {where}{replacing}?", "nothing copied")
    report = copying.copy_keys(store, source, target, wanted, move=move, overwrite=overwrite)
    verb = "moved" if report.moved else "copied"
    replaced = f" ({key_count(report.overwritten)} replaced)" if report.overwritten else ""
    _said(out, report, f"{verb} {key_count(report.copied)} {where}{replaced}")
    out.api_requests(store.api_requests())


def _said(out: "Output", report: "CopyReport", line: str) -> None:
    """The one line people read, or with -o json the counts scripts read."""
    if out.json:
        out.write_json(
            {
                "copied": report.copied,
                "overwritten": report.overwritten,
                "moved": report.moved,
                "source": report.source.describe(),
                "target": report.target.describe(),
            }
        )
        return
    out.line(line)
