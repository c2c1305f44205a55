"""Where a value came from: the source labels of a ``Setting`` (the caller's overrides, an environment
variable, the config file, a command, a secret, the default) and how messages name them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statestore_cli.config.options import Setting

CONN_OVERRIDE = "conn_override"  # the source of a URL passed as load_settings(conn_override=...)
CONNECT_TIMEOUT_OVERRIDE = "connect_timeout_override"  # load_settings(connect_timeout_override=...)
LOCK_TIMEOUT_OVERRIDE = "lock_timeout_override"  # load_settings(lock_timeout_override=...)
API_URL_OVERRIDE = "api_url_override"  # load_settings(api_url_override=...)
OVERRIDES = (CONN_OVERRIDE, CONNECT_TIMEOUT_OVERRIDE, LOCK_TIMEOUT_OVERRIDE, API_URL_OVERRIDE)


def source_place(source: str) -> str:
    """A source label as a person reads it: the variable or the file, else the label itself."""
    if source.startswith("env "):
        return f"environment variable {source[4:]}"
    if source.startswith("file "):
        return source[5:]
    return source


def is_indirect(source: str) -> bool:
    """Whether the value came from a command or a secret: it is never shown, even when invalid."""
    return source.startswith(("command ", "secret "))


def named_place(where: str) -> str:
    """A command's or secret's place as an error names it: an environment variable is called one."""
    return where if where.startswith("[") else f"environment variable {where}"


def describe_source(setting: Setting) -> str:
    """Where a value came from, as a person reads it."""
    return source_place(setting.source)
