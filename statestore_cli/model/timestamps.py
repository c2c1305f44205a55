"""Timestamps as the tool prints them; kept free of heavy imports (the fast `get` path uses it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def iso_utc(value: str | datetime) -> str:
    """A stored timestamp as ISO 8601 UTC; Airflow's SQLite text form is converted without parsing."""
    if isinstance(value, str):
        if len(value) == 26 and value[10] == " " and value[19] == ".":
            fraction = "" if value[20:] == "000000" else value[19:]
            return f"{value[:10]}T{value[11:19]}{fraction}+00:00"
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def utc_instant(value: str) -> datetime:
    """A stored timestamp text (SQLite's, as Airflow writes it) as an aware UTC datetime."""
    moment = datetime.fromisoformat(value)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def human(moment: datetime | None, never: str = "never", zone: str = " UTC") -> str:
    """A UTC instant the way people read it: seconds, no offset, ``UTC`` after it."""
    return never if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S") + zone


def human_iso(moment: str) -> str:
    """An ISO 8601 UTC timestamp (as ``iso_utc`` writes it) the way ``human`` shows an instant."""
    return f"{moment[:10]} {moment[11:19]} UTC"


def format_duration(duration: timedelta) -> str:
    """A duration as the CLI takes it back: ``2d``, ``1d12h``, ``90s`` -> ``1m30s``; ``0s`` for none."""
    seconds = duration.total_seconds()
    whole = int(seconds)
    parts = []
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_SECONDS[unit]
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    frac = f"{seconds - int(seconds):.3f}".lstrip("0").rstrip("0")  # milliseconds at most, "." for none
    if frac != ".":
        if parts and parts[-1].endswith("s"):
            parts[-1] = parts[-1][:-1] + frac + "s"
        else:
            parts.append(f"0{frac}s")
    return "".join(parts) or "0s"


def expired_before(cutoff: datetime, older_than: timedelta) -> str:
    """A clean's cutoff as its summaries say it, with the grace window when there is one."""
    grace = f", at least {format_duration(older_than)} ago" if older_than else ""
    return f"expired before {human(cutoff)}{grace}"
