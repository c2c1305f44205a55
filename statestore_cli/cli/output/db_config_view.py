"""What ``db init``, ``db check`` and ``config show`` print: the database report as fields (a grid on a
terminal, plain records, one JSON document), and the effective configuration, a block per section on a
terminal with each value's source beside it or below it.

``render.Output`` hands these results here; everything takes the ``Writer`` it was given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.failure import FLAGS
from statestore_cli.cli.output.grid import wrap
from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.cli.output.writer import cell

if TYPE_CHECKING:  # the records only: importing their modules would load SQLAlchemy for `--help`
    from rich.text import Text

    from statestore_cli.cli.output.writer import Writer
    from statestore_cli.db.layout import Layout
    from statestore_cli.ops.api_check import ApiReport
    from statestore_cli.ops.commands import ConfigRow, DbReport

# The columns of `config show`'s plain records, printed as a header line with --header.
CONFIG_COLUMNS = ("option", "value", "source")


def show_db_report(out: Writer, report: DbReport, *, created: bool = False) -> None:
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
    _fields(out, doc)


def show_api_report(out: Writer, report: ApiReport) -> None:
    """``db check`` through the REST API: what it asked the api-server, as the database report's fields."""
    problem = report.problem()
    doc = {
        "ok": problem is None,
        "api": report.api,
        "mode": "rest-api",
        "airflow_version": report.airflow_version,
        "metadatabase": report.metadatabase,
        "credentials": report.credentials,
        "dags": report.dags,
        "error": None if problem is None else str(problem),
    }
    _fields(out, doc)


def _fields(out: Writer, doc: dict[str, Any]) -> None:
    """One field per line: a grid on a terminal, plain records, or the JSON document."""
    if out.json:
        out.write_json(doc)
        return
    if out.mode == "plain":
        out.plain_fields(doc)
        return
    from rich.table import Table

    # Names never wrap; values (URLs, table lists, the reason) wrap at spaces, long words fold.
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in doc.items():
        shown = ", ".join(value) if isinstance(value, list) else value
        grid.add_row(cell(name), cell("-" if shown in (None, "") else shown))
    out.console.print(grid)


def show_config(
    out: Writer, rows: list[ConfigRow], config_file: str | None, airflow_home: str, searched: str | None = None
) -> None:
    if out.json:
        options: dict[str, dict[str, Any]] = {}
        for row in rows:
            options.setdefault(row.section, {})[row.option] = {"value": row.value, "source": _source(row)}
        out.write_json({"config_file": config_file, "airflow_home": airflow_home, "options": options})
        return
    if out.mode == "plain":
        out.plain_header(CONFIG_COLUMNS)
        for row in rows:
            out.plain_row(f"{row.section}.{row.option}", row.value, _source(row))
        return
    found = config_file or "none found" + (f" (tried: {searched})" if searched else "")
    # Broken between words, never inside a path (the terminal would fold one mid-name at its edge).
    for head in wrap(f"config file: {found}".split(" "), out.console.width):
        out.console.print(cell(head), soft_wrap=True)
    for line in config_lines(rows, config_file, out.console.width):
        out.console.print(line, soft_wrap=True)


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
