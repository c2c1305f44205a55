"""How an error, a warning or an answer is laid out on stderr: one line in a pipe, lines a person can read at
a terminal. Free of typer and rich (the fast ``get`` path reports its errors through ``cli.failure`` too).

When stderr is not a terminal (a pipe, a log file, CI, cron's mail) a message is one line,
``statestore: error: …``, which grep and log collectors keep whole. When it is a terminal, the same words
are broken between words at its width, the problem first and each detail or fix on a line of its own::

    statestore: error: VALUE is not valid JSON (Expecting property name enclosed in
                       double quotes at line 1 column 2)
    hint: quote it as JSON or pass --string to store it as a string

Where a message is split: messages are written ``problem; detail; fix``, so a new line starts at each
"; " outside quotes ('…', "…", `…`) and brackets ((…), […], {…}): a quoted value, a command and a
parenthesised aside stay whole, and so does a path that holds "; " itself (the words either side of it
both hold a "/"). A URL holds no space, so it is never split. Lines break at spaces, never inside a
quoted value or a command in backticks (a command copied from the terminal must be one line).

An error whose problem ends at a ": " instead says so (``StateStoreError(problem, hint=...)``); its problem
is honoured only while the text still starts with it (a password masked inside it falls back to the rule).
Joined back with their separators the parts are the one-line message exactly: no word is dropped, added
or moved.
"""

from __future__ import annotations

import os
from typing import TextIO

from statestore_cli.cli.output.safe_text import safe_text

HINT = "hint: "
_SEPARATORS = ("; ", ": ")  # what may end an author's explicit problem (the rule splits at "; " only)
_CLOSING = {"(": ")", "[": "]", "{": "}"}
_NARROWEST = 20  # below this many columns, the layout is no easier to read than one line
_ALIGNED = 40  # continuation lines align under the message while this many columns are left for it


def stderr_message(prefix: str, text: str, width: int | None, *, problem: str | None = None) -> str:
    """``prefix`` (``statestore: error: ``) and ``text``, control characters escaped: one line when
    ``width`` is None, else the problem and its hints broken between words at ``width`` columns."""
    safe = safe_text(text)
    if width is None:
        return f"{prefix}{safe}\n"
    parts = message_parts(safe, None if problem is None else safe_text(problem))
    lines = _block(prefix, parts[0], width)
    for hint in parts[1:]:
        lines += _block(HINT, hint, width)
    return "\n".join(lines) + "\n"


def message_parts(text: str, problem: str | None = None) -> list[str]:
    """``text`` split into its problem and the hints after it: at ``problem`` when the text starts with it
    and a separator, then at each "; " outside quotes and brackets (see the module's docstring)."""
    if problem:
        for separator in _SEPARATORS:
            if text.startswith(problem + separator) and len(text) > len(problem) + len(separator):
                return [problem, *_split(text[len(problem) + len(separator) :])]
    return _split(text)


def terminal_width(stream: TextIO) -> int | None:
    """The columns to lay a message out in on ``stream``, or None when it is not a terminal (one line).
    ``$COLUMNS`` first, as Python's ``shutil.get_terminal_size`` and rich read it, then the terminal's own."""
    try:
        if not stream.isatty():
            return None
    except (AttributeError, OSError, ValueError):  # closed, or not a file (a test's capture)
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), _NARROWEST)
    try:
        size = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        size = 0
    return max(size, _NARROWEST) if size else 80


def _split(text: str) -> list[str]:
    """``text`` cut at each "; " outside quotes, backticks and brackets, and not inside a path; a quote
    that never closes keeps the rest of the text whole."""
    quoted, unclosed = _quotes(text)
    parts: list[str] = []
    start = 0
    closing: list[str] = []  # the brackets open here, innermost last
    for i, char in enumerate(text[:unclosed]):
        if quoted[i]:
            continue
        if char in _CLOSING:
            closing.append(_CLOSING[char])
        elif closing and char == closing[-1]:
            closing.pop()
        elif char == ";" and text.startswith(" ", i + 1) and not closing and not _in_path(text, i):
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    return parts if all(parts) else [text]  # "a; ; b" or a trailing "; ": no empty hint, so no split


def _quotes(text: str) -> tuple[list[bool], int | None]:
    """Which characters of ``text`` are in a quoted value ('…', "…", `…`, quotes included), and where the
    first quote that never closes is (None when every one closes). An apostrophe inside a word (can't,
    Airflow's) opens no quote, and a quote closes only where its word ends."""
    inside = [False] * len(text)
    unclosed = None
    never_closed = ""  # a quote with no closing one after it has none after any later opening either
    i = 0
    while i < len(text):
        quote = text[i]
        if quote not in never_closed and (quote == "`" or (quote in "'\"" and not _is_word(text, i - 1))):
            end = _closing(text, i)
            if end is not None:
                inside[i : end + 1] = [True] * (end + 1 - i)
                i = end
            else:
                never_closed += quote
                unclosed = i if unclosed is None else unclosed
        i += 1
    return inside, unclosed


def _closing(text: str, start: int) -> int | None:
    """Where the quote opened at ``start`` closes: the same quote at the end of a word."""
    quote = text[start]
    for i in range(start + 1, len(text)):
        if text[i] == quote and (quote == "`" or not _is_word(text, i + 1)):
            return i
    return None


def _is_word(text: str, i: int) -> bool:
    return 0 <= i < len(text) and text[i].isalnum()


def _in_path(text: str, i: int) -> bool:
    """Whether the "; " at ``i`` sits inside a path (``/srv/a; b/airflow.db``): a "/" in the words either side."""
    before = text[:i].rpartition(" ")[2]
    after = text[i + 2 :].partition(" ")[0]
    return "/" in before and "/" in after


def _block(prefix: str, text: str, width: int) -> list[str]:
    """``prefix`` and ``text`` broken at spaces within ``width`` columns, the following lines indented to
    align under the text (by two spaces when that would leave it too narrow a column)."""
    indent = len(prefix) if width - len(prefix) >= _ALIGNED else 2
    lines = _wrap(text, max(width - len(prefix), 1), width - indent)
    return [prefix + lines[0], *(" " * indent + line for line in lines[1:])]


def _wrap(text: str, first: int, rest: int) -> list[str]:
    """``text`` broken at single spaces into lines of at most ``first`` then ``rest`` columns; joined with
    " " they give ``text`` back. A quoted value is not broken while it fits in a line, a command in
    backticks never (one copies it whole); such a command wider than a line, or a long path or URL, has a
    line of its own, which the terminal folds."""
    pieces = [
        piece
        for word in words(text)
        for piece in (word.split(" ") if "`" not in word and _columns(word) > rest else [word])
    ]
    lines: list[str] = []
    line = ""
    for n, word in enumerate(pieces):
        room = first if not lines else rest
        if n == 0:
            line = word
        elif _columns(line) + 1 + _columns(word) <= room:
            line += " " + word
        else:
            lines.append(line)
            line = word
    lines.append(line)
    return lines


def words(text: str) -> list[str]:
    """``text`` cut at each space outside a quoted value (quotes that never close count for nothing)."""
    quoted, _ = _quotes(text)
    found: list[str] = []
    start = 0
    for i, char in enumerate(text):
        if char == " " and not quoted[i]:
            found.append(text[start:i])
            start = i + 1
    found.append(text[start:])
    return found


def _columns(text: str) -> int:
    """How many columns ``text`` takes on a terminal: two for a wide character (CJK), else one each."""
    if text.isascii():
        return len(text)
    from unicodedata import east_asian_width

    return sum(2 if east_asian_width(char) in "WF" else 1 for char in text)
