"""Settings: the effective ``[state_store]``, ``[workers]``, ``[database]`` and ``[secrets]`` options.

Lookup order, first match wins, for every option (Airflow's order, with the caller's overrides first):

1. ``conn_override`` (``sql_alchemy_conn`` only; the CLI's ``--conn``), ``connect_timeout_override``
   (``connect_timeout`` only; the CLI's ``--connect-timeout``) and ``lock_timeout_override``
   (``lock_timeout`` only; the ``--lock-timeout`` of the CLI's writing commands), ``api_url_override``
   (``api_url`` only; the CLI's ``--api-url``); a ``conn_override`` without one sets ``api_url`` to ""
   (a database named: no API URL found elsewhere applies);
2. the environment variable ``AIRFLOW__{SECTION}__{OPTION}``;
3. for a sensitive option only (``sensitive`` in options.toml: ``[database] sql_alchemy_conn`` and
   ``sql_alchemy_engine_args``, the options Airflow marks sensitive): ``AIRFLOW__{SECTION}__{OPTION}_CMD``,
   a command whose stdout is the value, then ``AIRFLOW__{SECTION}__{OPTION}_SECRET``, the key to ask
   ``[secrets] backend`` for (its ``get_config(key)``);
4. the INI file: ``config_path`` if given (it must exist), else ``$AIRFLOW_CONFIG``, else
   ``$AIRFLOW_HOME/airflow.cfg`` with ``AIRFLOW_HOME`` defaulting to ``~/airflow`` (a discovered
   file that does not exist is skipped, as Airflow does before it writes one, but a missing
   ``$AIRFLOW_CONFIG`` is a warning: it usually means another database than the one meant); for a
   sensitive option, its ``{option}_cmd`` and then its ``{option}_secret`` in the same section next;
5. the default declared in ``options.toml``.

A command or a secret is only read when nothing above it is set, after every other option (so
``[state_store] command_timeout`` and the ``[secrets]`` options apply to it). A command runs without a
shell (``shlex``-split, as Airflow runs it), for at most ``command_timeout``; its output, stripped, is the
value and is never shown. The secrets backend is made as Airflow makes it: the class at
``[secrets] backend``, called with the ``[secrets] backend_kwargs`` JSON object updated by the
``AIRFLOW__SECRETS__BACKEND_KWARG__<NAME>`` variables. A command that cannot run, prints nothing, or a
missing secret or backend is a ``ConfigError`` (exit 2); a command that fails or times out and a backend
that raises are a ``ConfigSourceError`` (exit 3).

Options of ``[state_store]`` and ``[workers]`` the schema does not know are warnings
(``Settings.warnings``) naming the closest known option: a typo must not fall back to the default
unnoticed. ``[workers]`` holds many Airflow options, so there only a near miss is reported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from statestore_cli.config.config_file import (
    airflow_home,
    describe_search,
    find_config_file,
    missing_config_warning,
    read_config_file,
)
from statestore_cli.config.options import OptionSpec, Setting, env_var_name, load_option_specs
from statestore_cli.config.sources import (
    API_URL_OVERRIDE,
    CONN_OVERRIDE,
    CONNECT_TIMEOUT_OVERRIDE,
    LOCK_TIMEOUT_OVERRIDE,
    describe_source,
)
from statestore_cli.config.unknown_options import unknown_options
from statestore_cli.config.values import convert_value, timeout_seconds
from statestore_cli.errors import ConfigError, Note, StateStoreError
from statestore_cli.masking import mask_text

if TYPE_CHECKING:
    import configparser
    from datetime import timedelta

BUILTIN_BACKEND = "statestore_cli.backends.metastore.MetastoreBackend"
_BUILTIN_ALIASES = {BUILTIN_BACKEND, "statestore_cli.MetastoreBackend"}  # the public re-export, same class


class Settings:
    """The effective configuration, with the source of every value."""

    def __init__(
        self,
        settings: dict[tuple[str, str], Setting],
        config_file: Path | None,
        home: Path,
        searched: Note | None = None,
        warnings: tuple[Note, ...] = (),
        *,
        parser: configparser.RawConfigParser | None = None,
        environ: Mapping[str, str] | None = None,
        config_given: Path | None = None,
    ) -> None:
        self.config_given = config_given  # the file the caller named (``config_path``, the CLI's --config)
        self.warnings = warnings  # unknown options, a missing $AIRFLOW_CONFIG: the caller shows them
        self._settings = settings
        self.config_file = config_file
        self.airflow_home = home
        self.config_search = searched  # where the INI file was looked for (``describe_search``)
        self._parser = parser
        self._environ = dict(os.environ if environ is None else environ)

    def extra_option(self, section: str, option: str) -> tuple[str, str] | None:
        """An option outside statestore's own schema (a backend's), looked up like every other one
        (environment variable, then the INI file), as ``(raw value, where it came from)``; None when unset."""
        env_var = env_var_name(section, option)
        if env_var in self._environ:
            return self._environ[env_var], f"environment variable {env_var}"
        if self._parser is not None and self._parser.has_option(section, option):
            return self._parser.get(section, option), str(self.config_file)
        return None

    def setting(self, section: str, option: str) -> Setting:
        return self._settings[(section, option)]

    def renewal(self, section: str, option: str) -> Callable[[], str] | None:
        """How to read once more an option a ``_cmd`` command gave (an access token that expires while a long
        walk runs): that command, run again; None for a value that came otherwise."""
        setting = self.setting(section, option)
        command = setting.command
        if command is None:
            return None
        from statestore_cli.config.config_command import run_config_command

        where, seconds = setting.source.removeprefix("command "), self.command_timeout
        return lambda: run_config_command(command, where, seconds)

    def conn_origin(self) -> tuple[str, str]:
        """Why ``[database] sql_alchemy_conn`` is the URL it is, and how to point it elsewhere, as a person
        reads them: the ``--conn`` given, the environment variable, the config file and how it was found,
        or the default and where ``AIRFLOW_HOME`` and the search for a config file led. The message of
        a missing store says both."""
        source = self.setting("database", "sql_alchemy_conn").source
        if source == CONN_OVERRIDE:
            return "the URL is the one --conn gave", "if the store is elsewhere, fix --conn"
        if source.startswith("env "):
            return f"the URL comes from environment variable {source[4:]}", f"fix or unset {source[4:]}"
        if source.startswith("file "):
            why = f"the URL comes from [database] sql_alchemy_conn in {source[5:]} ({self._found_as()})"
            return why, "if the store is elsewhere, fix it there or give --conn"
        if source != "default":  # a command or a secret
            return f"the URL comes from {source}", "if the store is elsewhere, fix that or give --conn"
        home = "$AIRFLOW_HOME" if self._environ.get("AIRFLOW_HOME") else "$AIRFLOW_HOME unset, so ~/airflow"
        if self.config_file is not None:
            why = f"{self.config_file} ({self._found_as()}) does not set it"
        else:
            search = self.config_search.worded({"config_path": "--config"}) if self.config_search else ""
            why = f"no config file was found ({search})" if search else "no config file was found"
        return (
            f"the URL is the default, $AIRFLOW_HOME/airflow.db ({home}), as AIRFLOW__DATABASE__SQL_ALCHEMY_CONN "
            f"is not set and {why}",
            "if the store is elsewhere, point AIRFLOW_HOME, --config or --conn at it",
        )

    def _found_as(self) -> str:
        if self.config_given is not None:
            return "--config"
        if self._environ.get("AIRFLOW_CONFIG"):
            return "$AIRFLOW_CONFIG"
        return "$AIRFLOW_HOME/airflow.cfg" if self._environ.get("AIRFLOW_HOME") else "~/airflow/airflow.cfg"

    def init_command(self) -> str:
        """The ``statestore db init`` command line for this store (see ``command_line``)."""
        return self.command_line("db", "init")

    def command_line(self, *words: str) -> str:
        """The ``statestore WORDS`` command line for this store, with the ``--config`` and ``--conn`` the
        caller gave; a password in the ``--conn`` URL is left out, as ``<password>``, so that no message
        shows it: the user types it again. ``words`` are quoted for a shell where they need it."""
        import shlex

        line = ["statestore"]
        if self.config_given is not None:
            line += ["--config", shlex.quote(str(self.config_given))]
        if self.setting("database", "sql_alchemy_conn").source == CONN_OVERRIDE:
            line += ["--conn", shlex.quote(_placeholder_password(self.sql_alchemy_conn))]
        return " ".join([*line, *(shlex.quote(word) for word in words)])

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._settings.values())

    def _value(self, section: str, option: str) -> Any:
        return self._settings[(section, option)].value

    @property
    def backend(self) -> str:
        return str(self._value("state_store", "backend"))

    @property
    def uses_builtin_backend(self) -> bool:
        return is_builtin_backend(self.backend)

    @property
    def default_retention_days(self) -> int:
        return int(self._value("state_store", "default_retention_days"))

    @property
    def dag_run_default_retention_days(self) -> int:
        return int(self._value("state_store", "dag_run_default_retention_days"))

    @property
    def clear_on_success(self) -> bool:
        return bool(self._value("state_store", "clear_on_success"))

    @property
    def state_cleanup_batch_size(self) -> int:
        return int(self._value("state_store", "state_cleanup_batch_size"))

    @property
    def state_cleanup_older_than(self) -> timedelta:
        from statestore_cli.model.retention import parse_age

        return parse_age(str(self._value("state_store", "state_cleanup_older_than")), "state_cleanup_older_than")

    @property
    def max_value_storage_bytes(self) -> int:
        return int(self._value("state_store", "max_value_storage_bytes"))

    @property
    def connect_timeout(self) -> float:
        """Seconds to wait for a database server to accept a connection."""
        return timeout_seconds(str(self._value("state_store", "connect_timeout")), "connect_timeout")

    @property
    def lock_timeout(self) -> float:
        """Seconds a write waits for a lock another session holds (on SQLite, any statement)."""
        return timeout_seconds(str(self._value("state_store", "lock_timeout")), "lock_timeout")

    @property
    def api_url(self) -> str:
        """Airflow's REST API the commands work through instead of the database; empty: the database."""
        return str(self._value("state_store", "api_url"))

    @property
    def api_concurrency(self) -> int:
        return int(self._value("state_store", "api_concurrency"))

    @property
    def api_ca_bundle(self) -> str:
        return str(self._value("state_store", "api_ca_bundle"))

    def api_auth(self) -> tuple[str, str, str, str]:
        """``(token, username, password, where they came from)`` for the REST API: the options, else
        ``$STATESTORE_API_TOKEN``, ``$AIRFLOW_CLI_TOKEN`` (airflowctl's), ``$STATESTORE_API_USERNAME`` and
        ``$STATESTORE_API_PASSWORD``. A token wins over a username and password."""
        env = self._environ
        token = self.setting("state_store", "api_token")
        if token.value:
            return str(token.value), "", "", describe_source(token)
        for name in ("STATESTORE_API_TOKEN", "AIRFLOW_CLI_TOKEN"):
            if env.get(name, "").strip():
                return env[name].strip(), "", "", f"environment variable {name}"
        user, password = self.setting("state_store", "api_username"), self.setting("state_store", "api_password")
        username = str(user.value) or env.get("STATESTORE_API_USERNAME", "").strip()
        secret = str(password.value) or env.get("STATESTORE_API_PASSWORD", "")
        where = describe_source(user) if user.value else "environment variable STATESTORE_API_USERNAME"
        return "", username, secret, where if username else ""

    @property
    def worker_backend(self) -> str:
        return str(self._value("workers", "state_store_backend"))

    @property
    def sql_alchemy_conn(self) -> str:
        return str(self._value("database", "sql_alchemy_conn"))

    @property
    def sql_alchemy_schema(self) -> str | None:
        """The schema of the tables; None when unset (empty or blank, as Airflow reads it)."""
        return str(self._value("database", "sql_alchemy_schema")) or None

    @property
    def command_timeout(self) -> float:
        return timeout_seconds(str(self._value("state_store", "command_timeout")), "command_timeout")

    @property
    def engine_args(self) -> dict[str, Any]:
        """``[database] sql_alchemy_engine_args``: keyword arguments for ``create_engine``."""
        text = str(self._value("database", "sql_alchemy_engine_args"))
        if not text:
            return {}
        import json

        parsed: dict[str, Any] = json.loads(text)  # checked to be an object when the settings were read
        return parsed

    def connect_args(self) -> dict[str, Any]:
        """The dict ``[database] sql_alchemy_connect_args`` names, imported (as Airflow does) only when
        an engine is made: `config show` must work while the module is broken."""
        setting = self.setting("database", "sql_alchemy_connect_args")
        path = str(setting.value)
        if not path:
            return {}
        where = f"{describe_source(setting)}: [database] sql_alchemy_connect_args = {path!r}"
        from statestore_cli.config.dotted_paths import import_object  # only when an engine is made

        found = import_object(path, where, self.airflow_home)
        if not isinstance(found, Mapping):
            raise ConfigError(f"{where}: {path} is {_kind(found)}, not a dict of connect arguments")
        return dict(found)


