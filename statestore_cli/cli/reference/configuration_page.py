"""``docs/reference/configuration.md``: every configuration option from ``config/options.toml``, the lookup
order ``config.settings`` documents, and the command-line options that default to each option."""

from __future__ import annotations

import re

from statestore_cli.cli.reference.command_tree import command_tree, config_option_of, is_argument, plain_help
from statestore_cli.cli.reference.markdown import anchor, code_span, config_link, generated_note, md_heading, md_table
from statestore_cli.config import settings as config_settings
from statestore_cli.config.options import OptionSpec, expected_value, load_option_specs


def _rst_to_markdown(text: str) -> str:
    return re.sub(r"``(.+?)``", lambda m: code_span(m.group(1)), text)


def lookup_order() -> str:
    """The lookup order as ``config.settings`` documents it (its docstring after the summary line)."""
    doc = config_settings.__doc__ or ""
    _summary, _, rest = doc.strip().partition("\n\n")
    return _rst_to_markdown(rest.strip())


_NO_DEFAULT = "(none)"


def _option_default(spec: OptionSpec) -> str:
    if spec.default == "" or spec.default is None:
        return _NO_DEFAULT
    if isinstance(spec.default, bool):
        return code_span(str(spec.default).lower())
    return code_span(str(spec.default).replace("{AIRFLOW_HOME}", "$AIRFLOW_HOME"))


def _accepts(spec: OptionSpec) -> str:
    words = expected_value(spec)
    if spec.type == "timeout":
        words += f", at most {spec.max} seconds"
    if spec.default == "" and spec.type in ("class", "import", "json", "schema"):
        words += "; empty = unset"
    return words


def _cli_options() -> dict[tuple[str, str], list[str]]:
    """For each configuration option, the command-line options that default to it or override it."""
    found: dict[tuple[str, str], list[str]] = {}
    for entry in command_tree():
        for param in entry.command.params:
            key = config_option_of(plain_help(getattr(param, "help", None)))
            if key is not None and not is_argument(param):
                words = f"{entry.path} {param.opts[0]}" if entry.name else f"statestore {param.opts[0]} ..."
                found.setdefault(key, []).append(f"[{code_span(words)}](commands.md#{anchor(entry.path)})")
    return found


def _option_section(spec: OptionSpec, cli: list[str]) -> list[str]:
    lines = [md_heading(3, code_span(f"[{spec.section}] {spec.option}")), "", spec.description, ""]
    if spec.notes:
        lines += [spec.notes, ""]
    lines += [
        f"- Accepts: {_accepts(spec)}.",
        f"- Default: {_option_default(spec)}.",
        f"- Environment variable: {code_span(spec.env_var)}.",
    ]
    if spec.sensitive:
        lines.append(
            f"- Also from a command or a secret: {code_span(spec.env_var + '_CMD')}, "
            f"{code_span(spec.env_var + '_SECRET')}, "
            f"and {code_span(spec.option + '_cmd')} / {code_span(spec.option + '_secret')} in the file "
            "(see the [lookup order](#lookup-order))."
        )
    if spec.secret:
        lines.append(
            "- Secret: `config show` masks it; an error about an invalid value hides it (a URL's password as `***`)."
        )
    if cli:
        lines.append("- On the command line: " + ", ".join(cli) + ".")
    return [*lines, ""]


def configuration_page() -> str:
    specs = load_option_specs()
    cli = _cli_options()
    lines = [
        "# Configuration reference",
        "",
        generated_note("`statestore_cli/config/options.toml` and the docstring of `statestore_cli/config/settings.py`"),
        "",
        "statestore reads Airflow's configuration: an `airflow.cfg`-style file and `AIRFLOW__{SECTION}__{OPTION}`",
        "environment variables. These are all the options it reads;",
        "[`config/airflow.cfg`](../../config/airflow.cfg) lists them at their defaults, ready to merge into a",
        "deployment's file, and `statestore config show` prints each effective value and where it came from.",
        "Commands, secrets, the schema and engine arguments next to a real Airflow:",
        "[operations guide](../operations.md#running-next-to-airflow); a custom backend's own options:",
        "[backends](../backends.md).",
        "",
        md_heading(2, "Lookup order"),
        "",
        lookup_order(),
        "",
        md_heading(2, "Options"),
        "",
        *md_table(
            ("option", "default", "environment variable"),
            (
                [config_link((spec.section, spec.option)), _option_default(spec), code_span(spec.env_var)]
                for spec in specs
            ),
        ),
        "",
    ]
    section = None
    for spec in specs:
        if spec.section != section:
            section = spec.section
            lines += [md_heading(2, code_span(f"[{section}]")), ""]
        lines += _option_section(spec, cli.get((spec.section, spec.option), []))
    return "\n".join(lines).rstrip("\n") + "\n"
