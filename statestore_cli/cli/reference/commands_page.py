"""``docs/reference/commands.md``: every command, argument and option with its help, default and
environment variable, read from the command tree; and the exit codes."""

from __future__ import annotations

from enum import Enum
from typing import Any

from statestore_cli.cli.reference.command_tree import (
    Command,
    command_tree,
    config_option_of,
    help_examples,
    help_paragraphs,
    is_argument,
    plain_help,
)
from statestore_cli.cli.reference.exit_codes import EXIT_CODES, exit_codes_for
from statestore_cli.cli.reference.markdown import anchor, code_span, config_link, generated_note, md_heading, md_table
from statestore_cli.config.options import env_var_name

_TYPE_WORDS = {"str": "text", "text": "text", "int": "integer", "integer": "integer", "integer range": "integer"}
_TYPE_WORDS |= {"float": "number", "float range": "number", "path": "path", "filename": "path", "boolean": "boolean"}


def _metavar(param: Any) -> str:
    if param.metavar:
        return str(param.metavar)
    return str(param.name).upper()


def _value(param: Any) -> str:
    """What an option or argument takes: a flag, or its metavar (or type) with the accepted values."""
    if getattr(param, "is_flag", False):
        return "flag"
    type_name = str(getattr(param.type, "name", "text"))
    named = param.metavar and not is_argument(param)  # an argument's metavar is its name, in the first column
    parts = [code_span(param.metavar) if named else _TYPE_WORDS.get(type_name, type_name)]
    choices = getattr(param.type, "choices", None)
    if choices:
        parts.append("(" + ", ".join(code_span(getattr(c, "value", c)) for c in choices) + ")")
    low, high = getattr(param.type, "min", None), getattr(param.type, "max", None)
    if low is not None and high is not None:
        parts.append(f"({low} to {high})")
    elif low is not None:
        parts.append(f"(≥ {low})" if not getattr(param.type, "min_open", False) else f"(> {low})")
    elif high is not None:
        parts.append(f"(≤ {high})" if not getattr(param.type, "max_open", False) else f"(< {high})")
    if getattr(param, "multiple", False):
        parts.append("repeatable")
    return " ".join(parts)


def _option_names(param: Any) -> str:
    if is_argument(param):
        return code_span(_metavar(param))
    names = [*param.opts, *getattr(param, "secondary_opts", [])]
    return ", ".join(code_span(name) for name in names)


def _default(param: Any, help_text: str) -> str:
    if getattr(param, "required", False):
        return "required"
    default = param.default
    if getattr(param, "is_flag", False):
        return "on" if default else "off"
    if default is None or default == () or default == []:
        key = config_option_of(help_text)
        return config_link(key, "configuration.md") if key else "—"
    if isinstance(default, Enum):
        default = default.value
    return code_span(default)


def _env_vars(param: Any, help_text: str) -> str:
    envvar = getattr(param, "envvar", None)
    names = [envvar] if isinstance(envvar, str) else list(envvar or [])
    key = config_option_of(help_text)
    if key is not None:
        names.append(env_var_name(*key))
    return ", ".join(code_span(name) for name in names) or "—"


def _usage(entry: Command) -> str:
    pieces = [entry.path]
    if any(not is_argument(p) for p in entry.command.params):
        pieces.append("[OPTIONS]")
    for param in entry.command.params:
        if is_argument(param):
            pieces.append(_metavar(param) if param.required else f"[{_metavar(param)}]")
    if entry.subcommands:
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _command_section(entry: Command) -> list[str]:
    command = entry.command
    lead, *body = help_paragraphs(command.help) or [""]
    lines = [md_heading(2, entry.heading), "", lead, ""]
    for paragraph in body:
        lines += [paragraph, ""]
    lines += [f"Usage: {code_span(_usage(entry))}", ""]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    if params:
        rows = []
        for param in params:
            help_text = plain_help(getattr(param, "help", None))
            rows.append(
                [
                    _option_names(param),
                    _value(param),
                    _default(param, help_text),
                    _env_vars(param, help_text),
                    help_text,
                ]
            )
        header = ("argument or option" if any(is_argument(p) for p in params) else "option",)
        lines += [*md_table((*header, "value", "default", "environment", "description"), rows), ""]
    if entry.subcommands:
        lines += ["Commands:", ""]
        for name, sub in entry.subcommands.items():
            if not getattr(sub, "hidden", False):
                path = f"{entry.path} {name}"
                summary = (help_paragraphs(sub.help) or [""])[0]
                lines.append(f"- [{code_span(path)}](#{anchor(path)}): {summary}")
        lines.append("")
    else:
        codes = ", ".join(str(code) for code in exit_codes_for(entry.name))
        lines += [f"Exit codes: {codes} ([what each means](#exit-codes)).", ""]
    examples = help_examples(command.epilog)
    if examples:
        lines += ["Examples:", "", "```sh", *examples, "```", ""]
    return lines


def commands_page() -> str:
    tree = command_tree()
    lines = [
        "# Command reference",
        "",
        generated_note(
            "the command tree of `statestore_cli/cli/root_command.py` and `EXIT_CODES` in "
            "`statestore_cli/cli/reference/exit_codes.py`"
        ),
        "",
        "Every command, argument and option of `statestore`, with the help `--help` shows, and the",
        "[exit codes](#exit-codes). Root options go before the command, a command's own options after it;",
        "every command also takes `-h`/`--help`. An option whose default is a configuration option is set by",
        "that option's environment variable too ([configuration reference](configuration.md)). What the",
        "commands do in practice is in the [guide](../usage.md).",
        "",
    ]
    for entry in tree:
        summary = (help_paragraphs(entry.command.help) or [""])[0]
        indent = "  " * (entry.path.count(" ") - 1) if entry.name else ""
        lines.append(f"{indent}- [{entry.heading}](#{anchor(entry.path)}): {summary}")
    lines += ["- [Exit codes](#exit-codes)", ""]
    for entry in tree:
        lines += _command_section(entry)
    lines += [
        md_heading(2, "Exit codes"),
        "",
        "The same codes for every command; the commands that can end with a code other than 0, 2, 3, 130 and",
        "143 are named in its row and listed under each command above. How errors are worded is in",
        "[Errors and faults](../errors.md).",
        "",
        *md_table(("code", "meaning"), ([str(row.code), row.meaning] for row in EXIT_CODES)),
    ]
    return "\n".join(lines) + "\n"
