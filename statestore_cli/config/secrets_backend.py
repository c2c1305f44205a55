"""The ``[secrets] backend`` an ``..._secret`` option is read from, made as Airflow makes it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statestore_cli.config.dotted_paths import import_object
from statestore_cli.config.sources import describe_source, named_place
from statestore_cli.errors import ConfigError, ConfigSourceError, first_line
from statestore_cli.masking import register_named_secrets, register_secret

if TYPE_CHECKING:
    from statestore_cli.config.options import Setting


class SecretsBackend:
    """The ``[secrets] backend`` that ``..._secret`` options are read from, made on first use, as Airflow
    makes it: the class at its dotted path, called with ``[secrets] backend_kwargs`` (a JSON object)
    updated by the ``AIRFLOW__SECRETS__BACKEND_KWARG__<NAME>`` variables."""

    def __init__(self, resolved: dict[tuple[str, str], Setting], env: Mapping[str, str], home: Path) -> None:
        self._resolved = resolved
        self._env = env
        self._home = home
        self._backend: Any = None

    def _make(self, named: str) -> tuple[Any, str]:
        setting = self._resolved[("secrets", "backend")]
        path = str(setting.value)
        if not path:
            raise ConfigError(
                f"{named}: a _secret option needs [secrets] backend (AIRFLOW__SECRETS__BACKEND), the secrets "
                "backend class to read it from; set it, or give the option another way"
            )
        if self._backend is None:
            where = f"{describe_source(setting)}: [secrets] backend = {path!r}"
            cls = import_object(path, where, self._home)
            if not isinstance(cls, type):
                raise ConfigError(f"{where}: {path} is not a class")
            import json

            kwargs_text = str(self._resolved[("secrets", "backend_kwargs")].value)
            kwargs: dict[str, Any] = json.loads(kwargs_text) if kwargs_text else {}
            prefix = "AIRFLOW__SECRETS__BACKEND_KWARG__"
            named_kwargs = {k[len(prefix) :].lower(): v for k, v in self._env.items() if k.startswith(prefix)}
            kwargs.update({k: v for k, v in named_kwargs.items() if k})  # they win over the JSON, as in Airflow
            register_named_secrets(kwargs)  # a vault token: the backend's own errors may quote it
            try:
                self._backend = cls(**kwargs)
            except Exception as exc:  # user code: any failure is the backend's
                raise ConfigSourceError(
                    f"{where}: cannot create it with [secrets] backend_kwargs: {type(exc).__name__}: {first_line(exc)}"
                ) from None
        return self._backend, path

    def get_config(self, key: str, where: str) -> tuple[str, str]:
        """The secret ``key`` names (an ``..._secret`` option at ``where``), and its source."""
        named = named_place(where)
        backend, path = self._make(named)
        key = key.strip()
        try:
            value = backend.get_config(key)
        except Exception as exc:  # user code: any failure is the backend's
            raise ConfigSourceError(
                f"{named}: {path}.get_config({key!r}) failed: {type(exc).__name__}: {first_line(exc)}"
            ) from None
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ConfigError(f"{named}: the secrets backend {path} has no secret {key!r}; create it or fix the name")
        if not isinstance(value, str):
            raise ConfigSourceError(
                f"{named}: {path}.get_config({key!r}) returned {type(value).__name__}, not a string"
            )
        register_secret(value)  # masked in every later message, as a command's output is
        return value, f"secret {where} via {path}"
