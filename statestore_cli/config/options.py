"""The option schema: every option ``options.toml`` declares (section, type, default, help), and what
each type accepts, in the words of an invalid value's error and of the configuration reference."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple


class OptionSpec(NamedTuple):
    section: str
    option: str
    type: str
    default: Any
    description: str
    min: int | None = None
    max: int = 2_147_483_647  # the widest INTEGER every engine stores
    secret: bool = False
    sensitive: bool = False  # may come from ``<option>_cmd`` / ``<option>_secret`` too, as Airflow allows
    notes: str = ""  # more than the one-sentence description, for the configuration reference only

    @property
    def env_var(self) -> str:
        return env_var_name(self.section, self.option)


class Setting(NamedTuple):
    """One effective option: its value and where it came from."""

    spec: OptionSpec
    value: Any
    # "default", "env AIRFLOW__...", "file /path/airflow.cfg", "conn_override", or for a sensitive option
    # "command AIRFLOW__..._CMD", "command [section] option_cmd in /path/airflow.cfg",
    # "secret AIRFLOW__..._SECRET via pkg.Backend", "secret [section] option_secret in /path via pkg.Backend"
    source: str
    command: str | None = None  # the command a ``_cmd`` option ran, run again to renew its value (``renewal``)


def env_var_name(section: str, option: str) -> str:
    """Airflow's environment variable for an option: ``AIRFLOW__{SECTION}__{OPTION}``, a dot in the
    section (a provider's, such as ``common.io``) written as an underscore, as Airflow spells it."""
    return f"AIRFLOW__{section.replace('.', '_').upper()}__{option.upper()}"


@cache  # the package's own file, read once per process (a library caller may load settings many times)
def load_option_specs() -> tuple[OptionSpec, ...]:
    """The option schema shipped inside the package as ``options.toml``."""
    # Read beside this module (inside the installed package); importlib.resources costs start-up time.
    text = Path(__file__).with_name("options.toml").read_text(encoding="utf-8")
    specs = []
    for section, options in tomllib.loads(text).items():
        for option, spec in options.items():
            specs.append(OptionSpec(section=section, option=option, **spec))
    return tuple(specs)


def _int_range(spec: OptionSpec) -> str:
    if spec.min is None:
        return f"a whole number <= {spec.max}"
    return f"a whole number from {spec.min} to {spec.max}"


# What each type accepts, in the words of an invalid value's error and of the configuration reference.
_EXPECTED = {
    "bool": "a boolean (true/false, yes/no, on/off, 1/0)",
    "duration": "0 or a duration such as 12h, 2d, 1d12h or P1D",
    "timeout": "a positive duration such as 10s, 2m or PT30S",
    "class": "a dotted path such as mypackage.module.ClassName",
    "import": "an import path such as airflow_local_settings.connect_args",
    "schema": "a schema name of at most 63 characters, without control characters",
    "url": "a SQLAlchemy URL such as sqlite:////path/airflow.db",
    "http_url": "an http:// or https:// URL without a user or password, such as https://airflow.example.com",
    "text": "text without control characters",
    "path": "a file path",
}


def expected_value(spec: OptionSpec) -> str:
    """What ``spec`` accepts, in words: the ``expected ...`` of its invalid-value error."""
    if spec.type == "int":
        return _int_range(spec)
    if spec.type == "json":
        example = '{"pool_size": 5}' if spec.section == "database" else '{"connections_prefix": "airflow/connections"}'
        return f"a JSON object such as {example}"
    return _EXPECTED[spec.type]
