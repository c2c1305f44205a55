"""The one render layer: every command's result goes out as a rich table, plain lines or JSON.

The mode is decided once per command (``Output.choose``): ``json`` when asked for, else rich tables
on a terminal and plain tab-separated lines when stdout is a pipe or a file. Stored text is always
passed through ``safe_text``/``safe_json`` and into rich only as ``Text`` objects, never as markup.

Plain and JSON stdout carry records only, for scripts: one record per line in plain output (fields
escaped by ``plain_field``, so a tab or a line break inside a value cannot split a record), a header
line only when asked for (``--header``); sentences for people (summaries, notes) go to stderr.
rich is imported only when a table or a progress bar is drawn: plain and JSON output (cron, CI, a
pipe) never pay for it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from statestore_cli.cli.output.documents import entry_json, expired_notice, get_output
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.cli.output.writer import Writer, write_json_array
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.timestamps import human

if TYPE_CHECKING:  # the records only: importing their modules would load SQLAlchemy for `--help`
    from statestore_cli.ops.api_check import ApiReport
    from statestore_cli.ops.backend_check import CheckReport
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.cleanup import CleanReport
    from statestore_cli.ops.commands import BackendCleanup, CleanPlan, ConfigRow, DbReport
    from statestore_cli.ops.diff import Difference, DiffSummary
    from statestore_cli.ops.lifecycle import SweepReport, SweptAsset
    from statestore_cli.ops.orphans import OrphanReport
    from statestore_cli.ops.stats import StoreStats
    from statestore_cli.ops.transfer import ExportSummary, ImportSummary

# The columns of each kind of plain record, printed as a header line with --header.
TASK_KEY_COLUMNS = ("store", "dag_id", "run_id", "task_id", "map_index", "key", "updated_at", "expires_at")
DAG_RUN_KEY_COLUMNS = ("store", "dag_id", "run_id", "key", "updated_at", "expires_at")
ASSET_KEY_COLUMNS = ("store", "asset_id", "name", "uri", "key", "updated_at", "expires_at")


class Output(Writer):
    """Every command's result as a table, plain records or JSON; ``Writer`` is where and how it goes."""

    # -- keys ---------------------------------------------------------------------------------------
    def value(self, entry: Entry) -> None:
        sys.stdout.write(get_output(entry, self.mode))
        notice = expired_notice(entry, datetime.now(UTC)) if self.mode == "table" else None
        if notice:  # on a terminal only: scripts read stdout and the expires_at of -o json
            sys.stdout.flush()
            sys.stderr.write(notice)

    def entries(self, entries: Iterable[Entry], filt: KeyFilter | None = None) -> int:
        if self.json:
            return write_json_array(entry_json(e) for e in entries)
        if self.mode == "plain":
            return self._plain_entries(entries, filt or KeyFilter())
        from statestore_cli.cli.output.list_view import ListView

        count = ListView(self.console).render(entries)
        self.line(f"{count:,} key{'s' if count != 1 else ''}")
        return count

    def _plain_entries(self, entries: Iterable[Entry], filt: KeyFilter) -> int:
        # Task and asset keys have different columns: with --header, each store's rows follow their own
        # header line (task keys come first); an empty listing has the header of the first store selected.
        count = 0
        store = None
        for entry in entries:
            count += 1
            if entry.store != store:
                store = entry.store
                self.plain_header(_PLAIN_COLUMNS[store])
            self.plain_row(*_entry_cells(entry, zone=" UTC"))
        if count == 0:
            only_assets = filt.store == "asset" or (filt.store is None and filt.has_asset_fields)
            self.plain_header(ASSET_KEY_COLUMNS if only_assets else TASK_KEY_COLUMNS)
        return count

    def diff(self, differences: Iterable[Difference]) -> int:
        """``diff``'s differences as they come; how many (the summary is ``diff_summary``)."""
        from statestore_cli.cli.output.diff_view import show

        return show(self, differences)

    def diff_summary(self, summary: DiffSummary) -> None:
        """Beside a table only: plain and JSON output are the differences alone, as diff(1) prints them."""
        if self.mode == "table":
            from statestore_cli.cli.output.diff_view import summary_line

            self.line(summary_line(summary))

    def stats(self, stats: StoreStats) -> None:
        from statestore_cli.cli.output.stats_view import show  # its own module: tables, plain lines, JSON

        show(self, stats)

    def api_requests(self, requests: int | None) -> None:
        """After a command through the REST API, the note of the requests it made; nothing off the API (None)."""
        if requests is not None:
            self.note(f"through the REST API: {_count(requests, 'request')}")

    # -- clean (cli.output.clean_view) ---------------------------------------------------------------
    def clean_plan(self, plan: CleanPlan, *, limit: int | None, total: int | None = None) -> int:
        from statestore_cli.cli.output.clean_view import show_plan  # its own module: tables, plain lines, JSON

        return show_plan(self, plan, limit=limit, total=total)

    def clean_skipped(self, reason: str, dry_run: bool) -> None:
        from statestore_cli.cli.output.clean_view import show_skipped

        show_skipped(self, reason, dry_run)

    def clean_report(self, report: CleanReport, backup: BackupFile | None = None) -> None:
        from statestore_cli.cli.output.clean_view import show_report

        show_report(self, report, backup)

    # -- backends (cli.output.backend_views) ---------------------------------------------------------------
    def backend_cleanup(self, done: BackendCleanup) -> None:
        from statestore_cli.cli.output.backend_views import show_backend_cleanup

        show_backend_cleanup(self, done)

    def orphans(self, report: OrphanReport) -> None:
        from statestore_cli.cli.output.backend_views import show_orphans

        show_orphans(self, report)

    def backend_check(self, report: CheckReport) -> None:
        from statestore_cli.cli.output.backend_views import show_backend_check

        show_backend_check(self, report)

    # -- export and import --------------------------------------------------------------------------
    def export_summary(self, summary: ExportSummary, target: str) -> None:
        """One line for people on stderr: stdout may be the export itself."""
        runs = f"{summary.dag_run:,} dag-run, " if summary.dag_run else ""  # only Airflow 3.4 has them
        self.message(
            f"exported {_count(summary.keys, 'key')} ({summary.task:,} task, {runs}{summary.asset:,} asset) "
            f"to {safe_text(target)} in {summary.elapsed:.1f}s",
            stderr=True,
        )

    def import_summary(self, summary: ImportSummary, source: str) -> None:
        """The counts per store: JSON on stdout with -o json, else lines for people on stderr."""
        if self.json:
            self.write_json(
                {
                    "dry_run": summary.dry_run,
                    "source": source,
                    "lines": summary.lines,
                    "keys": summary.keys,
                    "batches": summary.batches,
                    "batch_size": summary.batch_size,
                    "task": summary.task._asdict(),
                    "dag_run": summary.dag_run._asdict(),
                    "asset": summary.asset._asdict(),
                    "created": {"dag_runs": summary.dag_runs_created, "assets": summary.assets_created},
                    "elapsed_seconds": round(summary.elapsed, 3),
                    **({} if summary.api_requests is None else {"api_requests": summary.api_requests}),
                }
            )
            return
        keys = f"{_count(summary.keys, 'key')} from {safe_text(source)}"
        if summary.api_requests is None:
            how = f"in {_count(summary.batches, 'batch')} of up to {summary.batch_size:,}"
            done = f"{how} ({summary.elapsed:.1f}s)"
        else:  # each key its own write
            requests = _count(summary.api_requests, "request")
            how, done = (
                f"through the REST API ({requests})",
                f"through the REST API ({requests}, {summary.elapsed:.1f}s)",
            )
        if summary.dry_run:
            lines = [f"dry run: {keys} checked {how}; nothing written"]
            verbs, made = ("to insert", "to update"), "would create"
        else:
            lines = [f"imported {keys} {done}"]
            verbs, made = ("inserted", "updated"), "created"
        stores = (("task", summary.task), ("dag-run", summary.dag_run), ("asset", summary.asset))
        for store, counts in stores:
            if store != "dag-run" or counts.inserted or counts.updated:  # only where there were some (Airflow 3.4)
                lines.append(f"  {store} keys: {counts.inserted:,} {verbs[0]}, {counts.updated:,} {verbs[1]}")
        if summary.dag_runs_created or summary.assets_created:
            runs, assets = _count(summary.dag_runs_created, "dag run"), _count(summary.assets_created, "asset")
            lines.append(f"  {made} {runs} and {assets}")
        for line in lines:
            self.message(line, stderr=True)

    # -- assets sweep -------------------------------------------------------------------------------
    def sweep_plan(self, assets: Iterable[SweptAsset]) -> None:
        from statestore_cli.cli.output.sweep_view import show_plan  # its own module: tables, plain lines, JSON

        show_plan(self, assets)

    def sweep_report(self, report: SweepReport, backup: BackupFile | None = None) -> None:
        from statestore_cli.cli.output.sweep_view import show_report

        show_report(self, report, backup)

    # -- db and config (cli.output.db_config_view) ---------------------------------------------------
    def db_report(self, report: DbReport | ApiReport, *, created: bool = False) -> None:
        from statestore_cli.cli.output.db_config_view import show_api_report, show_db_report
        from statestore_cli.ops.api_check import ApiReport

        if isinstance(report, ApiReport):
            show_api_report(self, report)
        else:
            show_db_report(self, report, created=created)

    def config(
        self, rows: list[ConfigRow], config_file: str | None, airflow_home: str, searched: str | None = None
    ) -> None:
        from statestore_cli.cli.output.db_config_view import show_config

        show_config(self, rows, config_file, airflow_home, searched)


def _count(number: int, noun: str) -> str:
    """``1 key``, ``1,000 keys``, ``2 batches``."""
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{number:,} {noun if number == 1 else plural}"


_PLAIN_COLUMNS = {"task": TASK_KEY_COLUMNS, "dag_run": DAG_RUN_KEY_COLUMNS, "asset": ASSET_KEY_COLUMNS}


def _entry_cells(entry: Entry, zone: str) -> tuple[object, ...]:
    if entry.store == "task":
        scope: tuple[object, ...] = ("task", entry.dag_id, entry.run_id, entry.task_id, entry.map_index)
    elif entry.store == "dag_run":
        scope = ("dag_run", entry.dag_id, entry.run_id)
    else:
        scope = ("asset", entry.asset_id, entry.name, entry.uri)
    times = (human(entry.updated_at, "-", zone), human(entry.expires_at, "never", zone))
    return (*scope, entry.key, *times)
