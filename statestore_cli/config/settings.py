"""Settings: the effective ``[state_store]``, ``[workers]``, ``[database]`` and ``[secrets]`` options.

Lookup order, first match wins, for every option (Airflow's order, with the caller's overrides first):

1. ``conn_override`` (``sql_alchemy_conn`` only; the CLI's ``--conn``), ``connect_timeout_override``
   (``connect_timeout`` only; the CLI's ``--connect-timeout``) and ``lock_timeout_override``
   (``lock_timeout`` only; the ``--lock-timeout`` of the CLI's writing commands);
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
import re
import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from statestore_cli.errors import PARAMETER, ConfigError, ConfigSourceError, Note, StateStoreError, first_line
from statestore_cli.masking import mask_text, register_named_secrets, register_secret

if TYPE_CHECKING:
    import configparser
    from datetime import timedelta

BUILTIN_BACKEND = "statestore_cli.backends.metastore.MetastoreBackend"
_BUILTIN_ALIASES = {BUILTIN_BACKEND, "statestore_cli.MetastoreBackend"}  # the public re-export, same class
_DOTTED = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+")
_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


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


CONN_OVERRIDE = "conn_override"  # the source of a URL passed as load_settings(conn_override=...)
CONNECT_TIMEOUT_OVERRIDE = "connect_timeout_override"  # load_settings(connect_timeout_override=...)
LOCK_TIMEOUT_OVERRIDE = "lock_timeout_override"  # load_settings(lock_timeout_override=...)
_OVERRIDES = (CONN_OVERRIDE, CONNECT_TIMEOUT_OVERRIDE, LOCK_TIMEOUT_OVERRIDE)


def _where(source: str) -> str:
    if source.startswith("env "):
        return f"environment variable {source[4:]}"
    if source.startswith("file "):
        return source[5:]
    return source


def _invalid(spec: OptionSpec, raw: str | None, source: str, expected: str) -> ConfigError:
    """``raw`` None: the value is not shown (a secret option's, or what a command or secret returned)."""
    parameter = source if source in _OVERRIDES else None  # named as the caller names it
    where = PARAMETER if parameter else _where(source)
    if source.startswith("command "):
        where = f"{_named(source[8:])} (its output)"
    elif source.startswith("secret "):
        place, _, backend = source[7:].rpartition(" via ")
        where = f"{_named(place)} (the secret from {backend})"
    shown = f"{mask_text(raw, url=spec.type == 'url')!r} " if raw is not None else ""  # it may hold a password
    if raw is None:
        expected += " (the value is not shown: it may hold a password)"
    return ConfigError(
        f"{where}: invalid value {shown}for [{spec.section}] {spec.option}",
        hint=f"expected {expected}",
        parameter=parameter,
    )


def _indirect(source: str) -> bool:
    return source.startswith(("command ", "secret "))


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
}


def expected_value(spec: OptionSpec) -> str:
    """What ``spec`` accepts, in words: the ``expected ...`` of its invalid-value error."""
    if spec.type == "int":
        return _int_range(spec)
    if spec.type == "json":
        example = '{"pool_size": 5}' if spec.section == "database" else '{"connections_prefix": "airflow/connections"}'
        return f"a JSON object such as {example}"
    return _EXPECTED[spec.type]


# How Python hands over argv and environment bytes that are not UTF-8 (surrogate escapes).
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def _convert(spec: OptionSpec, raw: str, source: str) -> Any:
    text = raw.strip()
    hidden = _indirect(source)  # a command's output or a secret is never echoed, even when invalid
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


def airflow_home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("AIRFLOW_HOME") or "~/airflow").expanduser()


