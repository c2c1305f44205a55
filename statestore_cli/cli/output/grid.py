"""Tables drawn line by line at the terminal's width, so they can stream: the look of rich's default
table (heavy head, light body), without holding every row or measuring each cell twice.

A table is laid out once, from the first rows it is given (``TableStream``); every row after that is
drawn at once, with the same column widths.

The rule for long values, in every table (``list``, the dry runs, ``stats``): nothing is ever cut. A key,
an id (dag, run, task, asset) or a uri is what people copy into ``get`` and ``delete``, so it is shown
whole. Other things give way first: the scope columns move onto a line of their own above their keys
(a group line), and a key too wide for its column gets a line of its own across the table, its other
cells on the line below. Only text wider than the whole table wraps: it continues on the next line at
the table's edge (``fold``), with no ellipsis and no character lost. Timestamps and numbers are never
broken.

Everything here works on text that already went through ``safe_text``: no control characters. rich is
imported only inside the functions that need it (cell widths of non-ASCII text, style codes).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

CHUNK = 200  # rows a table is laid out from; then drawn and flushed in runs of this many lines
GAP = "  "  # between the parts of a heading or a group line


def cell_width(text: str) -> int:
    """Terminal cells ``text`` takes (wide characters count two)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def fold(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, every character kept: broken between words when each
    word fits a line, else at the width (a uri or a key has no spaces)."""
    if cell_width(text) <= width or width < 1:
        return [text]
    words = text.split(" ")
    if " " in text and all(cell_width(word) <= width for word in words):
        return wrap(words, width)
    lines, line, used = [], "", 0
    for char in text:
        size = cell_width(char)
        if used + size > width and line:
            lines.append(line)
            line, used = "", 0
        line += char
        used += size
    return [*lines, line]


def pad(text: str, width: int, right: bool = False) -> str:
    fill = " " * (width - cell_width(text))
    return fill + text if right else text + fill


def pack(parts: Sequence[str], width: int) -> list[str]:
    """``parts`` on as few lines of ``width`` cells as they fit on whole, in order; a part too wide for
    a line of its own continues on the next (``fold``)."""
    lines: list[str] = []
    for part in parts:
        if lines and cell_width(lines[-1]) + len(GAP) + cell_width(part) <= width:
            lines[-1] += GAP + part
        else:
            lines.extend(fold(part, width))
    return lines


def wrap(units: Sequence[str], width: int) -> list[str]:
    """A message in lines of at most ``width`` cells, broken only between ``units`` (words, or a
    timestamp kept whole); a unit wider than a line stands alone."""
    lines: list[str] = []
    for unit in units:
        if lines and cell_width(lines[-1]) + 1 + cell_width(unit) <= width:
            lines[-1] += " " + unit
        else:
            lines.append(unit)
    return lines


class Ink:
    """Styled text as the console would write it: plain off a terminal or with NO_COLOR (no colour system)."""

    def __init__(self, console: Console) -> None:
        self.system = console.color_system
        self._codes: dict[str, tuple[str, str]] = {}

    def __call__(self, text: str, style: str) -> str:
        if self.system is None:
            return text
        if style not in self._codes:
            from rich.console import COLOR_SYSTEMS
            from rich.style import Style

            before, _, after = Style.parse(style).render("|", color_system=COLOR_SYSTEMS[self.system]).partition("|")
            self._codes[style] = (before, after)
        before, after = self._codes[style]
        return before + text + after


class Out:
    """Lines on their way to stdout, written in runs. Through ``sys.stdout``, so a live progress bar
    (which stands in for it) keeps its place below them."""

    def __init__(self, console: Console) -> None:
        self.width = console.width
        self.ink = Ink(console)
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        self.lines.append(line)
        if len(self.lines) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            sys.stdout.write("\n".join(self.lines) + "\n")
            self.lines.clear()
        sys.stdout.flush()

    def message(self, units: Sequence[str]) -> None:
        for line in wrap(units, self.width):
            self.add(line)


@dataclass(frozen=True)
class Column:
    header: str
    right: bool = False  # numbers
    long: bool = False  # an id, a uri or a key: its column may be narrower than its text, which then folds
    min_width: int = 0
    indent: int = 0  # body cells start this far in (under a group line)

    @property
    def least(self) -> int:
        """The narrowest a column of long text gets."""
        return max(cell_width(self.header), 8) + self.indent


def frame(columns: int) -> int:
    """Cells the borders and padding of a table of ``columns`` columns take: ``│ a │ b │``."""
    return 3 * columns + 1


def natural_widths(columns: Sequence[Column], rows: Iterable[Sequence[str]]) -> list[int]:
    widths = [max(cell_width(c.header), c.min_width) for c in columns]
    for row in rows:
        for i, text in enumerate(row):
            needed = cell_width(text) + columns[i].indent
            if needed > widths[i]:
                widths[i] = needed
    return widths


def fit(columns: Sequence[Column], natural: Sequence[int], width: int, span: int = 0) -> list[int]:
    """Column widths within ``width`` cells: columns of long text give up cells, widest first; then the first
    of them grows, room allowing, until group lines of ``span`` cells fit whole."""
    widths = list(natural)
    over = sum(widths) + frame(len(widths)) - width
    while over > 0:
        room = [i for i, c in enumerate(columns) if c.long and widths[i] > c.least]
        if not room:
            break
        widest = max(room, key=lambda i: widths[i])
        widths[widest] -= 1
        over -= 1
    inner = sum(widths) + frame(len(widths)) - 4
    grow = [i for i, c in enumerate(columns) if c.long]
    if span > inner and grow:
        widths[grow[0]] += max(0, min(span - inner, width - (inner + 4)))
    return widths


class Grid:
    """A laid-out table: every line of it as text."""

    def __init__(self, columns: Sequence[Column], widths: Sequence[int], ink: Ink) -> None:
        self.columns = list(columns)
        self.widths = list(widths)
        self.inner = sum(self.widths) + frame(len(self.widths)) - 4
        self.ink = ink

    def head(self) -> list[str]:
        bars = ["━" * (w + 2) for w in self.widths]
        titles = [self.ink(pad(c.header, w, c.right), "bold") for c, w in zip(self.columns, self.widths, strict=True)]
        return ["┏" + "┳".join(bars) + "┓", "┃ " + " ┃ ".join(titles) + " ┃", "┡" + "╇".join(bars) + "┩"]

    def row(self, cells: Sequence[str]) -> list[str]:
        """The lines of one row. A cell wider than its column folds onto more lines, except a key in the
        first column (indented under a group line): that one takes a line of its own across the table,
        and the row's other cells follow on the next line."""
        lines: list[str] = []
        first = self.columns[0]
        if first.indent and cells[0] and cell_width(cells[0]) + first.indent > self.widths[0]:
            for part in fold(cells[0], self.inner - first.indent):
                lines.append("│ " + pad(" " * first.indent + part, self.inner) + " │")
            cells = ["", *cells[1:]]
        stacks = []
        for text, column, width in zip(cells, self.columns, self.widths, strict=True):
            stacks.append([" " * column.indent + part for part in fold(text, width - column.indent)] if text else [""])
        for n in range(max(map(len, stacks))):
            drawn = [
                pad(stack[n] if n < len(stack) else "", width, column.right)
                for stack, column, width in zip(stacks, self.columns, self.widths, strict=True)
            ]
            lines.append("│ " + " │ ".join(drawn) + " │")
        return lines

    def span(self, parts: Sequence[str]) -> list[str]:
        """A group line across every column (more than one when the parts do not fit on one)."""
        return ["│ " + self.ink(pad(line, self.inner), "bold") + " │" for line in pack(parts, self.inner)]

    def bottom(self) -> str:
        return "└" + "┴".join("─" * (w + 2) for w in self.widths) + "┘"


def draw(out: Out, title: str | None, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> None:
    """A whole table at once (its rows are few)."""
    if title:
        for line in fold(title, out.width):
            out.add(out.ink(line, "bold"))
    grid = Grid(columns, fit(columns, natural_widths(columns, rows), out.width), out.ink)
    for line in grid.head():
        out.add(line)
    for row in rows:
        for line in grid.row(row):
            out.add(line)
    out.add(grid.bottom())


class TableStream:
    """One table drawn as its rows arrive, under a heading.

    Rows come in groups (a task instance, an asset): ``group()`` starts one with its scope, ``row()``
    adds a key. The first ``CHUNK`` rows choose the layout, kept to the end; the first that fits whole:

    - flat: the scope columns beside the key columns, the scope shown on a group's first row;
    - split (with ``outer``): the first ``outer`` scope cells (a task id) on a line of their own above
      their rows, the rest (its map index) in columns;
    - grouped: each group's whole scope on a line of its own, its keys indented below.

    When none fits whole: grouped, where a key too wide for its column has a line of its own across the
    table (``Grid.row``); no key is ever shortened.
    """

    def __init__(
        self,
        out: Out,
        heading: Sequence[str],
        scope: Sequence[Column],
        body: Sequence[Column],
        outer: int | None = None,
    ) -> None:
        self.out = out
        self.heading = heading
        self.scope = list(scope)
        self.body = list(body)
        self.outer = outer
        self.pending: list[tuple[bool, Sequence[str], Sequence[str]]] = []  # (is_group, cells, parts)
        self.grid: Grid | None = None
        self.split = 0  # scope cells shown on group lines rather than in columns
        self.inner: Sequence[str] = ()  # the current group's scope cells still to show in columns
        self.shown: Sequence[str] | None = None  # the scope cells of the last group line
        self.rows = 0

    def group(self, cells: Sequence[str], parts: Sequence[str]) -> None:
        """A new group: its scope as cells (one per scope column) and as the parts of a group line."""
        if self.grid is None:
            self.pending.append((True, cells, parts))
        else:
            self._draw_group(cells, parts)

    def row(self, cells: Sequence[str]) -> None:
        self.rows += 1
        if self.grid is None:
            self.pending.append((False, cells, ()))
            if self.rows >= CHUNK:
                self._lay_out()
        else:
            self._draw_row(cells)

    def close(self) -> None:
        if self.grid is None and self.rows:
            self._lay_out()
        if self.grid is not None:
            self.out.add(self.grid.bottom())
            self.grid = None
        self.out.flush()

    def _columns(self, split: int) -> list[Column]:
        key, *rest = self.body
        if split == len(self.scope):
            key = Column(key.header, key.right, key.long, key.min_width, indent=2)
        return [*self.scope[split:], key, *rest]

    def _widths(self, split: int) -> tuple[list[int], bool]:
        """The column widths with ``split`` scope cells on group lines, and whether every cell fits whole."""
        columns = self._columns(split)
        rows, inner, span = [], [], 0
        for is_group, cells, parts in self.pending:
            if is_group:
                inner = list(cells[split:])
                if split:
                    span = max(span, cell_width(GAP.join(parts[:split])))
            else:
                rows.append([*inner, *cells])
                inner = [""] * len(inner)
        natural = natural_widths(columns, rows)
        whole = sum(natural) + frame(len(natural)) <= self.out.width
        return fit(columns, natural, self.out.width, span), whole

    def _lay_out(self) -> None:
        choices = [0, *([self.outer] if self.outer else []), len(self.scope)]
        laid = {split: self._widths(split) for split in choices}
        fitting = [split for split in choices if laid[split][1]]
        self.split = fitting[0] if fitting else len(self.scope)
        self.grid = Grid(self._columns(self.split), laid[self.split][0], self.out.ink)
        for line in pack(self.heading, self.out.width):
            self.out.add(self.out.ink(line, "bold"))
        for line in self.grid.head():
            self.out.add(line)
        pending, self.pending = self.pending, []
        for is_group, cells, parts in pending:
            if is_group:
                self._draw_group(cells, parts)
            else:
                self._draw_row(cells)

    def _draw_group(self, cells: Sequence[str], parts: Sequence[str]) -> None:
        assert self.grid is not None
        self.inner = cells[self.split :]
        if self.split and cells[: self.split] != self.shown:
            self.shown = cells[: self.split]
            for line in self.grid.span(parts[: self.split]):
                self.out.add(line)

    def _draw_row(self, cells: Sequence[str]) -> None:
        assert self.grid is not None
        for line in self.grid.row([*self.inner, *cells]):
            self.out.add(line)
        if self.inner:
            self.inner = [""] * len(self.inner)
