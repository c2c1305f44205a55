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
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring as _quote  # the C encoder json.dumps uses
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.failure import FLAGS
from statestore_cli.cli.output.documents import entry_json, expired_notice, get_output, iso
from statestore_cli.cli.output.dry_run import expired_keys
from statestore_cli.cli.output.grid import wrap
from statestore_cli.cli.output.safe_text import safe_json, safe_json_text, safe_text
from statestore_cli.cli.output.writer import Writer, cell, write_json_array
from statestore_cli.errors import InterruptedByUser, StopReason
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.timestamps import expired_before, human, human_iso

if TYPE_CHECKING:  # the records only: importing their modules would load SQLAlchemy for `--help`
    from rich.text import Text

    from statestore_cli.db.layout import Layout
    from statestore_cli.ops.backend_check import CheckReport
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.cleanup import CleanReport, ExpiredRow
    from statestore_cli.ops.commands import BackendCleanup, CleanPlan, ConfigRow, DbReport
    from statestore_cli.ops.diff import Difference, DiffSummary
    from statestore_cli.ops.lifecycle import SweepReport, SweptAsset
    from statestore_cli.ops.orphans import OrphanReport
    from statestore_cli.ops.stats import StoreStats
    from statestore_cli.ops.transfer import ExportSummary, ImportSummary

_STOPPED = {
    StopReason.INTERRUPTED: "interrupted",
    StopReason.TERMINATED: "terminated by SIGTERM",
    StopReason.MAX_RUNTIME: "--max-runtime reached",
}
# The columns of each kind of plain record, printed as a header line with --header.
TASK_KEY_COLUMNS = ("store", "dag_id", "run_id", "task_id", "map_index", "key", "updated_at", "expires_at")
DAG_RUN_KEY_COLUMNS = ("store", "dag_id", "run_id", "key", "updated_at", "expires_at")
ASSET_KEY_COLUMNS = ("store", "asset_id", "name", "uri", "key", "updated_at", "expires_at")
EXPIRED_ROW_COLUMNS = ("dag_id", "run_id", "task_id", "map_index", "key", "expires_at")
CONFIG_COLUMNS = ("option", "value", "source")


def expired_row_document(row: ExpiredRow) -> dict[str, object]:
    """A dry run's row for scripts: a task key's scope and key; a dag-run key has null task_id and
    map_index and says ``"store": "dag_run"``."""
    document: dict[str, object] = {name: getattr(row, name) for name in EXPIRED_ROW_COLUMNS}
    if row.store != "task":
        document["store"] = row.store
    if row.region_id is not None:  # a key in a region (Airflow 3.4); outside any, no field
        document["region_id"] = row.region_id
    return document


def expired_row_json(row: ExpiredRow) -> str:
    if row.task_id is None or row.region_id is not None:  # a dag-run key, or a key in a region
        return safe_json(expired_row_document(row))
    # Hand-built for speed, byte for byte what safe_json() of the same dict gives (a test holds it to that).
    line = (
        f'{{"dag_id": {_quote(row.dag_id)}, "run_id": {_quote(row.run_id)}, "task_id": {_quote(row.task_id)}, '
        f'"map_index": {row.map_index}, "key": {_quote(row.key)}, "expires_at": "{row.expires_at}"}}'
    )
    return line if line.isascii() and "\x7f" not in line else safe_json_text(line)


