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
_TOKENS_BYTES = re.compile(_TOKEN.encode(), re.DOTALL)
_OPENERS = frozenset("[{") | frozenset(b"[{")


def nests_deeper_than(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` opens more than ``limit`` arrays or objects inside one another; checked
    without parsing it (a text that is not JSON gets an answer too, and the parser's error after)."""
    if isinstance(text, bytes):
        opened = text.count(b"[") + text.count(b"{")
        tokens = _TOKENS_BYTES.finditer(text)
    else:
        opened = text.count("[") + text.count("{")
        tokens = _TOKENS.finditer(text)
    if opened <= limit:  # the common case, at the speed of str.count: too few brackets to nest that deep
        return False
    depth = 0
    for token in tokens:
        first = token.group()[0]
        if first in _OPENERS:
            depth += 1
            if depth > limit:
                return True
        elif first != '"' and first != ord('"'):
            depth -= 1
    return False
