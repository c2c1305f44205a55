"""The generated pages of the manual: ``docs/reference/commands.md`` and ``docs/reference/configuration.md``.

``python -m statestore_cli.cli.reference`` writes both into the checkout's ``docs/`` (or the folder given);
``--check`` writes nothing and exits 1 naming every page that differs from what it would write.

The command reference is read from the click command tree typer builds from ``cli.root_command`` (every command,
argument and option, with its help, default and environment variable), never from ``--help`` output; the
exit-code table, the one place those codes are described, is ``EXIT_CODES`` below. The configuration
reference is read from ``config/options.toml`` and the lookup order the ``config.settings`` module
documents. Nothing on the CLI's start-up path imports this module.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

from statestore_cli import errors
from statestore_cli.config import settings as config_settings
from statestore_cli.config.options import OptionSpec, env_var_name, expected_value, load_option_specs

COMMANDS_PAGE = "reference/commands.md"
CONFIGURATION_PAGE = "reference/configuration.md"
REGENERATE = "python -m statestore_cli.cli.reference"
_ALL = None  # ExitCode.commands: every command can end with this code


class ExitCode(NamedTuple):
    code: int
    meaning: str  # Markdown, one table cell
    commands: tuple[str, ...] | None = _ALL  # the commands (as typed after `statestore`) that can exit so


EXIT_CODES = (
    ExitCode(errors.EXIT_OK, "success"),
    ExitCode(
        errors.EXIT_NOT_FOUND,
        "`get` or `set --keep-expiry` did not find the key (or, for an asset scope, the asset: `no such asset`); "
        "`runs delete` / `assets delete` did not find the run or asset; `clear` was answered no (likewise "
        "`runs delete`, `assets delete`, `assets sweep`, `orphans --delete`), or got no answer (end of input): "
        "nothing deleted, said as an answer, not an error (`statestore: nothing deleted (answered no)`); `diff` "
        "found the store and the file differ (as diff(1))",
        ("get", "set", "clear", "assets sweep", "assets delete", "runs delete", "orphans", "diff"),
    ),
    ExitCode(
        errors.EXIT_USAGE,
        "bad usage or input: unknown option, a group without its command (`statestore db`: its help on stdout, "
        "then the error line), missing scope, invalid JSON or duration, a null, NaN, Infinity or oversized value, "
        "a timestamp without a time zone or (without `--force`) in the past, invalid configuration (a `_cmd` "
        "command that cannot run or prints nothing, a `_secret` without `[secrets] backend` or missing from it, "
        "bad `sql_alchemy_connect_args` / `sql_alchemy_engine_args`, `sql_alchemy_schema` on SQLite), missing "
        "driver, a deleting command (`clear`, `assets sweep`, `runs delete`, `assets delete`, `orphans --delete`) "
        "without `--yes` when stdin is not a terminal, `orphans --delete` where the database references none of "
        "the backend's objects (without `--all-unreferenced`), a `--backup FILE` that exists and is not empty (or "
        "is a directory, `-`, or in a folder missing or not writable), `--backup` with `--dry-run`, a bad line in "
        "an `import` or a `diff` FILE (or a dag run or "
        "asset missing from an Airflow "
        "database); on MySQL/MariaDB a key, dag run or asset differing from a stored one (or another line's) only "
        "in trailing spaces, and an asset name or uri outside latin1, to write or to filter by; `runs delete` / "
        "`assets delete` on an Airflow database",
    ),
    ExitCode(
        errors.EXIT_OPERATIONAL,
        "operational failure: a `_cmd` command that failed or did not finish within `[state_store] "
        "command_timeout`, a `[secrets] backend` that raised, database unreachable, schema missing (an Airflow "
        "database older than 3.3 included), a lock another session held past the lock timeout, backend error, "
        "another `--exclusive` clean running, `clean --metrics-file` could not write the file after the clean "
        "(what it deleted stays deleted), a `--backup` file that could not be written or synced midway (the batch "
        "in progress rolled back), a stored value a `--backup` cannot write as JSON, a `backend check` that did "
        "not pass, an `orphans --delete` that could "
        "not delete every orphan",
    ),
    ExitCode(
        errors.EXIT_STOPPED,
        "`clean --max-runtime` stopped before every expired key was deleted (run it again)",
        ("clean",),
    ),
    ExitCode(
        errors.EXIT_SKIPPED,
        "`clean --fail-on-skip` with a custom `[state_store] backend`: nothing was cleaned",
        ("clean",),
    ),
    ExitCode(
        errors.EXIT_INTERRUPTED,
        "interrupted by Ctrl-C, at any moment (connecting included): a clean that has started deleting stops "
        "after its current batch, a dry run says how many rows it listed, `clear` at its question deletes "
        "nothing, an import says which lines were imported",
    ),
    ExitCode(
        errors.EXIT_TERMINATED,
        "terminated by SIGTERM, at any moment (connecting included): a clean that has started deleting stops "
        "after its current batch",
    ),
)


# -- Markdown -----------------------------------------------------------------------------------------------
def _code(text: object) -> str:
    """``text`` as an inline code span (a longer fence when it holds backticks)."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    """``text`` inside one table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return lines


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading: lower case, code marks and punctuation
    other than ``-`` and ``_`` dropped, spaces as ``-``."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _heading(level: int, text: str) -> str:
    return f"{'#' * level} {text}"


