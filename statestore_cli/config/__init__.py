"""Configuration: the option schema (``options.toml``) and its resolution (``settings``)."""

from statestore_cli.config.settings import (
    BUILTIN_BACKEND,
    OptionSpec,
    Setting,
    Settings,
    describe_source,
    is_builtin_backend,
    load_option_specs,
    load_settings,
)

__all__ = [
    "BUILTIN_BACKEND",
    "OptionSpec",
    "Setting",
    "Settings",
    "describe_source",
    "is_builtin_backend",
    "load_option_specs",
    "load_settings",
]