def _seconds(duration: timedelta) -> int | float:
    """A duration for scripts: whole seconds as an integer, else a fraction."""
    seconds = duration.total_seconds()
    return int(seconds) if seconds.is_integer() else seconds


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

    # -- clean --------------------------------------------------------------------------------------
    def clean_plan(self, plan: CleanPlan, *, limit: int | None, total: int | None = None) -> int:
        """Show what a clean would delete; Ctrl-C midway ends it with ``InterruptedByUser`` saying how
        many rows were read and that nothing was deleted (a dry run never deletes)."""
        read = [0, 0]  # rows read so far and the dag-run keys among them, for that message
        try:
            if self.json:
                return self._clean_plan_json(plan, read)
            if self.mode == "plain":
                self.plain_header(EXPIRED_ROW_COLUMNS)
                for row in plan.rows:
                    read[0] += 1
                    if row.task_id is None:  # a dag-run key (Airflow 3.4)
                        read[1] += 1
                    task_id, map_index = ("", "") if row.task_id is None else (row.task_id, row.map_index)
                    self.plain_row(row.dag_id, row.run_id, task_id, map_index, row.key, human_iso(row.expires_at))
                self.line(
                    f"dry run: {expired_keys(read[0], read[1])} would be deleted "
                    f"({expired_before(plan.cutoff, plan.older_than)})"
                )
                self._spared_line(plan.spared, dry_run=True)
                return read[0]
            from statestore_cli.cli.output.dry_run import DryRunView

            view = DryRunView(self.console, limit)
            try:
                with self.progress("reading expired keys", total) as advance:
                    view.on_progress = advance
                    return view.render(plan)
            except KeyboardInterrupt:
                view.stop()
                read[:] = view.read, view.dag_run_keys
                raise
        except KeyboardInterrupt:
            sys.stdout.flush()
            raise InterruptedByUser(
                f"dry run interrupted after listing {expired_keys(read[0], read[1])}; nothing was deleted"
            ) from None

    def _clean_plan_json(self, plan: CleanPlan, read: list[int]) -> int:
        # Streamed: rows first, the count last, so memory stays flat however many rows there are.
        write = sys.stdout.write
        write(
            '{"dry_run": true, "cutoff": '
            + safe_json(iso(plan.cutoff))
            + ', "older_than_seconds": '
            + safe_json(_seconds(plan.older_than))
            + ', "rows": ['
        )
        count = 0
        lines: list[str] = []
        for row in plan.rows:
            lines.append(expired_row_json(row))
            count += 1
            read[0] = count
            if row.task_id is None:  # a dag-run key (Airflow 3.4), for the message of an interruption
                read[1] += 1
            if len(lines) == 1000:
                write(("," if count > 1000 else "") + "\n  " + ",\n  ".join(lines))
                lines.clear()
        if lines:
            write(("," if count > len(lines) else "") + "\n  " + ",\n  ".join(lines))
        spared = "" if plan.spared is None else ", " + safe_json(_spared_fields(plan.spared))[1:-1]
        write(("\n" if count else "") + '], "would_delete": ' + str(count) + spared + "}\n")
        return count

    def _spared_line(self, spared: dict[str, int] | None, *, dry_run: bool) -> None:
        from statestore_cli.cli.output.dry_run import spared_sentence

        kept = spared_sentence(spared, dry_run=dry_run)
        if kept:
            self.line(kept[0].lower() + kept[1:] if self.mode == "plain" else kept)

    def clean_skipped(self, reason: str, dry_run: bool) -> None:
        if self.json:
            self.write_json({"dry_run": dry_run, "skipped": True, "reason": reason})
        else:
            self.line(f"skipped: {reason}")

    def clean_report(self, report: CleanReport, backup: BackupFile | None = None) -> None:
        for note in report.notes:
            self.note(note.worded(FLAGS))
        doc: dict[str, Any] = {
            "dry_run": False,
            "deleted": report.deleted,
            "complete": report.stopped is None,
            "stopped": report.stopped,
            "batches": report.batches,
            "batch_size": report.batch_size,
            "cutoff": iso(report.cutoff),
            "older_than_seconds": _seconds(report.older_than),
            "elapsed_seconds": round(report.elapsed, 3),
            "rows_per_second": round(report.rows_per_second, 1),
        }
        if report.spared is not None:
            doc.update(_spared_fields(report.spared))
        if backup is not None:
            from statestore_cli.cli.backup_option import backup_document

            doc["backup"] = backup_document(backup)
        if self.json:
            self.write_json(doc)
            return
        batches = (
            f"in {report.batches:,} batch{'es' if report.batches != 1 else ''} of up to {report.batch_size:,}"
            if report.batch_size
            else "in one statement"
        )
        self.line(
            f"deleted {expired_keys(report.deleted, report.deleted_by_store.get('dag_run', 0))} {batches} "
            f"({expired_before(report.cutoff, report.older_than)}) in {report.elapsed:.1f}s, "
            f"{report.rows_per_second:,.0f} rows/s"
        )
        self._spared_line(report.spared, dry_run=False)
        if report.stopped:
            self.line(
                f"stopped early ({_STOPPED[report.stopped]}): every committed batch stays deleted; "
                "run clean again to finish"
            )
        if backup is not None:
            from statestore_cli.cli.backup_option import backup_fields, backup_sentence

            self.line(backup_sentence(backup))
            doc = {**{k: v for k, v in doc.items() if k != "backup"}, **backup_fields(backup)}
        if self.mode == "plain":  # the sentences above went to stderr; stdout gets the fields as records
            if "spared_by_state" in doc:
                doc["spared_by_state"] = [f"{state}={n}" for state, n in doc["spared_by_state"].items()]
            self.plain_fields(doc)

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
                }
            )
            return
        batches = f"{_count(summary.batches, 'batch')} of up to {summary.batch_size:,}"
        if summary.dry_run:
            lines = [
                f"dry run: {_count(summary.keys, 'key')} from {safe_text(source)} checked in {batches}; nothing written"
            ]
            verbs, made = ("to insert", "to update"), "would create"
        else:
            lines = [
                f"imported {_count(summary.keys, 'key')} from {safe_text(source)} in {batches} ({summary.elapsed:.1f}s)"
            ]
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

    # -- db and config ------------------------------------------------------------------------------
    def db_report(self, report: DbReport, *, created: bool = False) -> None:
        schema = report.schema
        problem = report.problem()  # the reason the store is not usable, in the report itself too
        doc = {
            "ok": report.usable,
            "database": report.database,
            "engine": report.engine,
            "mode": schema.mode,
            "alembic_revision": schema.alembic_revision,
            "tables_present": list(schema.present),
            "tables_missing": list(schema.missing),
            "backend": report.backend,
            "error": None if problem is None else str(problem),
        }
        if schema.mode == "airflow":  # Airflow's own database: its release and what its stores hold
            counts = report.counts
            doc["airflow_version"] = report.airflow_version
            doc["task_keys"] = None if counts is None else counts.task_keys
            doc["task_keys_expired"] = None if counts is None else counts.task_keys_expired
            doc["asset_keys"] = None if counts is None else counts.asset_keys
            doc.update(_layout_fields(report.layout))
        if created:
            doc["tables_created"] = list(report.created)
        if self.json:
            self.write_json(doc)
            return
        if self.mode == "plain":
            self.plain_fields(doc)
            return
        from rich.table import Table

        # Names never wrap; values (URLs, table lists, the reason) wrap at spaces, long words fold.
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for name, value in doc.items():
            shown = ", ".join(value) if isinstance(value, list) else value
            grid.add_row(cell(name), cell("-" if shown in (None, "") else shown))
        self.console.print(grid)

    def config(
        self, rows: list[ConfigRow], config_file: str | None, airflow_home: str, searched: str | None = None
    ) -> None:
        if self.json:
            options: dict[str, dict[str, Any]] = {}
            for row in rows:
                options.setdefault(row.section, {})[row.option] = {"value": row.value, "source": _source(row)}
            self.write_json({"config_file": config_file, "airflow_home": airflow_home, "options": options})
            return
        if self.mode == "plain":
            self.plain_header(CONFIG_COLUMNS)
            for row in rows:
                self.plain_row(f"{row.section}.{row.option}", row.value, _source(row))
            return
        found = config_file or "none found" + (f" (tried: {searched})" if searched else "")
        # Broken between words, never inside a path (the terminal would fold one mid-name at its edge).
        for head in wrap(f"config file: {found}".split(" "), self.console.width):
            self.console.print(cell(head), soft_wrap=True)
        for line in config_lines(rows, config_file, self.console.width):
            self.console.print(line, soft_wrap=True)


