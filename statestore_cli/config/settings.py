"""Settings: the effective ``[state_store]``, ``[workers]`` and ``[database]`` options.

Lookup order, first match wins, for every option:

1. ``conn_override`` (``sql_alchemy_conn`` only; the CLI's ``--conn``), ``connect_timeout_override``
   (``connect_timeout`` only; the CLI's ``--connect-timeout``) and ``lock_timeout_override``
   (``lock_timeout`` only; the ``--lock-timeout`` of the CLI's writing commands);
2. the environment variable ``AIRFLOW__{SECTION}__{OPTION}``;
3. the INI file: ``config_path`` if given (it must exist), else ``$AIRFLOW_CONFIG``, else
   ``$AIRFLOW_HOME/airflow.cfg`` with ``AIRFLOW_HOME`` defaulting to ``~/airflow`` (a discovered
   file that does not exist is skipped, as Airflow does before it writes one, but a missing
   ``$AIRFLOW_CONFIG`` is a warning: it usually means another database than the one meant);
4. the default declared in ``options.toml``.

Options of ``[state_store]`` and ``[workers]`` the schema does not know are warnings
(``Settings.warnings``) naming the closest known option: a typo must not fall back to the default
unnoticed. ``[workers]`` holds many Airflow options, so there only a near miss is reported.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from statestore_cli.errors import PARAMETER, ConfigError, Note

if TYPE_CHECKING:
    import configparser
    from datetime import timedelta

BUILTIN_BACKEND = "statestore_cli.backends.metastore.MetastoreBackend"
_BUILTIN_ALIASES = {BUILTIN_BACKEND, "statestore_cli.MetastoreBackend"}  # the public re-export, same class
# [scheme://]user:password@ in a URL SQLAlchemy could not parse; over-masks rather than leaks
_URL_PASSWORD = re.compile(r"^((?:[^:/@]*://)?[^:/@]*:).*@", re.DOTALL)
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

    @property
    def env_var(self) -> str:
        return f"AIRFLOW__{self.section.upper()}__{self.option.upper()}"


class Setting(NamedTuple):
    """One effective option: its value and where it came from."""

    spec: OptionSpec
    value: Any
    source: str  # "default", "env AIRFLOW__...", "file /path/airflow.cfg", "conn_override"


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


def _invalid(spec: OptionSpec, raw: str, source: str, expected: str) -> ConfigError:
    parameter = source if source in _OVERRIDES else None  # named as the caller names it
    where = PARAMETER if parameter else _where(source)
    return ConfigError(
        f"{where}: invalid value {raw!r} for [{spec.section}] {spec.option}: expected {expected}", parameter=parameter
    )


def _int_range(spec: OptionSpec) -> str:
    if spec.min is None:
        return f"a whole number <= {spec.max}"
    return f"a whole number from {spec.min} to {spec.max}"


def _convert(spec: OptionSpec, raw: str, source: str) -> Any:
    text = raw.strip()
    if spec.type == "int":
        if not re.fullmatch(r"[+-]?\d+", text):
            raise _invalid(spec, raw, source, _int_range(spec))
        number = int(text)
        if (spec.min is not None and number < spec.min) or number > spec.max:
            raise _invalid(spec, raw, source, _int_range(spec))
        return number
    if spec.type == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise _invalid(spec, raw, source, "a boolean (true/false, yes/no, on/off, 1/0)")
    if spec.type == "timeout":
        return _timeout(spec, raw, source)
    if spec.type == "duration":
        from statestore_cli.errors import InvalidInputError
        from statestore_cli.retention import parse_age

        try:
            parse_age(text, f"[{spec.section}] {spec.option}")
        except InvalidInputError:
            raise _invalid(spec, raw, source, "0 or a duration such as 12h, 2d, 1d12h or P1D") from None
        return text  # as written, for `config show`; ``Settings`` reads it as a timedelta
    if spec.type == "class":
        if text and not _DOTTED.fullmatch(text):
            raise _invalid(spec, raw, source, "a dotted path such as mypackage.module.ClassName")
        return text
    if not text:
        raise _invalid(spec, raw, source, "a SQLAlchemy URL such as sqlite:////path/airflow.db")
    if text.startswith("sqlite:///") and "?" not in text:
        return text  # a plain SQLite file URL needs no parser (and the fast `get` path no SQLAlchemy)
    from sqlalchemy.engine import make_url  # here, not at the top: config is read before SQLAlchemy is needed
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(text)
    except (ArgumentError, ValueError):
        masked = _URL_PASSWORD.sub(r"\1***@", raw)  # never echo a password into an error message
        raise _invalid(spec, masked, source, "a SQLAlchemy URL such as sqlite:////path/airflow.db") from None
    return text


def _timeout(spec: OptionSpec, raw: str, source: str) -> str:
    """A timeout as written (for `config show`): a positive duration; ``timeout_seconds`` reads it."""
    from statestore_cli.errors import InvalidInputError

    text = raw.strip()
    try:
        seconds = timeout_seconds(text, spec.option)
    except InvalidInputError:
        raise _invalid(spec, raw, source, "a positive duration such as 10s, 2m or PT30S") from None
    if seconds > spec.max:
        raise _invalid(spec, raw, source, f"at most {spec.max} seconds")
    return text


def timeout_seconds(text: str, what: str) -> float:
    """Seconds of a positive duration (``10s``, ``2m``, ``PT30S``)."""
    from statestore_cli.errors import InvalidInputError
    from statestore_cli.retention import parse_duration

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
    ) -> None:
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
        env_var = f"AIRFLOW__{section.upper()}__{option.upper()}"
        if env_var in self._environ:
            return self._environ[env_var], f"environment variable {env_var}"
        if self._parser is not None and self._parser.has_option(section, option):
            return self._parser.get(section, option), str(self.config_file)
        return None

    def setting(self, section: str, option: str) -> Setting:
        return self._settings[(section, option)]

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
        from statestore_cli.retention import parse_age

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
) -> Settings:
    """Resolve every option in the documented lookup order (see the module docstring)."""
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
    for spec in specs:
        override, override_source = overrides.get(spec.option, (None, ""))
        if override is not None:
            raw, source = override, override_source
        elif spec.env_var in env:
            raw, source = env[spec.env_var], f"env {spec.env_var}"
        elif parser is not None and parser.has_option(spec.section, spec.option):
            raw, source = parser.get(spec.section, spec.option), f"file {config_file}"
        else:
            default = spec.default
            if isinstance(default, str):
                default = default.replace("{AIRFLOW_HOME}", str(home))
            resolved[(spec.section, spec.option)] = Setting(spec, default, "default")
            continue
        resolved[(spec.section, spec.option)] = Setting(spec, _convert(spec, raw, source), source)
    searched = describe_search(config_path, env)
    return Settings(resolved, config_file, home, searched, tuple(warnings), parser=parser, environ=env)


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
