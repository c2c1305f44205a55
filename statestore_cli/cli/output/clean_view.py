"""What ``clean`` prints: a dry run's expired keys (a table on a terminal, plain records, or JSON streamed
row by row), a skipped clean, and a clean's report as a sentence, plain fields or one JSON document.

``render.Output`` hands the clean's results here; everything takes the ``Writer`` it was given, so this
module needs nothing of ``render``."""

from __future__ import annotations

import sys
from datetime import timedelta
from json.encoder import encode_basestring as _quote  # the C encoder json.dumps uses
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.failure import FLAGS
from statestore_cli.cli.output.clean_sentences import expired_keys, plural, spared_sentence
from statestore_cli.cli.output.documents import iso
from statestore_cli.cli.output.safe_text import safe_json, safe_json_text
from statestore_cli.errors import InterruptedByUser, StopReason
from statestore_cli.model.timestamps import expired_before, human_iso

if TYPE_CHECKING:  # the records only: importing their modules would load SQLAlchemy
    from statestore_cli.cli.output.writer import Writer
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.cleanup import CleanReport, ExpiredRow
    from statestore_cli.ops.commands import CleanPlan


_STOPPED = {
    StopReason.INTERRUPTED: "interrupted",
    StopReason.TERMINATED: "terminated by SIGTERM",
    StopReason.MAX_RUNTIME: "--max-runtime reached",
}
# A dry run's plain record, printed as a header line with --header.
EXPIRED_ROW_COLUMNS = ("dag_id", "run_id", "task_id", "map_index", "key", "expires_at")


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


def show_plan(out: Writer, plan: CleanPlan, *, limit: int | None, total: int | None = None) -> int:
    """Show what a clean would delete; Ctrl-C midway ends it with ``InterruptedByUser`` saying how
    many rows were read and that nothing was deleted (a dry run never deletes)."""
    read = [0, 0]  # rows read so far and the dag-run keys among them, for that message
    try:
        if out.json:
            return _plan_json(plan, read)
        if out.mode == "plain":
            out.plain_header(EXPIRED_ROW_COLUMNS)
            for row in plan.rows:
                read[0] += 1
                if row.task_id is None:  # a dag-run key (Airflow 3.4)
                    read[1] += 1
                task_id, map_index = ("", "") if row.task_id is None else (row.task_id, row.map_index)
                out.plain_row(row.dag_id, row.run_id, task_id, map_index, row.key, human_iso(row.expires_at))
            out.line(
                f"dry run: {expired_keys(read[0], read[1])} would be deleted "
                f"({expired_before(plan.cutoff, plan.older_than)})"
            )
            _spared_line(out, plan.spared, dry_run=True)
            return read[0]
        from statestore_cli.cli.output.dry_run import DryRunView

        view = DryRunView(out.console, limit)
        try:
            with out.progress("reading expired keys", total) as advance:
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


def _plan_json(plan: CleanPlan, read: list[int]) -> int:
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


def _spared_line(out: Writer, spared: dict[str, int] | None, *, dry_run: bool) -> None:
    kept = spared_sentence(spared, dry_run=dry_run)
    if kept:
        out.line(kept[0].lower() + kept[1:] if out.mode == "plain" else kept)


def show_skipped(out: Writer, reason: str, dry_run: bool) -> None:
    if out.json:
        out.write_json({"dry_run": dry_run, "skipped": True, "reason": reason})
    else:
        out.line(f"skipped: {reason}")


def show_report(out: Writer, report: CleanReport, backup: BackupFile | None = None) -> None:
    for note in report.notes:
        out.note(note.worded(FLAGS))
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
    if report.api_requests is not None:
        doc["api_requests"] = report.api_requests
    if backup is not None:
        from statestore_cli.cli.backup_option import backup_document

        doc["backup"] = backup_document(backup)
    if out.json:
        out.write_json(doc)
        return
    batches = (
        f"in {report.batches:,} batch{'es' if report.batches != 1 else ''} of up to {report.batch_size:,}"
        if report.batch_size
        else "in one statement"
    )
    if report.api_requests is not None:
        batches = f"through the REST API ({plural(report.api_requests, 'request')})"
    out.line(
        f"deleted {expired_keys(report.deleted, report.deleted_by_store.get('dag_run', 0))} {batches} "
        f"({expired_before(report.cutoff, report.older_than)}) in {report.elapsed:.1f}s, "
        f"{report.rows_per_second:,.0f} rows/s"
    )
    _spared_line(out, report.spared, dry_run=False)
    if report.stopped:
        out.line(
            f"stopped early ({_STOPPED[report.stopped]}): every committed batch stays deleted; "
            "run clean again to finish"
        )
    if backup is not None:
        from statestore_cli.cli.backup_option import backup_fields, backup_sentence

        out.line(backup_sentence(backup))
        doc = {**{k: v for k, v in doc.items() if k != "backup"}, **backup_fields(backup)}
    if out.mode == "plain":  # the sentences above went to stderr; stdout gets the fields as records
        if "spared_by_state" in doc:
            doc["spared_by_state"] = [f"{state}={n}" for state, n in doc["spared_by_state"].items()]
        out.plain_fields(doc)


def _spared_fields(spared: dict[str, int]) -> dict[str, Any]:
    """The expired task keys kept for unfinished task instances, as JSON and plain records name them."""
    from statestore_cli.ops.cleanup import by_count

    return {"spared_unfinished": sum(spared.values()), "spared_by_state": by_count(spared)}
