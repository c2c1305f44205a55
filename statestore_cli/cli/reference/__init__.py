"""The generated pages of the manual: ``docs/reference/commands.md`` and ``docs/reference/configuration.md``.

``python -m statestore_cli.cli.reference`` writes both into the checkout's ``docs/`` (or the folder given);
``--check`` writes nothing and exits 1 naming every page that differs from what it would write.

The command reference (``commands_page``) is read from the click command tree typer builds from
``cli.root_command`` (``command_tree``: every command, argument and option, with its help, default and
environment variable), never from ``--help`` output; the exit-code table, the one place those codes are
described, is ``EXIT_CODES`` (``exit_codes``). The configuration reference (``configuration_page``) is read
from ``config/options.toml`` and the lookup order the ``config.settings`` module documents. Nothing on the
CLI's start-up path imports this package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from statestore_cli.cli.reference.commands_page import commands_page
from statestore_cli.cli.reference.configuration_page import configuration_page
from statestore_cli.cli.reference.exit_codes import EXIT_CODES
from statestore_cli.cli.reference.markdown import REGENERATE

__all__ = ["COMMANDS_PAGE", "CONFIGURATION_PAGE", "EXIT_CODES", "PAGES", "REGENERATE", "main", "render_pages"]

COMMANDS_PAGE = "reference/commands.md"
CONFIGURATION_PAGE = "reference/configuration.md"
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
    checkout = Path(__file__).resolve().parents[3]  # statestore_cli/cli/reference/
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
