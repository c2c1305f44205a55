"""Options of ``[state_store]`` and ``[workers]`` the schema does not know, as warnings naming the closest
known option: a typo must not fall back to the default unnoticed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from statestore_cli.errors import Note

if TYPE_CHECKING:
    import configparser

    from statestore_cli.config.options import OptionSpec

# Sections whose every option is ours, and sections shared with Airflow where only a near miss is reported.
_OWN_SECTIONS = ("state_store",)
_SHARED_SECTIONS = ("workers",)


def unknown_options(
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
