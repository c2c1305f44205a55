"""The airflow.cfg-style file: where it is looked for (``config_path``, ``$AIRFLOW_CONFIG``,
``$AIRFLOW_HOME/airflow.cfg``), how the search is told, and reading it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from statestore_cli.errors import PARAMETER, ConfigError, Note

if TYPE_CHECKING:
    import configparser


def airflow_home(environ: Mapping[str, str]) -> Path:
    """``$AIRFLOW_HOME``, or ``~/airflow`` as Airflow defaults it."""
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


def read_config_file(path: Path) -> configparser.RawConfigParser:
    """The file's options, or a ``ConfigError`` naming the line that is neither a header nor an option."""
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


def missing_config_warning(config_path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> list[Note]:
    """A warning when ``$AIRFLOW_CONFIG`` names no file: it usually means another database than the one meant."""
    named = environ.get("AIRFLOW_CONFIG")
    if config_path is not None or not named or Path(named).expanduser().is_file():
        return []
    return [
        Note(
            f"$AIRFLOW_CONFIG names {Path(named).expanduser()}, which does not exist (or is not a file): "
            "using the environment and the defaults; fix the path or unset AIRFLOW_CONFIG"
        )
    ]
