"""What ``statestore stats`` prints: a JSON document, tab-separated lines, or tables and a chart.

The JSON document and the plain lines are built without rich; rich is imported only inside the
functions that draw for a terminal. Stored text (dag ids, asset names and uris) goes through
``safe_text``/``safe_json`` and reaches rich only as ``Text`` objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.documents import iso
from statestore_cli.cli.safe_text import safe_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from statestore_cli.cli.writer import Writer
    from statestore_cli.ops.largest import LargeValue
    from statestore_cli.ops.stats import AssetStats, DagFigures, DagRunStats, DayCount, StoreStats, TaskStats

# How each expiry bucket is worded for people; every task key is in exactly one of them.
BUCKET_LABELS = {
    "expired": "already expired",
    "within_1_day": "in less than 1 day",
    "within_1_to_7_days": "in 1-7 days",
    "within_7_to_30_days": "in 7-30 days",
    "after_30_days": "in 30 days or more",
    "never": "never",
}
# The same buckets as rows of the dag-run keys' table (its rows count keys).
DAG_RUN_BUCKET_LABELS = {
    "expired": "already expired",
    "within_1_day": "expire in less than 1 day",
    "within_1_to_7_days": "expire in 1-7 days",
    "within_7_to_30_days": "expire in 7-30 days",
    "after_30_days": "expire in 30 days or more",
    "never": "never expire",
}
NOT_APPLICABLE = "-"  # plain output's null
# The header line of plain output (--header); the top-dag and top-asset rows carry more fields after these.
PLAIN_COLUMNS = ("section", "name", "value")


def show(out: Writer, stats: StoreStats) -> None:
    if out.json:
        out.write_json(stats_document(stats))
    elif out.mode == "plain":
        out.plain_header(PLAIN_COLUMNS)
        for cells in plain_rows(stats):
            out.plain_row(*(NOT_APPLICABLE if c is None else c for c in cells))
    else:
        draw(out.console, stats)


# -- JSON ---------------------------------------------------------------------------------------------------
def stats_document(stats: StoreStats) -> dict[str, Any]:
    """The ``-o json`` document (its keys are documented in docs/usage.md and stay stable). ``dag_run`` is
    there only where the database has a dag-run store (Airflow 3.4), null when the filter leaves it out."""
    filt = stats.filter
    given = {name: value for name, value in filt._asdict().items() if value is not None}
    document: dict[str, Any] = {
        "now": iso(stats.now),
        "filter": given,
        "max_value_storage_bytes": stats.max_value_storage_bytes,
        "task": None if stats.task is None else _task_document(stats.task),
    }
    if stats.has_dag_run_store:
        document["dag_run"] = None if stats.dag_run is None else _dag_run_document(stats.dag_run)
    document["asset"] = None if stats.asset is None else _asset_document(stats.asset)
    if stats.largest is not None:  # only with --largest N: the document is otherwise as it always was
        document["largest"] = [largest_document(value) for value in stats.largest]
    return document


# The scope fields of each store's values, in the order plain lines and the JSON objects give them.
LARGEST_SCOPES = {
    "task": ("dag_id", "run_id", "task_id", "map_index"),
    "dag_run": ("dag_id", "run_id"),
    "asset": ("asset_id", "name", "uri"),
}


def largest_document(value: LargeValue) -> dict[str, Any]:
    """One of the largest values for scripts: its store, scope, key and size (``region_id`` only for a task key
    in a region, as ``list`` gives it)."""
    document: dict[str, Any] = {"store": value.store}
    document.update({name: getattr(value, name) for name in LARGEST_SCOPES[value.store]})
    if value.region_id is not None:
        document["region_id"] = str(value.region_id)
    document["key"] = value.key
    document["value_bytes"] = value.value_bytes
    return document


def _dag(dag: DagFigures) -> dict[str, Any]:
    return {"dag_id": dag.dag_id, "rows": dag.rows, "value_bytes": dag.value_bytes}


def _task_document(task: TaskStats) -> dict[str, Any]:
    return {
        "rows": task.rows,
        "value_bytes": task.value_bytes,
        "dags": task.dags,
        "oldest_updated_at": iso(task.oldest_updated_at),
        "newest_updated_at": iso(task.newest_updated_at),
        "over_max_value_storage_bytes": task.over_limit,
        "expiry": dict(task.expiry),
        "expiring_per_day": [{"date": d.day.isoformat(), "rows": d.rows} for d in task.expiring_per_day],
        "top_dags_by_rows": [_dag(d) for d in task.top_dags_by_rows],
        "top_dags_by_bytes": [_dag(d) for d in task.top_dags_by_bytes],
    }


def _dag_run_document(runs: DagRunStats) -> dict[str, Any]:
    return {
        "rows": runs.rows,
        "value_bytes": runs.value_bytes,
        "dags": runs.dags,
        "runs": runs.runs,
        "oldest_updated_at": iso(runs.oldest_updated_at),
        "newest_updated_at": iso(runs.newest_updated_at),
        "over_max_value_storage_bytes": runs.over_limit,
        "expiry": dict(runs.expiry),
    }


def _asset_document(assets: AssetStats) -> dict[str, Any]:
    return {
        "rows": assets.rows,
        "value_bytes": assets.value_bytes,
        "assets": assets.assets,
        "inactive_assets": assets.inactive_assets,
        "inactive_asset_rows": assets.inactive_rows,
        "oldest_updated_at": iso(assets.oldest_updated_at),
        "newest_updated_at": iso(assets.newest_updated_at),
        "over_max_value_storage_bytes": assets.over_limit,
        "top_assets": [
            {
                "asset_id": a.asset_id,
                "name": a.name,
                "uri": a.uri,
                "rows": a.rows,
                "value_bytes": a.value_bytes,
                "active": a.active,
            }
            for a in assets.top_assets
        ],
    }


# -- plain --------------------------------------------------------------------------------------------------
def plain_rows(stats: StoreStats) -> Iterator[tuple[object, ...]]:
    """``section, name, value[, more...]`` per line; None is written as ``-`` (not applicable)."""
    yield ("stats", "now", iso(stats.now))
    yield ("stats", "max_value_storage_bytes", stats.max_value_storage_bytes)
    task = stats.task
    if task is not None:
        yield ("task", "rows", task.rows)
        yield ("task", "value_bytes", task.value_bytes)
        yield ("task", "dags", task.dags)
        yield ("task", "oldest_updated_at", iso(task.oldest_updated_at))
        yield ("task", "newest_updated_at", iso(task.newest_updated_at))
        yield ("task", "over_max_value_storage_bytes", task.over_limit)
        for bucket, rows in task.expiry.items():
            yield ("task_expiry", bucket, rows)
        for day in task.expiring_per_day:
            yield ("task_expiring_per_day", day.day.isoformat(), day.rows)
        for dag in task.top_dags_by_rows:
            yield ("task_top_dag_by_rows", dag.dag_id, dag.rows, dag.value_bytes)
        for dag in task.top_dags_by_bytes:
            yield ("task_top_dag_by_bytes", dag.dag_id, dag.value_bytes, dag.rows)
    runs = stats.dag_run
    if runs is not None:
        yield ("dag_run", "rows", runs.rows)
        yield ("dag_run", "value_bytes", runs.value_bytes)
        yield ("dag_run", "dags", runs.dags)
        yield ("dag_run", "runs", runs.runs)
        yield ("dag_run", "oldest_updated_at", iso(runs.oldest_updated_at))
        yield ("dag_run", "newest_updated_at", iso(runs.newest_updated_at))
        yield ("dag_run", "over_max_value_storage_bytes", runs.over_limit)
        for bucket, rows in runs.expiry.items():
            yield ("dag_run_expiry", bucket, rows)
    assets = stats.asset
    if assets is not None:
        yield ("asset", "rows", assets.rows)
        yield ("asset", "value_bytes", assets.value_bytes)
        yield ("asset", "assets", assets.assets)
        yield ("asset", "inactive_assets", assets.inactive_assets)
        yield ("asset", "inactive_asset_rows", assets.inactive_rows)
        yield ("asset", "oldest_updated_at", iso(assets.oldest_updated_at))
        yield ("asset", "newest_updated_at", iso(assets.newest_updated_at))
        yield ("asset", "over_max_value_storage_bytes", assets.over_limit)
        for a in assets.top_assets:
            yield ("asset_top", a.asset_id, a.rows, a.value_bytes, "active" if a.active else "inactive", a.name, a.uri)
    for value in stats.largest or ():
        scope = (getattr(value, name) for name in LARGEST_SCOPES[value.store])
        yield ("largest", value.store, value.value_bytes, *scope, value.key)


# -- sizes, names and the chart, as text ------------------------------------------------------------------
def size(nbytes: int) -> str:
    """Bytes the way people read them: 750 B, 1.2 KiB, 48.0 MiB."""
    if nbytes < 1024:
        return f"{nbytes} B"
    value = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def count(n: int) -> str:
    return f"{n:,}"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def compact(n: int) -> str:
    """A count in at most 6 characters, for the chart's axis."""
    if n < 100_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.0f}k"
    return f"{n / 1_000_000:.1f}M"


