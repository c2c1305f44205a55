"""How the CLI's help is written: config sections, example epilogs, docstrings as paragraphs.

Help is rich on a terminal and plain (click's layout) into a pipe or a file, as command output is:
typer's rich help layer loads rich.markdown, rich.syntax and pygments, a third of a `--help` run."""

import inspect
import re
import sys

RICH_HELP = sys.stdout.isatty()

# A task scope for examples, as a user types it.
TASK_EXAMPLE = "--dag-id etl --run-id manual__1 --task-id submit"

_EXAMPLE_WIDTH = 76  # an example line fits an 80-column terminal with rich help's margins


def section(name: str) -> str:
    """A config section as help shows it: rich help reads [...] as markup."""
    return f"\\[{name}]" if RICH_HELP else f"[{name}]"


def examples(*lines: str) -> str:
    """A help epilog of example command lines, each on its own line in plain and rich help; a long one
    is continued on the next line with a backslash, between words and never inside a quoted one, so it
    neither wraps in the middle of its JSON nor stops being a command to paste."""
    body = "Examples:\n" + "\n".join(_example(f"statestore {line}") for line in lines)
    return body if RICH_HELP else "\b\n" + body  # \b: click keeps the lines as they are


def _example(command: str) -> str:
    words = re.findall(r"(?:'[^']*'|\"[^\"]*\"|\S)+", command)  # a quoted word ('{"id": 1}') is one word
    for at in range(len(words) - 2, -1, -1):  # an option and its value stay on one line (-o json)
        if words[at].startswith("-") and not words[at + 1].startswith("-") and "=" not in words[at]:
            words[at : at + 2] = [f"{words[at]} {words[at + 1]}"]
    lines, line = [], "  "
    for at, word in enumerate(words):
        continued = 2 if at < len(words) - 1 else 0  # room for " \\" unless it is the last word
        if line.strip() and len(line) + 1 + len(word) + continued > _EXAMPLE_WIDTH:
            lines.append(line + " \\")
            line = "      "
        line += ("" if not line.strip() else " ") + word
    return "\n".join([*lines, line])


def reflow(doc: str) -> str:
    """A docstring's paragraphs as one line each: rich help keeps the line breaks of the source, which
    then fall anywhere in the terminal's lines; the terminal's width decides alone."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)