def _placeholder_password(conn: str) -> str:
    """``conn`` with its password and password-like parameters, if any, as ``<password>``."""
    return mask_text(conn, mask="<password>", url=True)


def _kind(value: object) -> str:
    name = type(value).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def is_builtin_backend(path: str) -> bool:
    """Ours, or Airflow's own metastore backend named in a config copied from a deployment."""
    if not path or path in _BUILTIN_ALIASES:
        return True
    return path.startswith("airflow.") and path.rsplit(".", 1)[-1] == "MetastoreBackend"


def load_settings(
    config_path: str | os.PathLike[str] | None = None,
    conn_override: str | None = None,
    environ: Mapping[str, str] | None = None,
    connect_timeout_override: str | None = None,
    lock_timeout_override: str | None = None,
    *,
    api_url_override: str | None = None,
    resolve_indirect: bool = True,
) -> Settings:
    """Resolve every option in the documented lookup order (see the module docstring).

    ``resolve_indirect=False`` runs no command and asks no secrets backend: an option whose value would
    come from one raises ``IndirectValueSkipped`` instead (the fast ``get`` path then hands over)."""
    env = os.environ if environ is None else environ
    home = airflow_home(env)
    config_file = find_config_file(config_path, env)
    parser = read_config_file(config_file) if config_file else None
    specs = load_option_specs()
    warnings = [*missing_config_warning(config_path, env), *unknown_options(parser, config_file, specs, env)]
    overrides = {"sql_alchemy_conn": (conn_override, CONN_OVERRIDE)}
    overrides["connect_timeout"] = (connect_timeout_override, CONNECT_TIMEOUT_OVERRIDE)
    overrides["lock_timeout"] = (lock_timeout_override, LOCK_TIMEOUT_OVERRIDE)
    overrides["api_url"] = (api_url_override, API_URL_OVERRIDE)
    if conn_override is not None and api_url_override is None:  # a database named: no API URL found elsewhere applies
        overrides["api_url"] = ("", CONN_OVERRIDE)
    resolved: dict[tuple[str, str], Setting] = {}
    indirect: list[tuple[OptionSpec, _Found]] = []
    for spec in specs:
        override, override_source = overrides.get(spec.option, (None, ""))
        found = _lookup(spec, override, override_source, env, parser, config_file)
        if found is None:
            default = spec.default
            if isinstance(default, str):
                default = default.replace("{AIRFLOW_HOME}", str(home))
            resolved[(spec.section, spec.option)] = Setting(spec, default, "default")
        elif found.kind == "value":
            resolved[(spec.section, spec.option)] = Setting(
                spec, convert_value(spec, found.text, found.where), found.where
            )
        else:
            indirect.append((spec, found))
    # Commands and secrets last: they are read with the options resolved above (the command timeout,
    # the secrets backend and its kwargs), and none runs when a bad plain value already failed the load.
    if indirect and not resolve_indirect:
        spec, found = indirect[0]
        raise IndirectValueSkipped(f"[{spec.section}] {spec.option} comes from {found.where}")
    if indirect:
        _warn_if_others_can_change(config_file, [found for _spec, found in indirect if found.kind == "command"])
        _read_indirect(indirect, resolved, env, home)
    resolved = {(spec.section, spec.option): resolved[(spec.section, spec.option)] for spec in specs}  # schema order
    searched = describe_search(config_path, env)
    given = None if config_path is None else Path(config_path).expanduser()
    return Settings(
        resolved, config_file, home, searched, tuple(warnings), parser=parser, environ=env, config_given=given
    )


