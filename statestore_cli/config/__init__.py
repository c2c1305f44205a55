"""Configuration: the option schema (``options.toml``, ``options``) and its resolution (``settings``)."""

from statestore_cli.config.options import OptionSpec, Setting, load_option_specs
from statestore_cli.config.settings import BUILTIN_BACKEND, Settings, is_builtin_backend, load_settings
from statestore_cli.config.sources import describe_source

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