def find_config_file(config_path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Path | None:
    """The INI file to read, or None when the discovered one does not exist."""
    if config_path is not None:
        path = Path(config_path).expanduser()
        if not path.exists():
            raise ConfigError(
                f"config file {path} does not exist; pass an existing file to {PARAMETER}", parameter="config_path"
            )
        if not path.is_file():
            raise ConfigError(
                f"config file {path} is not a file; pass an airflow.cfg-style file to {PARAMETER}",
                parameter="config_path",
            )
        return path
    if environ.get("AIRFLOW_CONFIG"):
        path = Path(environ["AIRFLOW_CONFIG"]).expanduser()
    else:
        path = airflow_home(environ) / "airflow.cfg"
    return path if path.is_file() else None


def describe_search(config_path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Note:
    """Which files the lookup tried, in order, as a person reads it (said when none was found);
    ``PARAMETER`` in it stands for ``config_path``."""
    if config_path is not None:
        return Note(f"{Path(config_path).expanduser()} ({PARAMETER})", parameter="config_path")
    tried = [f"no {PARAMETER}"]
    if environ.get("AIRFLOW_CONFIG"):
        tried.append(f"$AIRFLOW_CONFIG {Path(environ['AIRFLOW_CONFIG']).expanduser()} does not exist")
    else:
        where = "$AIRFLOW_HOME" if environ.get("AIRFLOW_HOME") else "$AIRFLOW_HOME unset, so ~/airflow"
        tried.append("$AIRFLOW_CONFIG not set")
        tried.append(f"{airflow_home(environ) / 'airflow.cfg'} ({where}/airflow.cfg) does not exist")
    return Note("; ".join(tried), parameter="config_path")


def _read_ini(path: Path) -> configparser.RawConfigParser:
    import configparser  # only when there is a file to read: a cron job with AIRFLOW__ variables has none

    # Raw: SQLAlchemy URLs carry percent-encoded passwords that interpolation would mangle.
    parser = configparser.RawConfigParser(strict=False)
    try:
        with path.open(encoding="utf-8") as handle:
            parser.read_file(handle)
    except configparser.MissingSectionHeaderError as exc:
        problem = (
            "is an unclosed [section] header"
            if exc.line.lstrip().startswith("[")
            else "comes before any [section] header"
        )
        raise ConfigError(
            f"cannot read config file {path}: line {exc.lineno} {problem}: {exc.line.strip()!r}"
        ) from None
    except configparser.ParsingError as exc:
        lineno, shown = exc.errors[0]
        import ast  # only for this message: configparser keeps repr(line)

        line = ast.literal_eval(shown) if shown[:1] in "'\"" else shown
        raise ConfigError(
            f"cannot read config file {path}: line {lineno} is neither '[section]' nor 'option = value': "
            f"{line.strip()!r}"
        ) from None
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(f"cannot read config file {path}: {reason}") from None
    return parser


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
    resolve_indirect: bool = True,
) -> Settings:
    """Resolve every option in the documented lookup order (see the module docstring).

    ``resolve_indirect=False`` runs no command and asks no secrets backend: an option whose value would
    come from one raises ``IndirectValueSkipped`` instead (the fast ``get`` path then hands over)."""
    env = os.environ if environ is None else environ
    home = airflow_home(env)
    config_file = find_config_file(config_path, env)
    parser = _read_ini(config_file) if config_file else None
    specs = load_option_specs()
    warnings = [*_missing_config_warning(config_path, env), *_unknown_options(parser, config_file, specs, env)]
    overrides = {"sql_alchemy_conn": (conn_override, CONN_OVERRIDE)}
    overrides["connect_timeout"] = (connect_timeout_override, CONNECT_TIMEOUT_OVERRIDE)
    overrides["lock_timeout"] = (lock_timeout_override, LOCK_TIMEOUT_OVERRIDE)
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
            resolved[(spec.section, spec.option)] = Setting(spec, _convert(spec, found.text, found.where), found.where)
        else:
            indirect.append((spec, found))
    # Commands and secrets last: they are read with the options resolved above (the command timeout,
    # the secrets backend and its kwargs), and none runs when a bad plain value already failed the load.
    secrets = _SecretsBackend(resolved, env, home)
    if resolve_indirect:
        _warn_if_others_can_change(config_file, [found for _spec, found in indirect if found.kind == "command"])
    for spec, found in indirect:
        if not resolve_indirect:
            raise IndirectValueSkipped(f"[{spec.section}] {spec.option} comes from {found.where}")
        if found.kind == "command":
            seconds = timeout_seconds(str(resolved[("state_store", "command_timeout")].value), "command_timeout")
            text, source = run_config_command(found.text, found.where, seconds), f"command {found.where}"
        else:
            text, source = secrets.get_config(found.text, found.where)
        resolved[(spec.section, spec.option)] = Setting(spec, _convert(spec, text, source), source)
    resolved = {(spec.section, spec.option): resolved[(spec.section, spec.option)] for spec in specs}  # schema order
    searched = describe_search(config_path, env)
    given = None if config_path is None else Path(config_path).expanduser()
    return Settings(
        resolved, config_file, home, searched, tuple(warnings), parser=parser, environ=env, config_given=given
    )


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


def _named(where: str) -> str:
    """A command's or secret's place as an error names it: an environment variable is called one."""
    return where if where.startswith("[") else f"environment variable {where}"


def run_config_command(command: str, where: str, timeout: float) -> str:
    """The stdout of ``command`` (an ``..._cmd`` option at ``where``), without surrounding whitespace.

    As Airflow runs it: split into words as a POSIX shell would (``shlex``), with no shell (pipes and
    ``$VAR`` need an explicit ``sh -c '...'``); unlike Airflow, bounded by ``timeout`` seconds. Its
    output may be a password, so no message quotes it, and it is masked in every later message
    (``register_secret``). Its stderr is dropped: it may hold the secret in any shape."""
    import contextlib
    import shlex
    import signal
    import subprocess

    named = _named(where)
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"{named}: cannot split the command into words ({exc}); fix its quoting") from None
    if not argv:
        raise ConfigError(f"{named}: the command is empty; give the command that prints the value")
    try:
        # A session of its own: on a timeout the whole group goes, a `sh -c` and what it started.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )
    except OSError as exc:  # not found, not executable
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{named}: cannot run {argv[0]!r}: {reason}; fix the command") from None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException as exc:  # the timeout, Ctrl-C, SIGTERM: the command must not outlive us
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise ConfigSourceError(
                f"{named}: the command did not finish within {timeout:g}s and was stopped; "
                "raise [state_store] command_timeout or make the command answer sooner"
            ) from None
        raise
    value = out.decode("utf-8", "replace").strip()
    register_secret(value)  # masked in every later message: a driver's error, a traceback's last line
    if proc.returncode != 0:
        status = f"exit status {proc.returncode}" if proc.returncode > 0 else f"signal {-proc.returncode}"
        # Its stderr is not shown: it may hold the secret in any shape ("token <password> expired").
        raise ConfigSourceError(
            f"{named}: the command failed ({status}); its output is not shown, as it may hold a password: "
            "run the command yourself to see it"
        ) from None
    if not value:
        raise ConfigError(f"{named}: the command printed nothing; it must print the value on stdout")
    return value