def config_lines(rows: list[ConfigRow], config_file: str | None, width: int) -> Iterator[Text]:
    """``config show`` on a terminal: one block per section, ``option  value  source`` on a line where
    they fit. A value or source that does not goes on a line of its own below, indented, never folded:
    a URL or an import path stays one word to read and to copy (one wider than the terminal is left for
    the terminal to wrap)."""
    from rich.text import Text

    indent, gap, under = 2, 2, 4
    name_width = max((len(row.option) for row in rows), default=0)
    value_at = indent + name_width + gap
    shown = [(row, config_value(row.value), _short_source(row, config_file)) for row in rows]
    # The source column starts after the longest short value (a number, a duration) whose line fits:
    # the same columns at any width; longer values (URLs, import paths) have their source below them.
    fitting = [
        len(value)
        for _row, value, source in shown
        if len(value) <= _SHORT_VALUE and value_at + len(value) + gap + len(source) <= width
    ]
    source_at = value_at + max(fitting, default=0) + gap
    section = None
    for row, value, source in shown:
        if row.section != section:
            yield Text("")
            section = row.section
            yield Text(f"[{safe_text(section)}]", style="bold")
        name = Text(" " * indent + safe_text(row.option).ljust(name_width + gap))
        if value_at + len(value) <= source_at - gap and source_at + len(source) <= width:
            yield name + Text(value.ljust(source_at - value_at)) + Text(source, style="dim")
            continue
        at = value_at
        if value_at + len(value) <= width:
            yield name + Text(value)
        else:
            at = under if under + len(value) <= width else 0
            yield Text(name.plain.rstrip())
            yield Text(" " * at + value)
        at = at if at and at + len(source) <= width else under
        yield Text(" " * at + source, style="dim")


