"""Where and how one command writes (``Writer``): its mode (``table``, ``plain`` or ``json``), its consoles,
and what each mode writes with: lines for people, JSON documents, tab-separated records, progress bars.

``render.Output`` builds every command's result on it; the views it hands results to (``stats_view``,
``sweep_view``, ``backend_views``) take a ``Writer``, so they need nothing of ``render``.
rich is imported only when a table, a styled line or a progress bar is drawn."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from statestore_cli.cli.output.modes import resolve
from statestore_cli.cli.output.safe_text import plain_field, safe_json, safe_text

if TYPE_CHECKING:
    from typing import Self

    from rich.console import Console
    from rich.text import Text

    from statestore_cli.backends.store import Store
    from statestore_cli.cli.output.progress import Advance

FIELD_COLUMNS = ("field", "value")  # db check/init and a clean's report: one field per line


def cell(value: object) -> Text:
    """A table cell of stored text: made safe, and never read as rich markup."""
    from rich.text import Text

    return Text("" if value is None else safe_text(value))


def write_json_array(documents: Iterable[dict[str, Any]]) -> int:
    """A JSON array on stdout written an element at a time (a million keys need no list of them); how many."""
    count = 0
    sys.stdout.write("[")
    for document in documents:
        sys.stdout.write(("," if count else "") + "\n  " + safe_json(document))
        count += 1
    sys.stdout.write("\n]\n" if count else "]\n")
    return count


class Writer:
    """Where and how one command writes: ``mode`` is table, plain or json; ``header``: plain records
    are preceded by a line naming their columns."""

    def __init__(self, mode: str, header: bool = False) -> None:
        self.mode = mode
        self.header = header
        self.walking = False  # a walk's bar is shown (walk_progress): no other bar beneath it

    @cached_property
    def console(self) -> Console:
        return _console(stderr=False)

    @cached_property
    def stderr(self) -> Console:
        return _console(stderr=True)

    @classmethod
    def choose(cls, requested: str = "auto", header: bool = False) -> Self:
        return cls(resolve(requested), header)

    @property
    def json(self) -> bool:
        return self.mode == "json"

    def line(self, text: str) -> None:
        """A message for people, already safe: on stdout beside a table, else on stderr (plain and JSON
        stdout hold records only)."""
        self.message(text, stderr=self.mode != "table")

    def message(self, text: str, *, stderr: bool) -> None:
        """A line for people, already safe, on the stream asked for."""
        if self.mode != "table":  # unstyled, unwrapped: what rich prints for it, without loading rich
            stream = sys.stderr if stderr else sys.stdout
            stream.write(text + "\n")
            return
        from rich.text import Text

        (self.stderr if stderr else self.console).print(Text(text), soft_wrap=True)

    def note(self, text: str) -> None:
        """Something the user should know that is not the result: on stderr, in every mode."""
        self.message(f"statestore: note: {text}", stderr=True)

    def write_json(self, document: Any) -> None:
        sys.stdout.write(safe_json(document) + "\n")

    def plain_row(self, *cells: object) -> None:
        sys.stdout.write("\t".join("" if c is None else plain_field(c) for c in cells) + "\n")

    def plain_header(self, columns: tuple[str, ...]) -> None:
        if self.header:
            sys.stdout.write("\t".join(columns) + "\n")

    def plain_fields(self, doc: dict[str, Any]) -> None:
        """A document as ``field<TAB>value`` records: lists joined by ", ", ``-`` for none."""
        self.plain_header(FIELD_COLUMNS)
        for name, value in doc.items():
            shown = ", ".join(value) if isinstance(value, list) else value
            self.plain_row(name, "-" if shown in (None, "") else shown)

    # -- progress -----------------------------------------------------------------------------------
    @property
    def shows_progress(self) -> bool:
        """A progress bar only for a person at a terminal: never in JSON, plain output or a pipe."""
        return self.mode == "table" and self.console.is_terminal

    @contextmanager
    def progress(self, label: str, total: int | None) -> Iterator[Advance]:
        """A transient bar (rows done, rate, time left) while the block runs; a no-op off a terminal, and
        under a walk's bar, which already shows the progress."""
        if not self.shows_progress or self.walking:
            yield _nothing
            return
        from statestore_cli.cli.output.progress import progress_bar  # rich.progress only when a bar is shown

        with progress_bar(self.console, label, total) as advance:
            yield advance

    @contextmanager
    def stderr_progress(self, label: str, total: int | None) -> Iterator[Advance]:
        """A transient bar on stderr, for a command whose stdout is its result (``import -o json``);
        a no-op unless stderr is a terminal (rich is not even imported then)."""
        if not sys.stderr.isatty():
            yield _nothing
            return
        from statestore_cli.cli.output.progress import progress_bar

        with progress_bar(self.stderr, label, total) as advance:
            yield advance

    @contextmanager
    def walk_progress(self, store: Store, *, to_stdout: bool = True) -> Iterator[None]:
        """Through the REST API, a bar of the task instances read while the block walks them (``list``,
        ``export``, a clean): beside a table on the terminal, else on stderr when stdout is not one (a result
        piped on, or written to a file: ``to_stdout`` False); none where records stream to the terminal, nor
        off the API."""
        console = self._walk_console(to_stdout) if store.api_mode else None
        if console is None:
            yield
            return
        from statestore_cli.cli.output.progress import progress_bar

        with progress_bar(console, "reading task instances", None, unit="") as advance:
            store.on_api_walk(advance)
            self.walking = True
            try:
                yield
            finally:
                self.walking = False
                store.on_api_walk(None)

    def _walk_console(self, to_stdout: bool) -> Console | None:
        if self.shows_progress:
            return self.console
        if sys.stderr.isatty() and not (to_stdout and sys.stdout.isatty()):
            return self.stderr
        return None


def _nothing(done: int, total: int | None = None) -> None:
    """The progress a run off a terminal reports to: none."""


def _console(*, stderr: bool) -> Console:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich's own handling exits 1; the CLI ends a closed pipe in one place (cli.failure).
            self.quiet = True  # and nothing more is drawn on the way out (a progress bar's last frame)
            raise  # the BrokenPipeError being handled

    # NO_COLOR (no-color.org) asks for no ANSI styling at all, not only no colours.
    plain = bool(os.environ.get("NO_COLOR"))
    return _Console(stderr=stderr, highlight=False, soft_wrap=stderr, color_system=None if plain else "auto")
