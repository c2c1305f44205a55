"""An option's raw text (from a flag, a variable, the file, a command or a secret) checked against its type
and turned into the value ``Settings`` keeps, or a ``ConfigError`` that says what the option accepts."""

from __future__ import annotations

import re
from typing import Any

from statestore_cli.config.options import OptionSpec, expected_value
from statestore_cli.config.sources import OVERRIDES, is_indirect, named_place, source_place
from statestore_cli.errors import PARAMETER, ConfigError
from statestore_cli.masking import mask_text

_DOTTED = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+")
_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


def _invalid(spec: OptionSpec, raw: str | None, source: str, expected: str) -> ConfigError:
    """``raw`` None: the value is not shown (a secret option's, or what a command or secret returned)."""
    parameter = source if source in OVERRIDES else None  # named as the caller names it
    where = PARAMETER if parameter else source_place(source)
    if source.startswith("command "):
        where = f"{named_place(source[8:])} (its output)"
    elif source.startswith("secret "):
        place, _, backend = source[7:].rpartition(" via ")
        where = f"{named_place(place)} (the secret from {backend})"
    shown = f"{mask_text(raw, url=spec.type == 'url')!r} " if raw is not None else ""  # it may hold a password
    if raw is None:
        expected += " (the value is not shown: it may hold a password)"
    return ConfigError(
        f"{where}: invalid value {shown}for [{spec.section}] {spec.option}",
        hint=f"expected {expected}",
        parameter=parameter,
    )


# How Python hands over argv and environment bytes that are not UTF-8 (surrogate escapes).
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def convert_value(spec: OptionSpec, raw: str, source: str) -> Any:
    """``raw``, from ``source``, as ``spec``'s type keeps it (a duration, a timeout, a JSON object as written)."""
    text = raw.strip()
    hidden = is_indirect(source)  # a command's output or a secret is never echoed, even when invalid
    if _UNDECODABLE.search(raw):  # bytes of a flag or variable that were not UTF-8: they fail wherever shown or sent
        raise _invalid(spec, None if hidden else raw, source, f"{expected_value(spec)}, as UTF-8 text")
    if spec.type == "int":
        if not re.fullmatch(r"[+-]?\d+", text):
            raise _invalid(spec, raw, source, expected_value(spec))
        number = int(text)
        if (spec.min is not None and number < spec.min) or number > spec.max:
            raise _invalid(spec, raw, source, expected_value(spec))
        return number
    if spec.type == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise _invalid(spec, raw, source, expected_value(spec))
    if spec.type == "timeout":
        return _timeout(spec, raw, source)
    if spec.type == "duration":
        from statestore_cli.errors import InvalidInputError
        from statestore_cli.model.retention import parse_age

        try:
            parse_age(text, f"[{spec.section}] {spec.option}")
        except InvalidInputError:
            raise _invalid(spec, raw, source, expected_value(spec)) from None
        return text  # as written, for `config show`; ``Settings`` reads it as a timedelta
    if spec.type == "class":
        if text and not _DOTTED.fullmatch(text):
            raise _invalid(spec, raw, source, expected_value(spec))
        return text
    if spec.type == "import":
        if text and not _DOTTED.fullmatch(text):
            raise _invalid(spec, raw, source, expected_value(spec))
        return text
    if spec.type in ("text", "path"):
        if any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise _invalid(spec, None if hidden or spec.secret else raw, source, expected_value(spec))
        return text
    if spec.type == "http_url":
        return _http_url(spec, raw, source)
    if spec.type == "schema":
        # 63: PostgreSQL's longest name (it would cut a longer one short, MySQL refuses it); empty = unset
        if len(text) > 63 or any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise _invalid(spec, raw, source, expected_value(spec))
        return text
    if spec.type == "json":
        return _json_object(spec, raw, source, hidden)
    if not text:
        raise _invalid(spec, None if hidden else raw, source, expected_value(spec))
    if text.startswith("sqlite:///") and "?" not in text:
        return text  # a plain SQLite file URL needs no parser (and the fast `get` path no SQLAlchemy)
    from sqlalchemy.engine import make_url  # here, not at the top: config is read before SQLAlchemy is needed
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(text)
    except (ArgumentError, ValueError):
        raise _invalid(spec, None if hidden else raw, source, expected_value(spec)) from None
    return text


def _http_url(spec: OptionSpec, raw: str, source: str) -> str:
    """An API's root URL (empty: unset), without a trailing slash; one with a user or password is refused,
    unshown (credentials go in their own options, never in a URL that messages name)."""
    from urllib.parse import urlsplit

    text = raw.strip()
    if not text:
        return text
    try:
        parts = urlsplit(text)
        port = parts.port  # a port that is not a number raises here
    except ValueError:
        raise _invalid(spec, raw, source, expected_value(spec)) from None
    if parts.username is not None or parts.password is not None:
        raise _invalid(spec, None, source, expected_value(spec) + "; give the password in api_password or a token")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment or port == 0:
        raise _invalid(spec, raw, source, expected_value(spec))
    return text.rstrip("/")


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_JSON_KINDS[type(None)] = "null"


def _json_object(spec: OptionSpec, raw: str, source: str, hidden: bool) -> str:
    """A JSON object as written (for `config show`); empty means unset. ``Settings`` reads it as a dict."""
    text = raw.strip()
    if not text:
        return text
    import json  # only when the option is set: every command reads the config

    shown = None if hidden or spec.secret else raw
    try:
        parsed = json.loads(text)
    except ValueError as exc:  # json's message gives the position, never the text
        raise _invalid(spec, shown, source, f"{expected_value(spec)} ({exc})") from None
    if not isinstance(parsed, dict):
        kind = _JSON_KINDS.get(type(parsed), type(parsed).__name__)
        raise _invalid(spec, shown, source, f"{expected_value(spec)}, not {kind}")
    return text


def _timeout(spec: OptionSpec, raw: str, source: str) -> str:
    """A timeout as written (for `config show`): a positive duration; ``timeout_seconds`` reads it."""
    from statestore_cli.errors import InvalidInputError

    text = raw.strip()
    try:
        seconds = timeout_seconds(text, spec.option)
    except InvalidInputError:
        raise _invalid(spec, raw, source, expected_value(spec)) from None
    if seconds > spec.max:
        raise _invalid(spec, raw, source, f"at most {spec.max} seconds")
    return text


def timeout_seconds(text: str, what: str) -> float:
    """Seconds of a positive duration (``10s``, ``2m``, ``PT30S``)."""
    from statestore_cli.errors import InvalidInputError
    from statestore_cli.model.retention import parse_duration

    seconds = parse_duration(text, what).total_seconds()
    if seconds <= 0:
        raise InvalidInputError(f"{what} must be positive, got {text!r}")
    return seconds
