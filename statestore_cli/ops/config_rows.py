"""``config``: every setting with its value (secrets masked) and where it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from statestore_cli.config import describe_source
from statestore_cli.config.sources import OVERRIDES

if TYPE_CHECKING:
    from statestore_cli.backends.store import Store


class ConfigRow(NamedTuple):
    section: str
    option: str
    value: Any
    source: str
    description: str
    parameter: str | None = None  # the source is this parameter of load_settings (conn_override, ...)


def config_rows(store: Store) -> list[ConfigRow]:
    """Every setting of ``store``'s settings (nothing is connected)."""
    from statestore_cli.db.database import mask_url, parse_url  # SQLAlchemy's URL: loaded by `config show` only

    rows = []
    for setting in store.settings:
        value = setting.value
        if setting.spec.secret and isinstance(value, str) and value:
            value = mask_url(parse_url(value)) if setting.spec.type == "url" else "***"
        parameter = setting.source if setting.source in OVERRIDES else None
        spec = setting.spec
        rows.append(ConfigRow(spec.section, spec.option, value, describe_source(setting), spec.description, parameter))
    return rows