def folded(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` cells, nothing cut (the tables' rule, ``grid.fold``)."""
    from statestore_cli.cli.grid import fold

    return "\n".join(fold(text, width))


_EIGHTHS = " ▁▂▃▄▅▆▇█"
CHART_HEIGHT = 8  # text lines of bars: 64 levels


def expiry_chart(days: list[DayCount], width: int) -> list[str]:
    """A column chart of task keys expiring per day that fits ``width`` columns: one column per day,
    a y axis with the busiest day's count, and the date under every seventh day (MM-DD, UTC)."""
    peak = max((d.rows for d in days), default=0)
    top_label = compact(peak)
    gutter = max(len(top_label), 1)
    step = 3 if gutter + 2 + 3 * len(days) <= width else 2  # each day: bar, then a gap
    bar = step - 1
    levels = [0 if d.rows == 0 else max(1, round(d.rows / peak * CHART_HEIGHT * 8)) for d in days]
    lines = []
    for row in range(CHART_HEIGHT - 1, -1, -1):
        label = top_label if row == CHART_HEIGHT - 1 else ""
        cells = "".join(_EIGHTHS[min(8, max(0, level - row * 8))] * bar + " " for level in levels)
        lines.append(f"{label:>{gutter}} {'┤' if label else '│'}{cells}".rstrip())
    ticks = "".join(("┬" if i % 7 == 0 else "─") + "─" * bar for i in range(len(days)))
    lines.append(f"{'0':>{gutter}} └{ticks}")
    dates = ""
    for i, day in enumerate(days):
        if i % 7 == 0:
            dates = dates.ljust(i * step) + day.day.strftime("%m-%d")
    lines.append(" " * (gutter + 2) + dates)
    return lines


# -- the terminal view ------------------------------------------------------------------------------------
def draw(console: Console, stats: StoreStats) -> None:
    """Tables and the chart, a blank line between sections, every line within ``console.width`` (80 and up)."""
    from rich.text import Text

    from statestore_cli.model.timestamps import human

    width = min(console.width, 120)
    console.print(Text(f"state store statistics as of {human(stats.now)}"), soft_wrap=True)
    if stats.task is None and stats.asset is None and stats.dag_run is None:
        console.print(Text("no store selected: task options select task keys only, asset options asset keys only"))
        return
    if stats.task is not None or stats.asset is not None:
        console.print(_overview(stats))
    task = stats.task
    if task is not None and task.rows:
        console.print()
        console.print(_expiry_table(task))
        if task.expiring_per_day:
            console.print()
            print_chart(console, task.expiring_per_day, width)
        console.print()
        _print_dags(console, task, width)
    if stats.dag_run is not None:
        console.print()
        _print_dag_runs(console, stats.dag_run, stats.max_value_storage_bytes)
    assets = stats.asset
    if assets is not None and assets.top_assets:
        console.print()
        console.print(_asset_table(assets, width))
        if len(assets.top_assets) < assets.assets:
            shown = len(assets.top_assets)
            console.print(Text(f"{shown} of {count(assets.assets)} assets with keys shown, most keys first"))
        if assets.inactive_assets:
            keys, inactive = assets.inactive_rows, assets.inactive_assets
            console.print(
                Text(
                    f"{_plural(keys, 'asset key')} {'belongs' if keys == 1 else 'belong'} to "
                    f"{_plural(inactive, 'inactive asset')} (no dag uses {'it' if inactive == 1 else 'them'} any more)"
                ),
                soft_wrap=True,
            )
    if stats.largest is not None:
        console.print()
        _print_largest(console, stats.largest, stats.max_value_storage_bytes)


def _table(title: str) -> Table:
    from rich.table import Table
    from rich.text import Text

    return Table(title=Text(title), title_justify="left")


def _overview(stats: StoreStats) -> Table:
    from rich.text import Text

    limit = stats.max_value_storage_bytes
    table = _table("keys per store")
    table.add_column("", no_wrap=True)
    stores = [(name, figures) for name, figures in (("task", stats.task), ("asset", stats.asset)) if figures]
    for name, _ in stores:
        table.add_column(f"{name} keys", justify="right", no_wrap=True)

    def row(label: str, *cells: str) -> None:
        table.add_row(Text(label), *(Text(c) for c in cells))

    row("keys", *(count(f.rows) for _, f in stores))
    row(" / ".join("dags" if name == "task" else "assets" for name, _ in stores), *(_holders(f) for _, f in stores))
    row("value size", *(size(f.value_bytes) for _, f in stores))
    row("oldest updated_at (UTC)", *(_moment(f.oldest_updated_at) for _, f in stores))
    row("newest updated_at (UTC)", *(_moment(f.newest_updated_at) for _, f in stores))
    if limit:
        row(f"values over {count(limit)} B", *(count(f.over_limit or 0) for _, f in stores))
    else:
        row("values over the limit", *("no limit set" for _ in stores))
    return table


def _holders(figures: TaskStats | AssetStats) -> str:
    from statestore_cli.ops.stats import AssetStats

    if isinstance(figures, AssetStats):
        inactive = f" ({count(figures.inactive_assets)} inactive)" if figures.inactive_assets else ""
        return f"{count(figures.assets)}{inactive}"
    return count(figures.dags)


def _moment(moment: Any) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _expiry_table(task: TaskStats) -> Table:
    from rich.text import Text

    table = _table("task keys by expiry (each key counted once)")
    table.add_column("expires", no_wrap=True)
    table.add_column("keys", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, width=20)
    for bucket, rows in task.expiry.items():
        share = rows / task.rows if task.rows else 0.0
        blocks = round(share * 20 * 8)
        bar = "█" * (blocks // 8) + (_EIGHTHS[blocks % 8] if blocks % 8 else "")
        if rows and not bar:
            bar = _EIGHTHS[1]
        table.add_row(Text(BUCKET_LABELS[bucket]), Text(count(rows)), Text(f"{share:.0%}"), Text(bar))
    return table


def _print_dag_runs(console: Console, runs: DagRunStats, limit: int) -> None:
    """The dag-run keys (Airflow 3.4's dag_run_state_store): their figures, then how many in each expiry bucket."""
    from rich.text import Text

    if not runs.rows:
        console.print(Text("dag-run keys: none"))
        return
    table = _table("dag-run keys (Airflow 3.4's dag_run_state_store)")
    table.show_header = False
    table.add_column("", no_wrap=True)
    table.add_column("", justify="right", no_wrap=True)

    def row(label: str, cell: str) -> None:
        table.add_row(Text(label), Text(cell))

    row("keys", count(runs.rows))
    row("dags / runs", f"{count(runs.dags)} / {count(runs.runs)}")
    row("value size", size(runs.value_bytes))
    row("oldest updated_at (UTC)", _moment(runs.oldest_updated_at))
    row("newest updated_at (UTC)", _moment(runs.newest_updated_at))
    if limit:
        row(f"values over {count(limit)} B", count(runs.over_limit or 0))
    else:
        row("values over the limit", "no limit set")
    table.add_section()
    for bucket, rows in runs.expiry.items():
        row(DAG_RUN_BUCKET_LABELS[bucket], count(rows))
    console.print(table)


def print_chart(console: Console, days: list[DayCount], width: int) -> None:
    from rich.text import Text

    total = sum(d.rows for d in days)
    weeks = len(days) // 7
    span = f"the next {_plural(weeks, 'week')}" if len(days) % 7 == 0 else f"the next {_plural(len(days), 'day')}"
    console.print(Text(f"task keys expiring per day, {span} (UTC days; today from now on)"), soft_wrap=True)
    if total == 0:
        console.print(Text(f"  none expire in {span}"))
        return
    for line in expiry_chart(days, width):
        console.print(Text(line), soft_wrap=True)
    busiest = max(days, key=lambda d: d.rows)
    console.print(
        Text(
            f"{_plural(total, 'key')} {'expires' if total == 1 else 'expire'} in {span}; "
            f"most on {busiest.day.isoformat()} ({count(busiest.rows)})"
        ),
        soft_wrap=True,
    )


def _print_dags(console: Console, task: TaskStats, width: int) -> None:
    by_rows, by_bytes = task.top_dags_by_rows, task.top_dags_by_bytes
    if not by_rows:
        return
    more = f" (top {len(by_rows)} of {count(task.dags)})" if len(by_rows) < task.dags else ""
    if [d.dag_id for d in by_rows] == [d.dag_id for d in by_bytes]:
        console.print(_dag_table(f"dags by keys and by value size{more}", by_rows, width))
        return
    console.print(_dag_table(f"dags with the most keys{more}", by_rows, width))
    console.print()
    console.print(_dag_table(f"dags with the largest values{more}", by_bytes, width))


def _dag_table(title: str, dags: list[DagFigures], width: int) -> Table:
    from rich.text import Text

    keys = [count(d.rows) for d in dags]
    sizes = [size(d.value_bytes) for d in dags]
    fixed = max(4, *map(len, keys)) + max(10, *map(len, sizes)) + 3 * 3 + 1  # two columns, padding, borders
    names = [safe_text(d.dag_id) for d in dags]
    room = max(8, width - fixed)
    table = _table(title)
    table.add_column("dag_id", no_wrap=True)
    table.add_column("keys", justify="right", no_wrap=True)
    table.add_column("value size", justify="right", no_wrap=True)
    for name, k, s in zip(names, keys, sizes, strict=True):
        table.add_row(Text(folded(name, room)), Text(k), Text(s))
    return table


def _asset_table(assets: AssetStats, width: int) -> Table:
    from rich.cells import cell_len
    from rich.text import Text

    shown = assets.top_assets
    keys = [count(a.rows) for a in shown]
    fixed = max(4, *map(len, keys)) + 6 + 4 * 3 + 1  # keys, active, padding, borders
    room = max(16, width - fixed)
    names = [safe_text(a.name) for a in shown]
    uris = [safe_text(a.uri) for a in shown]
    widest_name, widest_uri = max(map(cell_len, names)), max(map(cell_len, uris))
    uri_room = min(widest_uri, max(16, room - widest_name))  # names whole when uris keep 16 cells, else both fold
    name_room = max(8, room - uri_room)
    table = _table("asset keys per asset")
    table.add_column("name", no_wrap=True)
    table.add_column("uri", no_wrap=True)
    table.add_column("keys", justify="right", no_wrap=True)
    table.add_column("active", no_wrap=True)
    for a, name, uri, k in zip(shown, names, uris, keys, strict=True):
        table.add_row(
            Text(folded(name, name_room)),
            Text(folded(uri, uri_room)),
            Text(k),
            Text("yes" if a.active else "no"),
        )
    return table


def _print_largest(console: Console, values: list[LargeValue], limit: int) -> None:
    """The largest values, largest first: each key's scope on a line of its own (a store's label and its ids,
    kept whole: the tables' rule, ``cli.grid``), its keys indented below it with their sizes in bytes."""
    from statestore_cli.cli.grid import GAP, Column, Grid, Out, cell_width, fit, natural_widths, wrap

    limit_text = f"max_value_storage_bytes {count(limit)}" if limit else "no size limit set"
    title = f"the {_plural(len(values), 'largest value')}, bytes as stored ({limit_text})"
    console.file.flush()  # what rich printed comes first
    out = Out(console)
    if not values:
        out.message(f"{title}: no keys".split(" "))
        out.flush()
        return
    for line in wrap(title.split(" "), out.width):
        out.add(out.ink(line, "bold"))
    columns = [Column("key", long=True, indent=2), Column("bytes", right=True)]
    over = [bool(limit) and v.value_bytes > limit for v in values]
    # A value over the limit is marked after its size, in the same column: a column of its own would leave a
    # 60-character key too little room at 80 columns.
    width = 5 if any(over) else 0

    def mark(is_over: bool) -> str:
        return " over" if is_over else " " * width

    rows = [(safe_text(v.key), count(v.value_bytes) + mark(o)) for v, o in zip(values, over, strict=True)]
    scopes = [_scope_parts(v) for v in values]
    span = max(cell_width(GAP.join(parts)) for parts in scopes)  # the table widens for them, room allowing
    grid = Grid(columns, fit(columns, natural_widths(columns, rows), out.width, span), out.ink)
    for line in grid.head():
        out.add(line)
    shown = None
    for parts, row in zip(scopes, rows, strict=True):
        if parts != shown:
            shown = parts
            for line in grid.span(parts):
                out.add(line)
        for line in grid.row(row):
            out.add(line)
    out.add(grid.bottom())
    out.flush()


def _scope_parts(value: LargeValue) -> tuple[str, ...]:
    """Whose key it is, as the parts of a group line: the store, then each scope field and its value."""
    if value.store == "asset":
        return ("asset", f"asset_id {value.asset_id}", f"name {safe_text(value.name)}", f"uri {safe_text(value.uri)}")
    parts = [f"dag_id {safe_text(value.dag_id)}", f"run_id {safe_text(value.run_id)}"]
    if value.store == "dag_run":
        return ("dag run", *parts)
    region = [f"region {value.region_id}"] if value.region_id is not None else []
    return ("task", *parts, f"task_id {safe_text(value.task_id)}", *region, f"map_index {value.map_index}")