def _generated_note(sources: str) -> str:
    return f"<!-- Generated by `{REGENERATE}` from {sources}: edit those, then run it again. -->"


# -- the command tree ---------------------------------------------------------------------------------------
class Command(NamedTuple):
    path: str  # "statestore db init"
    command: Any  # the click command (typer vendors click as typer._click; older typers use click itself)

    @property
    def name(self) -> str:
        """As typed after ``statestore`` ("" for the root)."""
        return self.path.partition(" ")[2]

    @property
    def heading(self) -> str:
        return _code(self.path)

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


def _plain(text: str | None) -> str:
    """Help text as written in plain help: rich help escapes config sections (``\\[state_store]``) and
    click's ``\\b`` marks a paragraph kept as it is; either may be there, depending on the terminal the
    CLI was imported under."""
    return (text or "").replace("\\[", "[").replace("\b\n", "").replace("\b", "").strip()


def _paragraphs(text: str | None) -> list[str]:
    return [" ".join(p.split()) for p in _plain(text).split("\n\n") if p.strip()]


def _examples(epilog: str | None) -> list[str]:
    """The example command lines of a help epilog ("Examples:" and lines indented by two)."""
    lines = _plain(epilog).splitlines()
    if not lines or lines[0].strip() != "Examples:":
        return [line for line in lines if line.strip()]
    return [line[2:] if line.startswith("  ") else line for line in lines[1:] if line.strip()]


_CONFIG_MENTION = re.compile(r"(?:Default: |overrides )\[([\w.]+)\] (\w+)")


@functools.cache
def _option_keys() -> frozenset[tuple[str, str]]:
    return frozenset((spec.section, spec.option) for spec in load_option_specs())


def _config_option(help_text: str) -> tuple[str, str] | None:
    """The configuration option an option's help says it defaults to or overrides."""
    match = _CONFIG_MENTION.search(help_text)
    if match is None:
        return None
    key = (match.group(1), match.group(2))
    return key if key in _option_keys() else None


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


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
    named = param.metavar and not _is_argument(param)  # an argument's metavar is its name, in the first column
    parts = [_code(param.metavar) if named else _TYPE_WORDS.get(type_name, type_name)]
    choices = getattr(param.type, "choices", None)
    if choices:
        parts.append("(" + ", ".join(_code(getattr(c, "value", c)) for c in choices) + ")")
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
    if _is_argument(param):
        return _code(_metavar(param))
    names = [*param.opts, *getattr(param, "secondary_opts", [])]
    return ", ".join(_code(name) for name in names)


def _config_link(key: tuple[str, str], prefix: str = "") -> str:
    heading = f"[{key[0]}] {key[1]}"
    return f"[{_code(heading)}]({prefix}#{anchor(heading)})"


