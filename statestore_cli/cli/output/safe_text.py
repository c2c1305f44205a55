"""Make stored text safe to print: no terminal control sequences, no rich markup, valid JSON."""

from __future__ import annotations

import json
from typing import Any

# C0 and C1 controls, DEL, the Unicode line and paragraph separators (line breaks to str.splitlines and
# many editors), and the bidirectional overrides that can reorder what a terminal shows.
_UNSAFE = [
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
]
_TEXT_ESCAPES = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _UNSAFE}
_TEXT_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
# A plain output field also doubles its backslashes, so every escape reads back one way (as in
# PostgreSQL's COPY text format): a stored backslash-n is `\\n`, a stored newline `\n`.
_FIELD_ESCAPES = {**_TEXT_ESCAPES, 0x5C: "\\\\"}
# json.dumps already escapes C0 controls; the rest become \\uXXXX, which is still valid JSON.
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in _UNSAFE if code >= 0x7F}


def safe_text(value: object) -> str:
    """``value`` as one line of text with every control character shown as an escape."""
    return str(value).translate(_TEXT_ESCAPES)


def plain_field(value: object) -> str:
    """``value`` as one field of a plain output record: no tab, no line break, backslashes doubled;
    a boolean as JSON writes it (``true``, ``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).translate(_FIELD_ESCAPES)


def safe_json(document: Any, *, indent: int | None = None) -> str:
    """JSON text, readable unicode kept, with no byte a terminal would act on."""
    return safe_json_text(json.dumps(document, ensure_ascii=False, indent=indent))


def safe_json_text(text: str) -> str:
    """Already-encoded JSON with the characters json.dumps leaves raw (DEL, C1, bidi) escaped."""
    return text.translate(_JSON_ESCAPES)