class _SecretsBackend:
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
        named = _named(where)
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


def import_object(path: str, where: str, home: Path) -> Any:
    """The object at dotted ``path`` (a config option at ``where``), or a one-line ``ConfigError``.
    ``$AIRFLOW_HOME/config`` is importable, as Airflow makes it (``airflow_local_settings`` lives there)."""
    import sys

    folder = str(home / "config")
    if folder not in sys.path:
        sys.path.append(folder)
    return import_named(path, where)


def import_named(path: str, where: str, what: str = "attribute") -> Any:
    """The ``what`` (an attribute, a class) at dotted ``path``, named by the option at ``where``, or a
    one-line ``ConfigError``: importing user code can fail in any way."""
    import importlib

    from statestore_cli.config.trust import check_module_files

    module_name, _, name = path.rpartition(".")
    try:
        check_module_files(module_name, where)  # before its code runs; finding it imports its packages
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import of user code can fail in any way
        raise ConfigError(
            f"{where}: cannot import module {module_name!r} ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    except SystemExit as exc:  # sys.exit() at import: left alone it would end the command as if it had succeeded
        raise ConfigError(
            f"{where}: importing module {module_name!r} raised SystemExit({exc.code!r}); a module named by a "
            "dotted path must not exit when it is imported: remove the exit (an argparse or script entry point "
            "run at import, often) or name another module"
        ) from None
    # KeyboardInterrupt goes on: whether Ctrl-C or the module raised it, the command was interrupted (130).
    if not hasattr(module, name):
        raise ConfigError(f"{where}: module {module_name!r} has no {what} {name!r}")
    return getattr(module, name)


def _missing_config_warning(config_path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> list[Note]:
    named = environ.get("AIRFLOW_CONFIG")
    if config_path is not None or not named or Path(named).expanduser().is_file():
        return []
    return [
        Note(
            f"$AIRFLOW_CONFIG names {Path(named).expanduser()}, which does not exist (or is not a file): "
            "using the environment and the defaults; fix the path or unset AIRFLOW_CONFIG"
        )
    ]


# Sections whose every option is ours, and sections shared with Airflow where only a near miss is reported.
_OWN_SECTIONS = ("state_store",)
_SHARED_SECTIONS = ("workers",)


def _unknown_options(
    parser: configparser.RawConfigParser | None,
    config_file: Path | None,
    specs: tuple[OptionSpec, ...],
    environ: Mapping[str, str],
) -> list[Note]:
    """A note for each option of ``[state_store]`` (any) or ``[workers]`` (near misses) no spec declares,
    in the file and in ``AIRFLOW__STATE_STORE__*`` / ``AIRFLOW__WORKERS__*`` variables."""
    found: list[tuple[str, str, str]] = []  # (section, option, where)
    for section in (*_OWN_SECTIONS, *_SHARED_SECTIONS):
        if parser is not None and parser.has_section(section):
            found += [(section, option, str(config_file)) for option in parser.options(section)]
        prefix = f"AIRFLOW__{section.upper()}__"
        found += [
            (section, name[len(prefix) :].lower(), f"environment variable {name}")
            for name in environ
            if name.startswith(prefix)
        ]
    notes = []
    for section, option, where in found:
        known = [spec.option for spec in specs if spec.section == section]
        if option in known:
            continue
        import difflib  # only for an unknown option: every command reads the config

        close = difflib.get_close_matches(option, known, n=1, cutoff=0.6 if section in _OWN_SECTIONS else 0.8)
        if not close and section not in _OWN_SECTIONS:
            continue
        hint = f"did you mean {close[0]}?" if close else f"known options: {', '.join(known)}"
        notes.append(Note(f"{where}: unknown option [{section}] {option} is ignored; {hint}"))
    return notes


def describe_source(setting: Setting) -> str:
    """Where a value came from, as a person reads it."""
    return _where(setting.source)
