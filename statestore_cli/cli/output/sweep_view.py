"""What ``statestore assets sweep`` prints, grouped by asset: a JSON document, tab-separated records
(one per key, or per asset after a real run; the summary sentence on stderr), or a table on a terminal.

Stored text (asset names, uris, keys) goes through ``safe_text``/``safe_json`` and reaches rich only
as ``Text`` objects; rich is imported only to draw the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from statestore_cli.cli.output.safe_text import safe_text

if TYPE_CHECKING:
    from statestore_cli.cli.output.writer import Writer
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.lifecycle import SweepReport, SweptAsset


def _keys(count: int) -> str:
    return f"{count:,} key{'s' if count != 1 else ''}"


def _assets(count: int) -> str:
    return f"{count:,} inactive asset{'s' if count != 1 else ''}"


def show_plan(out: Writer, assets: Iterable[SweptAsset]) -> None:
    """The dry run: every inactive asset with its keys, then what would go."""
    shown = list(assets)  # one entry per asset, not per key: an inactive asset's keys are few
    total = sum(len(a.keys) for a in shown)
    if out.json:
        out.write_json(
            {
                "dry_run": True,
                "assets": [{"asset_id": a.asset_id, "name": a.name, "uri": a.uri, "keys": list(a.keys)} for a in shown],
                "would_delete": total,
            }
        )
        return
    if out.mode == "plain":
        out.plain_header(("asset_id", "name", "uri", "key"))
        for a in shown:
            for key in a.keys:
                out.plain_row(a.asset_id, a.name, a.uri, key)
    else:  # a heading per asset and its keys below it, one a line: keys stay whole (the tables' rule, cli.output.grid)
        from statestore_cli.cli.output.grid import fold, wrap

        width = out.console.width
        for a in shown:
            heading = f"asset {safe_text(a.name)} (uri {safe_text(a.uri)}, asset_id {a.asset_id}): {_keys(len(a.keys))}"
            for line in wrap([part for word in heading.split(" ") for part in fold(word, width)], width):
                out.line(line)
            for key in a.keys:
                for line in fold(safe_text(key), width - 2):
                    out.line(f"  {line}")
    out.line(f"dry run: {_keys(total)} of {_assets(len(shown))} would be deleted")


def show_report(out: Writer, report: SweepReport, backup: BackupFile | None = None) -> None:
    """The real run: how many keys went per asset, and in all (and where their backup is)."""
    if out.json:
        doc = {
            "dry_run": False,
            "deleted": report.deleted,
            "assets": [
                {"asset_id": a.asset_id, "name": a.name, "uri": a.uri, "deleted": a.deleted} for a in report.assets
            ],
            "batches": report.batches,
            "batch_size": report.batch_size,
            "elapsed_seconds": round(report.elapsed, 3),
        }
        if backup is not None:
            from statestore_cli.cli.backup_option import backup_document

            doc["backup"] = backup_document(backup)
        out.write_json(doc)
        return
    if out.mode == "plain":
        out.plain_header(("asset_id", "name", "uri", "deleted"))
        for a in report.assets:
            out.plain_row(a.asset_id, a.name, a.uri, a.deleted)
    elif report.assets:
        _table(out, report.assets)
    if not report.assets:
        out.line("nothing to sweep: no inactive asset has keys")
    else:
        batches = f"{report.batches:,} batch{'es' if report.batches != 1 else ''}"
        out.line(f"deleted {_keys(report.deleted)} of {_assets(len(report.assets))} in {batches}")
    if backup is not None:
        from statestore_cli.cli.backup_option import backup_sentence

        out.line(backup_sentence(backup))


def _table(out: Writer, assets: tuple[SweptAsset, ...]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table()
    table.add_column("asset_id", justify="right", no_wrap=True)
    table.add_column("name", overflow="fold")
    table.add_column("uri", overflow="fold")
    table.add_column("deleted", justify="right", no_wrap=True)
    for a in assets:
        table.add_row(Text(str(a.asset_id)), Text(safe_text(a.name)), Text(safe_text(a.uri)), Text(f"{a.deleted:,}"))
    out.console.print(table)