def _default(param: Any, help_text: str) -> str:
    if getattr(param, "required", False):
        return "required"
    default = param.default
    if getattr(param, "is_flag", False):
        return "on" if default else "off"
    if default is None or default == () or default == []:
        key = _config_option(help_text)
        return _config_link(key, "configuration.md") if key else "—"
    if isinstance(default, Enum):
        default = default.value
    return _code(default)


def _env_vars(param: Any, help_text: str) -> str:
    envvar = getattr(param, "envvar", None)
    names = [envvar] if isinstance(envvar, str) else list(envvar or [])
    key = _config_option(help_text)
    if key is not None:
        names.append(env_var_name(*key))
    return ", ".join(_code(name) for name in names) or "—"


def _usage(entry: Command) -> str:
    pieces = [entry.path]
    if any(not _is_argument(p) for p in entry.command.params):
        pieces.append("[OPTIONS]")
    for param in entry.command.params:
        if _is_argument(param):
            pieces.append(_metavar(param) if param.required else f"[{_metavar(param)}]")
    if entry.subcommands:
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _exit_codes_for(name: str) -> list[int]:
    return [row.code for row in EXIT_CODES if row.commands is _ALL or name in row.commands]


def _command_section(entry: Command) -> list[str]:
    command = entry.command
    lead, *body = _paragraphs(command.help) or [""]
    lines = [_heading(2, entry.heading), "", lead, ""]
    for paragraph in body:
        lines += [paragraph, ""]
    lines += [f"Usage: {_code(_usage(entry))}", ""]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    if params:
        rows = []
        for param in params:
            help_text = _plain(getattr(param, "help", None))
            rows.append(
                [
                    _option_names(param),
                    _value(param),
                    _default(param, help_text),
                    _env_vars(param, help_text),
                    help_text,
                ]
            )
        header = ("argument or option" if any(_is_argument(p) for p in params) else "option",)
        lines += [*_table((*header, "value", "default", "environment", "description"), rows), ""]
    if entry.subcommands:
        lines += ["Commands:", ""]
        for name, sub in entry.subcommands.items():
            if not getattr(sub, "hidden", False):
                path = f"{entry.path} {name}"
                summary = (_paragraphs(sub.help) or [""])[0]
                lines.append(f"- [{_code(path)}](#{anchor(path)}): {summary}")
        lines.append("")
    else:
        codes = ", ".join(str(code) for code in _exit_codes_for(entry.name))
        lines += [f"Exit codes: {codes} ([what each means](#exit-codes)).", ""]
    examples = _examples(command.epilog)
    if examples:
        lines += ["Examples:", "", "```sh", *examples, "```", ""]
    return lines


def commands_page() -> str:
    tree = command_tree()
    lines = [
        "# Command reference",
        "",
        _generated_note("the command tree of `statestore_cli/cli/root_command.py` and `EXIT_CODES` in its module"),
        "",
        "Every command, argument and option of `statestore`, with the help `--help` shows, and the",
        "[exit codes](#exit-codes). Root options go before the command, a command's own options after it;",
        "every command also takes `-h`/`--help`. An option whose default is a configuration option is set by",
        "that option's environment variable too ([configuration reference](configuration.md)). What the",
        "commands do in practice is in the [guide](../usage.md).",
        "",
    ]
    for entry in tree:
        summary = (_paragraphs(entry.command.help) or [""])[0]
        indent = "  " * (entry.path.count(" ") - 1) if entry.name else ""
        lines.append(f"{indent}- [{entry.heading}](#{anchor(entry.path)}): {summary}")
    lines += ["- [Exit codes](#exit-codes)", ""]
    for entry in tree:
        lines += _command_section(entry)
    lines += [
        _heading(2, "Exit codes"),
        "",
        "The same codes for every command; the commands that can end with a code other than 0, 2, 3, 130 and",
        "143 are named in its row and listed under each command above. How errors are worded is in",
        "[Errors and faults](../errors.md).",
        "",
        *_table(("code", "meaning"), ([str(row.code), row.meaning] for row in EXIT_CODES)),
    ]
    return "\n".join(lines) + "\n"