def _read_indirect(
    indirect: list[tuple[OptionSpec, _Found]],
    resolved: dict[tuple[str, str], Setting],
    env: Mapping[str, str],
    home: Path,
) -> None:
    """Run the commands and ask the secrets backend for the options ``indirect`` holds, into ``resolved``."""
    # Imported here: most runs set no such option, and every command reads the config.
    from statestore_cli.config.config_command import run_config_command
    from statestore_cli.config.secrets_backend import SecretsBackend

    secrets = SecretsBackend(resolved, env, home)
    for spec, found in indirect:
        if found.kind == "command":
            seconds = timeout_seconds(str(resolved[("state_store", "command_timeout")].value), "command_timeout")
            text, source = run_config_command(found.text, found.where, seconds), f"command {found.where}"
        else:
            text, source = secrets.get_config(found.text, found.where)
        command = found.text if found.kind == "command" else None
        resolved[(spec.section, spec.option)] = Setting(spec, convert_value(spec, text, source), source, command)


def _warn_if_others_can_change(config_file: Path | None, commands: list[_Found]) -> None:
    """A warning before a ``_cmd`` option of the config file runs, when a user other than root and this
    one could change the file (and so the command)."""
    suffix = f" in {config_file}"
    options = [found.where.removesuffix(suffix) for found in commands if found.where.endswith(suffix)]
    if config_file is None or not options:
        return
    from statestore_cli.config.trust import warn_if_untrusted

    warn_if_untrusted(config_file, f"config file {config_file}, whose {', '.join(options)} runs,", "commands")


