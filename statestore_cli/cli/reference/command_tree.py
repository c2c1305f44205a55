"""The click command tree typer builds from ``cli.root_command``, and what both pages read from it: a
command's help as plain paragraphs, its examples, and the configuration option an option's help names."""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple

from statestore_cli.cli.reference.markdown import code_span
from statestore_cli.config.options import load_option_specs


class Command(NamedTuple):
    path: str  # "statestore db init"
    command: Any  # the click command (typer vendors click as typer._click; older typers use click itself)

    @property
    def name(self) -> str:
        """As typed after ``statestore`` ("" for the root)."""
        return self.path.partition(" ")[2]

    @property
    def heading(self) -> str:
        return code_span(self.path)

    @property
    def subcommands(self) -> dict[str, Any]:
        return dict(getattr(self.command, "commands", None) or {})


def command_tree() -> list[Command]:
    """Every command typer builds from the CLI, the root first, each group before its commands, in the
    order ``--help`` lists them; hidden ones left out."""
    import typer

    from statestore_cli.cli.root_command import app

    found: list[Command] = []

    def walk(path: str, command: Any) -> None:
        found.append(Command(path, command))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            if not getattr(sub, "hidden", False):
                walk(f"{path} {name}", sub)

    walk("statestore", typer.main.get_command(app))
    return found


def plain_help(text: str | None) -> str:
    """Help text as written in plain help: rich help escapes config sections (``\\[state_store]``) and
    click's ``\\b`` marks a paragraph kept as it is; either may be there, depending on the terminal the
    CLI was imported under."""
    return (text or "").replace("\\[", "[").replace("\b\n", "").replace("\b", "").strip()


def help_paragraphs(text: str | None) -> list[str]:
    return [" ".join(p.split()) for p in plain_help(text).split("\n\n") if p.strip()]


def help_examples(epilog: str | None) -> list[str]:
    """The example command lines of a help epilog ("Examples:" and lines indented by two)."""
    lines = plain_help(epilog).splitlines()
    if not lines or lines[0].strip() != "Examples:":
        return [line for line in lines if line.strip()]
    return [line[2:] if line.startswith("  ") else line for line in lines[1:] if line.strip()]


_CONFIG_MENTION = re.compile(r"(?:Default: |overrides )\[([\w.]+)\] (\w+)")


@functools.cache
def _option_keys() -> frozenset[tuple[str, str]]:
    return frozenset((spec.section, spec.option) for spec in load_option_specs())


def config_option_of(help_text: str) -> tuple[str, str] | None:
    """The configuration option an option's help says it defaults to or overrides."""
    match = _CONFIG_MENTION.search(help_text)
    if match is None:
        return None
    key = (match.group(1), match.group(2))
    return key if key in _option_keys() else None


def is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"
