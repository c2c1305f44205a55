"""Retention: a task key expires at write time + its retention (by default ``default_retention_days``), or never."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final, Union

from statestore_cli.errors import InvalidInputError
from statestore_cli.model.timestamps import format_duration


class _NeverExpire:
    """Sentinel type of ``NEVER_EXPIRE``: a key that time-based cleanup never deletes."""

    _instance: _NeverExpire | None = None

    def __new__(cls) -> _NeverExpire:
        # One instance, so ``retention is NEVER_EXPIRE`` holds even after copy or unpickling.
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEVER_EXPIRE"

    def __reduce__(self) -> str:
        return "NEVER_EXPIRE"


NEVER_EXPIRE: Final = _NeverExpire()

Retention = Union[timedelta, _NeverExpire, None]


class _BackendDefault:
    """Sentinel type of ``BACKEND_DEFAULT``."""

    def __repr__(self) -> str:
        return "BACKEND_DEFAULT"


# The expiry a write leaves to the store behind the backend: Airflow's REST API applies its own
# ``[state_store] default_retention_days`` to a key written without one (``expires_at: "default"``).
BACKEND_DEFAULT: Final = _BackendDefault()

_UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
# Compiled on first use, not at import: help, the version and shell completion import this module and parse
# no duration.
_COMPACT = r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?"
_ISO = r"P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?"
_DURATION_HELP = "use 'never', a duration such as 90s, 15m, 6h, 7d or 1d12h, or ISO 8601 such as P7D or PT6H"


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_retention(text: str) -> timedelta | _NeverExpire:
    """Parse a retention as the CLI takes it: ``never``, ``1d12h`` or ISO 8601 ``P1DT12H``."""
    if text.strip().lower() == "never":
        return NEVER_EXPIRE
    return check_duration(parse_duration(text, "retention"), source=repr(text))


def parse_duration(text: str, what: str) -> timedelta:
    """``90s``, ``15m``, ``6h``, ``7d``, ``1w``, combinations such as ``1d12h``, or ISO 8601 ``P1DT12H``."""
    raw = text.strip()
    compact = re.fullmatch(_COMPACT, raw.lower())
    iso = re.fullmatch(_ISO, raw.upper())
    if raw and compact and any(compact.groups()):
        parts = compact.groups()
    elif iso and any(iso.groups()):
        parts = iso.groups()
    else:
        hint = _DURATION_HELP if what == "retention" else "use a duration such as 30s, 5m or 1h"
        raise InvalidInputError(f"invalid {what} {text!r}", hint=hint)
    weeks, days, hours, minutes, seconds = (float(g or 0) for g in parts)
    try:
        return timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise InvalidInputError(f"{what} {text!r} is too long") from None


def parse_age(text: str, what: str) -> timedelta:
    """A non-negative duration (``parse_duration``'s forms, or ``0`` for none), as ``clean --older-than``
    and ``state_cleanup_older_than`` take it."""
    raw = text.strip()
    if raw == "0":
        return timedelta(0)
    if raw.startswith("-"):
        raise InvalidInputError(f"{what} {text!r} is negative; use 0 or a duration such as 12h, 2d or P1D")
    return parse_duration(raw, what)


def clean_cutoff(now: datetime, older_than: timedelta) -> datetime:
    """What a clean at ``now`` deletes expired before: ``older_than`` earlier than now."""
    try:
        return now - older_than
    except OverflowError:
        raise InvalidInputError(f"an age of {format_duration(older_than)} reaches back before the year 1") from None


def check_duration(duration: timedelta, source: str = "") -> timedelta:
    if duration <= timedelta(0):
        label = f"retention {source}" if source else "retention"
        raise InvalidInputError(f"{label} must be positive; use 'never' for a key that never expires")
    return duration


def compute_expires_at(retention: Retention, default_retention_days: int, now: datetime) -> datetime | None:
    """The absolute UTC expiry a writer stores, or None for a key that never expires."""
    if retention is NEVER_EXPIRE:
        return None
    if retention is None:
        if default_retention_days <= 0:
            return None
        try:
            return now + timedelta(days=default_retention_days)
        except OverflowError:
            raise InvalidInputError(
                f"[state_store] default_retention_days = {default_retention_days} reaches past the year 9999; "
                "lower it, or use 0 for keys that never expire"
            ) from None
    if not isinstance(retention, timedelta):
        raise InvalidInputError(f"retention must be a timedelta or NEVER_EXPIRE, got {retention!r}")
    try:
        return now + check_duration(retention)
    except OverflowError:
        raise InvalidInputError(
            f"a retention of {format_duration(retention)} reaches past the year 9999; give a shorter one, or "
            "'never' (NEVER_EXPIRE) for a key that never expires"
        ) from None


def parse_instant(text: str, what: str) -> datetime:
    """An ISO 8601 instant that names its time zone (``2026-12-01T00:00:00Z``, ``...+02:00``)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"invalid {what} {text!r}", hint="use an ISO 8601 timestamp with a time zone, e.g. 2026-12-01T00:00:00Z"
        ) from None
    if moment.tzinfo is None:
        raise InvalidInputError(
            f"{what} {text!r} has no time zone; add one, e.g. {text.strip()}Z or {text.strip()}+00:00"
        )
    try:
        moment.astimezone(UTC)  # what is stored and compared: 0001-01-01T00:00+14:00 is before the year 1 there
    except OverflowError:
        raise InvalidInputError(
            f"{what} {text!r} is outside the years 1 to 9999 in UTC; give an instant within them"
        ) from None
    return moment
