"""How deep a JSON text nests, known before it is parsed: Python's json parser (and encoder) recurse once per
level, so a text nested deeper than the interpreter's recursion limit (``[[[[...``, 100,000 deep) ends in a
``RecursionError`` rather than a message. Values and import lines deeper than ``MAX_JSON_DEPTH`` are refused
first, with a line that says so.
"""

from __future__ import annotations

import re

# Levels of arrays and objects a value (or an import line, its object included) may nest. Far beyond any
# value Airflow's tasks write (they nest a handful of levels), and well inside Python's default recursion
# limit of 1000, which the parser shares with the frames of the command that calls it.
MAX_JSON_DEPTH = 512

# A JSON string (skipped whole: brackets inside it do not nest), or a bracket. The string's pattern is the
# unrolled loop, linear even on an unterminated string.
_TOKEN = r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]'
_TOKENS = re.compile(_TOKEN, re.DOTALL)


def nests_deeper_than(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` opens more than ``limit`` arrays or objects inside one another; checked
    without parsing it (a text that is not JSON gets an answer too, and the parser's error after)."""
    # The common case first, at the speed of count: too few brackets to nest that deep.
    if isinstance(text, bytes):
        if text.count(b"[") + text.count(b"{") <= limit:
            return False
        text = text.decode("latin-1")  # one character a byte: brackets and quotes stay where they were
    elif text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for token in _TOKENS.finditer(text):
        first = text[token.start()]  # not group(): a long string would be copied
        if first in "[{":
            depth += 1
            if depth > limit:
                return True
        elif first != '"':
            depth -= 1
    return False