# -- the configuration ----------------------------------------------------------------------------------------
def _rst_to_markdown(text: str) -> str:
    return re.sub(r"``(.+?)``", lambda m: _code(m.group(1)), text)


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
        return _code(str(spec.default).lower())
    return _code(str(spec.default).replace("{AIRFLOW_HOME}", "$AIRFLOW_HOME"))


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
            key = _config_option(_plain(getattr(param, "help", None)))
            if key is not None and not _is_argument(param):
                words = f"{entry.path} {param.opts[0]}" if entry.name else f"statestore {param.opts[0]} ..."
                found.setdefault(key, []).append(f"[{_code(words)}](commands.md#{anchor(entry.path)})")
    return found


def _option_section(spec: OptionSpec, cli: list[str]) -> list[str]:
    lines = [_heading(3, _code(f"[{spec.section}] {spec.option}")), "", spec.description, ""]
    if spec.notes:
        lines += [spec.notes, ""]
    lines += [
        f"- Accepts: {_accepts(spec)}.",
        f"- Default: {_option_default(spec)}.",
        f"- Environment variable: {_code(spec.env_var)}.",
    ]
    if spec.sensitive:
        lines.append(
            f"- Also from a command or a secret: {_code(spec.env_var + '_CMD')}, {_code(spec.env_var + '_SECRET')}, "
            f"and {_code(spec.option + '_cmd')} / {_code(spec.option + '_secret')} in the file "
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
        _generated_note(
            "`statestore_cli/config/options.toml` and the docstring of `statestore_cli/config/settings.py`"
        ),
        "",
        "statestore reads Airflow's configuration: an `airflow.cfg`-style file and `AIRFLOW__{SECTION}__{OPTION}`",
        "environment variables. These are all the options it reads;",
        "[`config/airflow.cfg`](../../config/airflow.cfg) lists them at their defaults, ready to merge into a",
        "deployment's file, and `statestore config show` prints each effective value and where it came from.",
        "Commands, secrets, the schema and engine arguments next to a real Airflow:",
        "[operations guide](../operations.md#running-next-to-airflow); a custom backend's own options:",
        "[backends](../backends.md).",
        "",
        _heading(2, "Lookup order"),
        "",
        lookup_order(),
        "",
        _heading(2, "Options"),
        "",
        *_table(
            ("option", "default", "environment variable"),
            ([_config_link((spec.section, spec.option)), _option_default(spec), _code(spec.env_var)] for spec in specs),
        ),
        "",
    ]
    section = None
    for spec in specs:
        if spec.section != section:
            section = spec.section
            lines += [_heading(2, _code(f"[{section}]")), ""]
        lines += _option_section(spec, cli.get((spec.section, spec.option), []))
    return "\n".join(lines).rstrip("\n") + "\n"


# -- writing the pages ----------------------------------------------------------------------------------------
PAGES: dict[str, Callable[[], str]] = {COMMANDS_PAGE: commands_page, CONFIGURATION_PAGE: configuration_page}


def render_pages() -> dict[str, str]:
    """Every generated page, by its path under ``docs/``."""
    return {path: render() for path, render in PAGES.items()}


def stale_pages(docs: Path) -> Iterator[str]:
    """The pages under ``docs`` that differ from what ``render_pages`` gives (or are missing)."""
    for path, text in render_pages().items():
        target = docs / path
        if not target.is_file() or target.read_bytes() != text.encode("utf-8"):
            yield path


def _default_docs() -> Path | None:
    checkout = Path(__file__).resolve().parents[2]
    return checkout / "docs" if (checkout / "pyproject.toml").is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description="Write the generated pages of docs/reference/.")
    parser.add_argument("docs", nargs="?", type=Path, help="the docs folder (default: the checkout's docs/)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    docs = args.docs or _default_docs()
    if docs is None:
        parser.error("not run from a checkout: give the docs folder")
    if args.check:
        stale = list(stale_pages(docs))
        for path in stale:
            print(f"{docs / path} is out of date: run {REGENERATE}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in render_pages().items():
        target = docs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))
        print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
