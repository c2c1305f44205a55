"""``cli.root_command.app_for``: a process builds only the command its command line names, and that command is
the same as in the whole tree (its options, arguments, help); a line that names none gets the whole tree."""

from __future__ import annotations

from typing import Any

import pytest
import typer
import typer.main

from statestore_cli.cli import root_command
from statestore_cli.cli.root_command import app, app_for

WHOLE = typer.main.get_command(app)
assert isinstance(WHOLE, typer.core.TyperGroup)
NAMES = sorted(WHOLE.commands)


def tree(argv: list[str]) -> list[str]:
    command = typer.main.get_command(app_for(argv))
    assert isinstance(command, typer.core.TyperGroup)
    return list(command.commands)


def described(command: Any, path: str = "statestore") -> list[tuple]:
    """A command's help as a user reads it, with its parameters, and so for each subcommand of a group."""
    with typer.Context(command, info_name=path) as ctx:
        found = [(path, command.get_help(ctx), [_param(p) for p in command.params])]
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        found += described(sub, f"{path} {name}")
    return found


def _param(param: Any) -> tuple:
    names = ("name", "opts", "secondary_opts", "required", "default", "nargs", "multiple", "hidden", "help")
    return (*(getattr(param, n, None) for n in names), getattr(param.type, "name", None))


@pytest.mark.parametrize("name", NAMES)
def test_a_command_line_builds_only_its_command_and_the_same_one(name):
    pruned = typer.main.get_command(app_for([name, "--help"]))
    assert isinstance(pruned, typer.core.TyperGroup)
    assert list(pruned.commands) == [name]
    assert described(pruned.commands[name], name) == described(WHOLE.commands[name], name)
    assert [_param(p) for p in pruned.params] == [_param(p) for p in WHOLE.params]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["list"], ["list"]),
        (["--conn", "sqlite:////tmp/x.db", "--debug", "db", "check"], ["db"]),
        (["--conn=sqlite:////tmp/x.db", "--connect-timeout", "5s", "get", "--dag-id", "d"], ["get"]),
        (["--config", "list", "clean"], ["clean"]),  # a root option's value is not the command
    ],
)
def test_the_command_is_the_first_word_after_the_root_options(argv, expected):
    assert tree(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [[], ["--help"], ["-h"], ["--version"], ["lsit"], ["--bogus", "list"], ["--", "list"], ["--debug"], ["--conn"]],
    ids=repr,
)
def test_a_line_that_names_no_command_gets_the_whole_tree(argv):
    assert app_for(argv) is app


def test_shell_completion_gets_the_whole_tree(monkeypatch):
    monkeypatch.setenv("_STATESTORE_COMPLETE", "complete_bash")
    assert app_for(["list"]) is app


def test_the_root_options_it_skips_are_the_root_commands():
    """Every root option that does not print and exit (help, version, typer's completion options) is known to
    ``app_for``, with or without a value as the root command declares it."""
    prints = {"install_completion", "show_completion"}
    options = [p for p in WHOLE.params if isinstance(p, typer.core.TyperOption) and not p.is_eager]
    options = [p for p in options if p.name not in prints]
    valued = {o for p in options if not p.is_flag for o in p.opts}
    flags = {o for p in options if p.is_flag for o in p.opts}
    assert (valued, flags) == (set(root_command.ROOT_VALUED_OPTIONS), set(root_command.ROOT_FLAG_OPTIONS))
