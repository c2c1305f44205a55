"""What ``backend check``, ``orphans`` and ``clean --backend-cleanup`` print: JSON, tab-separated
lines, or tables. rich is imported only to draw a table; stored text goes through ``safe_text``."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.output.documents import iso
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.model.timestamps import human

# The columns of the plain records, printed as a header line with --header.
ORPHAN_COLUMNS = ("ref", "written_at", "age_seconds", "status")
CHECK_COLUMNS = ("role", "backend", "check", "status", "detail")

if TYPE_CHECKING:
    from statestore_cli.cli.output.writer import Writer
    from statestore_cli.ops.backend_check import CheckReport
    from statestore_cli.ops.commands import BackendCleanup
    from statestore_cli.ops.orphans import Orphan, OrphanReport


# -- clean --backend-cleanup -------------------------------------------------------------------------------
def jsonable(result: Any) -> Any:
    """What a backend's cleanup() returned, as JSON takes it (else its text)."""
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError):
        return str(result)
    return result


def show_backend_cleanup(out: Writer, done: BackendCleanup) -> None:
    result = jsonable(done.result)
    doc = {
        "dry_run": False,
        "skipped": False,
        "backend_cleanup": True,
        "backend": done.backend,
        "result": result,
        "elapsed_seconds": round(done.elapsed, 3),
    }
    if out.json:
        out.write_json(doc)
        return
    returned = "nothing" if result is None else json.dumps(result, ensure_ascii=False)
    out.line(f"ran {done.backend}.cleanup() in {done.elapsed:.1f}s; it returned {returned}")
    if out.mode == "plain":  # the sentence went to stderr; stdout gets the fields as records
        out.plain_fields({**doc, "result": None if result is None else json.dumps(result, ensure_ascii=False)})


# -- orphans -------------------------------------------------------------------------------------------------
def age_text(age: timedelta | None) -> str:
    """An age as people read it: the two largest units (3d 4h, 2h 5m, 40s)."""
    if age is None:
        return "unknown"
    seconds = int(age.total_seconds())
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2])


def _status(orphan: Orphan) -> str:
    if orphan.deleted:
        return "deleted"
    if orphan.error:
        return f"delete failed: {orphan.error}"
    return "in grace window" if orphan.in_grace else "orphan"


def _summary(report: OrphanReport) -> str:
    count = len(report.orphans)
    text = f"{count:,} orphaned object{'s' if count != 1 else ''} of {report.listed:,} listed"
    if report.older_than is not None:
        text += f" (at least {age_text(report.older_than)} old)"
    young = sum(o.in_grace and not o.deleted for o in report.orphans)
    if young:
        text += f"; {young:,} younger than the {age_text(report.grace)} grace window, kept"
    if report.deleted or report.failed:
        text += f"; {report.deleted:,} deleted"
    if report.failed:
        text += f", {report.failed:,} failed"
    return text


def orphans_question(plan: OrphanReport) -> str:
    """What ``orphans --delete`` asks: "Delete 3 orphaned objects (at least 7d old) of [workers]
    state_store_backend BACKEND?"."""
    count = plan.deletable
    objects = f"{count:,} orphaned object{'s' if count != 1 else ''}"
    old = "" if plan.older_than is None else f" (at least {age_text(plan.older_than)} old)"
    return f"Delete {objects}{old} of [workers] state_store_backend {safe_text(plan.backend)}?"


def show_orphans(out: Writer, report: OrphanReport) -> None:
    if out.json:
        out.write_json(
            {
                "backend": report.backend,
                "listed": report.listed,
                "grace_seconds": report.grace.total_seconds(),
                "older_than_seconds": None if report.older_than is None else report.older_than.total_seconds(),
                "orphans": [
                    {
                        "ref": o.ref,
                        "modified_at": iso(o.modified_at),
                        "age_seconds": None if o.age is None else round(o.age.total_seconds(), 3),
                        "in_grace": o.in_grace,
                        "deleted": o.deleted,
                        "error": o.error,
                    }
                    for o in report.orphans
                ],
                "count": len(report.orphans),
                "deleted": report.deleted,
                "failed": report.failed,
            }
        )
        return
    if out.mode == "plain":
        out.plain_header(ORPHAN_COLUMNS)
        for o in report.orphans:
            age = "-" if o.age is None else int(o.age.total_seconds())
            out.plain_row(o.ref, human(o.modified_at, "-"), age, _status(o))
        out.line(_summary(report))
        return
    from rich.table import Table

    from statestore_cli.cli.output.writer import cell

    if report.orphans:
        table = Table()
        table.add_column("reference", overflow="fold")
        table.add_column("written", no_wrap=True)
        table.add_column("age", no_wrap=True, justify="right")
        table.add_column("status", overflow="fold")
        for o in report.orphans:
            table.add_row(cell(o.ref), cell(human(o.modified_at, "-")), cell(age_text(o.age)), cell(_status(o)))
        out.console.print(table)
    out.line(_summary(report))


# -- backend check -------------------------------------------------------------------------------------------
def show_backend_check(out: Writer, report: CheckReport) -> None:
    if out.json:
        out.write_json(
            {
                "ok": report.passed,
                "checks": [
                    {"role": r.role, "backend": r.backend, "check": r.check, "status": r.status, "detail": r.detail}
                    for r in report.results
                ],
            }
        )
        return
    failed = sum(r.status != "pass" for r in report.results)
    summary = (
        f"all {len(report.results)} checks passed"
        if not failed
        else f"{failed} of {len(report.results)} checks did not pass"
    )
    if out.mode == "plain":
        out.plain_header(CHECK_COLUMNS)
        for r in report.results:
            out.plain_row(r.role, r.backend, r.check, r.status, r.detail)
        out.line(summary)
        return
    from rich.table import Table

    from statestore_cli.cli.output.writer import cell

    for backend in dict.fromkeys((r.role, r.backend) for r in report.results):
        table = Table(title=cell(f"{backend[0]} = {backend[1]}"), title_justify="left")
        table.add_column("check", no_wrap=True)
        table.add_column("result", no_wrap=True)
        table.add_column("detail", overflow="fold")
        for r in report.results:
            if (r.role, r.backend) == backend:
                table.add_row(cell(r.check), cell(r.status.upper()), cell(r.detail))
        out.console.print(table)
    out.line(summary)
