"""Tables drawn line by line at the terminal's width, so they can stream: the look of rich's default
table (heavy head, light body), without holding every row or measuring each cell twice.

A table is laid out once, from the first rows it is given (``TableStream``); every row after that is
drawn at once, with the same column widths. Timestamps and numbers are never cut. An id or a key that
does not fit loses its middle to an ellipsis (``shorten``), never a character count off its end and
never folded mid-word. When the scope columns would not fit beside the keys whole, each group's scope
(a task instance, an asset) gets a line of its own above its keys instead.

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

ELLIPSIS = "…"
CHUNK = 200  # rows a table is laid out from; then drawn and flushed in runs of this many lines
GAP = "  "  # between the parts of a heading or a group line


def cell_width(text: str) -> int:
    """Terminal cells ``text`` takes (wide characters count two)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: whole if it fits, else its start and end around an ellipsis."""
    if cell_width(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS if width == 1 else ""
    keep = width - 1
    head, tail = keep - keep // 2, keep // 2
    if text.isascii():
        return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")
    from rich.cells import get_character_cell_size

    start, used = [], 0
    for char in text:
        size = get_character_cell_size(char)
        if used + size > head:
            break
        start.append(char)
        used += size
    end, used = [], 0
    for char in reversed(text):
        size = get_character_cell_size(char)
        if used + size > tail:
            break
        end.append(char)
        used += size
    return "".join(start) + ELLIPSIS + "".join(reversed(end))


def pad(text: str, width: int, right: bool = False) -> str:
    fill = " " * (width - cell_width(text))
    return fill + text if right else text + fill


def pack(parts: Sequence[str], width: int) -> list[str]:
    """``parts`` on as few lines of ``width`` cells as they fit on whole, in order; a part too wide for
    a line of its own is shortened."""
    lines: list[str] = []
    for part in parts:
        if lines and cell_width(lines[-1]) + len(GAP) + cell_width(part) <= width:
            lines[-1] += GAP + part
        else:
            lines.append(shorten(part, width))
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
    shrink: bool = False  # an id or a key: may lose its middle to an ellipsis (timestamps and numbers never do)
    min_width: int = 0
    indent: int = 0  # body cells start this far in (under a group line)

    @property
    def least(self) -> int:
        """The narrowest a shrinkable column gets."""
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
    """Column widths within ``width`` cells: shrinkable columns give up cells, widest first; then the first
    shrinkable column grows, room allowing, until group lines of ``span`` cells fit whole."""
    widths = list(natural)
    over = sum(widths) + frame(len(widths)) - width
    while over > 0:
        room = [i for i, c in enumerate(columns) if c.shrink and widths[i] > c.least]
        if not room:
            break
        widest = max(room, key=lambda i: widths[i])
        widths[widest] -= 1
        over -= 1
    inner = sum(widths) + frame(len(widths)) - 4
    grow = [i for i, c in enumerate(columns) if c.shrink]
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

    def row(self, cells: Sequence[str]) -> str:
        drawn = []
        for text, column, width in zip(cells, self.columns, self.widths, strict=True):
            if column.shrink:
                text = " " * column.indent + shorten(text, width - column.indent) if text else ""
            drawn.append(pad(text, width, column.right))
        return "│ " + " │ ".join(drawn) + " │"

    def span(self, parts: Sequence[str]) -> list[str]:
        """A group line across every column (more than one when the parts do not fit on one)."""
        return ["│ " + self.ink(pad(line, self.inner), "bold") + " │" for line in pack(parts, self.inner)]

    def bottom(self) -> str:
        return "└" + "┴".join("─" * (w + 2) for w in self.widths) + "┘"


def draw(out: Out, title: str | None, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> None:
    """A whole table at once (its rows are few)."""
    if title:
        out.add(out.ink(shorten(title, out.width), "bold"))
    grid = Grid(columns, fit(columns, natural_widths(columns, rows), out.width), out.ink)
    for line in grid.head():
        out.add(line)
    for row in rows:
        out.add(grid.row(row))
    out.add(grid.bottom())


class TableStream:
    """One table drawn as its rows arrive, under a heading.

    Rows come in groups (a task instance, an asset): ``group()`` starts one with its scope, ``row()``
    adds a key. The first ``CHUNK`` rows choose the layout, kept to the end; the first that fits whole:

    - flat: the scope columns beside the key columns, the scope shown on a group's first row;
    - split (with ``outer``): the first ``outer`` scope cells (a task id) on a line of their own above
      their rows, the rest (its map index) in columns;
    - grouped: each group's whole scope on a line of its own, its keys indented below.

    When none fits whole, keys lose their middle: split when groups hold fewer than two keys on average
    (one line per key instead of two) and keys keep 24 cells that way, else grouped.
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
            key = Column(key.header, key.right, key.shrink, key.min_width, indent=2)
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
        if fitting:
            self.split = fitting[0]
        else:
            groups = sum(1 for is_group, _, _ in self.pending if is_group)
            outer = self.outer
            sparse = outer is not None and self.rows < 2 * groups and laid[outer][0][len(self.scope) - outer] >= 24
            self.split = outer if sparse and outer else len(self.scope)
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
        self.out.add(self.grid.row([*self.inner, *cells]))
        if self.inner:
            self.inner = [""] * len(self.inner)