class IndirectValueSkipped(StateStoreError):
    """``load_settings(resolve_indirect=False)`` met an option whose value a command or a secret holds."""


class _Found(NamedTuple):
    """Where the lookup found an option: a value, or a command to run, or a secret's key to ask for."""

    kind: str  # "value" | "command" | "secret"
    text: str  # the value, the command line, or the secret's key
    where: str  # a value's source ("env ...", "file ..."); a command's or secret's place, as people read it


def _lookup(
    spec: OptionSpec,
    override: str | None,
    override_source: str,
    env: Mapping[str, str],
    parser: configparser.RawConfigParser | None,
    config_file: Path | None,
) -> _Found | None:
    """The first source that sets ``spec`` in Airflow's order (see the module docstring); None: the default."""
    if override is not None:
        return _Found("value", override, override_source)
    if spec.env_var in env:
        return _Found("value", env[spec.env_var], f"env {spec.env_var}")
    if spec.sensitive:  # Airflow reads <OPTION>_CMD and <OPTION>_SECRET for its sensitive options only
        for suffix, kind in (("_CMD", "command"), ("_SECRET", "secret")):
            if spec.env_var + suffix in env:
                return _Found(kind, env[spec.env_var + suffix], f"{spec.env_var}{suffix}")
    if parser is None:
        return None
    if parser.has_option(spec.section, spec.option):
        return _Found("value", parser.get(spec.section, spec.option), f"file {config_file}")
    if spec.sensitive:
        for suffix, kind in (("_cmd", "command"), ("_secret", "secret")):
            if parser.has_option(spec.section, spec.option + suffix):
                where = f"[{spec.section}] {spec.option}{suffix} in {config_file}"
                return _Found(kind, parser.get(spec.section, spec.option + suffix), where)
    return None