_SHORT_VALUE = 24  # a value up to this long shares its line with its source


def config_value(value: object) -> str:
    """An option's value as plain and table output show it: booleans as JSON writes them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "-" if value is None or value == "" else safe_text(value)


def _short_source(row: ConfigRow, config_file: str | None) -> str:
    """The file is named above the sections: its options say "config file", not the path again."""
    return "config file" if config_file and row.source == config_file else safe_text(_source(row))


def _count(number: int, noun: str) -> str:
    """``1 key``, ``1,000 keys``, ``2 batches``."""
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{number:,} {noun if number == 1 else plural}"


def _source(row: ConfigRow) -> str:
    """Where a setting came from; a value passed on the command line is named by its flag."""
    return FLAGS.get(row.parameter, row.parameter) if row.parameter else row.source


def _layout_fields(layout: Layout | None) -> dict[str, object]:
    """What `db check` says of an Airflow database's state store tables: their layout; and for a
    revision this tool does not know, or tables it cannot use, what it found and what each command can do."""
    if layout is None:
        return {}
    fields: dict[str, object] = {"layout": layout.name, "revision_known": layout.revision_known}
    if layout.revision_known and not layout.problems:
        return fields
    fields["found_columns"] = layout.found.get("columns", [])
    fields["found_unique_keys"] = [", ".join(key) for key in layout.found.get("unique_keys", [])]
    fields["dag_run_store"] = layout.dag_run_store is not None
    fields["problems"] = [problem for _kind, problem in layout.problems]
    fields["commands_working"] = [name for name, works in layout.commands().items() if works]
    fields["commands_not_working"] = [name for name, works in layout.commands().items() if not works]
    return fields


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


def _spared_fields(spared: dict[str, int]) -> dict[str, Any]:
    """The expired task keys kept for unfinished task instances, as JSON and plain records name them."""
    from statestore_cli.ops.cleanup import by_count

    return {"spared_unfinished": sum(spared.values()), "spared_by_state": by_count(spared)}
