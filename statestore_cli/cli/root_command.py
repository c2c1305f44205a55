"""The ``statestore`` command line: each command resolves the settings, calls one library function
and hands the result to the render layer. Errors become a message and an exit code in one place:
``StateStoreGroup`` (``cli.errors_to_exits``) hands every ``StateStoreError`` to ``cli.failure``; a command
whose result must not exit 0 (a clean stopped early) returns it as an ``Outcome``, and the group exits with
its code.

This module completes the application: the root options, then the command modules, which register their
commands on the applications of ``cli.command_groups`` when imported. What the command modules share is in
modules of its own (``cli.options``, ``cli.context``, ``cli.confirm``, ``cli.help_text``)."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from statestore_cli import __version__
from statestore_cli.cli.command_groups import ALL_APPS, app
from statestore_cli.cli.context import CliState
from statestore_cli.cli.help_text import reflow, section
from statestore_cli.errors import InvalidInputError

# The command modules register their commands on the apps when imported; typer lists the commands in
# registration order, so this order is the order --help shows.
# isort: off
from statestore_cli.cli import db_config_commands  # noqa: F401
from statestore_cli.cli import keys_commands  # noqa: F401
from statestore_cli.cli import copy_command  # noqa: F401
from statestore_cli.cli import transfer_commands  # noqa: F401
from statestore_cli.cli import clean_command  # noqa: F401
from statestore_cli.cli import backend_commands  # noqa: F401
from statestore_cli.cli import lifecycle_commands  # noqa: F401
# isort: on

__all__ = ["app", "app_for"]


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"statestore {__version__}\n")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    config: Annotated[
        Optional[Path],
        typer.Option(
            "--config",
            metavar="PATH",
            help="airflow.cfg-style file (default: $AIRFLOW_CONFIG, else $AIRFLOW_HOME/airflow.cfg).",
        ),
    ] = None,
    conn: Annotated[
        Optional[str],
        typer.Option(
            "--conn",
            metavar="URL",
            help=f"SQLAlchemy URL of the database; overrides {section('database')} sql_alchemy_conn.",
        ),
    ] = None,
    api_url: Annotated[
        Optional[str],
        typer.Option(
            "--api-url",
            metavar="URL",
            envvar="STATESTORE_API_URL",
            show_envvar=False,
            help="Work through Airflow's REST API at this root URL (its api-server), opening no database; "
            f"overrides {section('state_store')} api_url. Token: $STATESTORE_API_TOKEN or $AIRFLOW_CLI_TOKEN.",
        ),
    ] = None,
    connect_timeout: Annotated[
        Optional[str],
        typer.Option(
            "--connect-timeout",
            metavar="DURATION",
            help="Give up when the database server does not accept a connection within this time (5s, 1m). "
            f"Default: {section('state_store')} connect_timeout (10s unless configured).",
        ),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show the Python traceback of an error.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    if conn is not None:  # the command line names a database: no API URL from the environment or a file applies
        _only_one(ctx, api_url)
        api_url = None
    ctx.obj = CliState(config_path=config, conn=conn, debug=debug, connect_timeout=connect_timeout, api_url=api_url)


def _only_one(ctx: typer.Context, api_url: Optional[str]) -> None:
    """--conn and --api-url both on the command line contradict each other; with --conn alone, an API URL
    from $STATESTORE_API_URL or a file does not apply (``load_settings``)."""
    source = ctx.get_parameter_source("api_url")
    if api_url is not None and source is not None and source.name == "COMMANDLINE":
        raise InvalidInputError(
            "--conn names a database and --api-url Airflow's REST API: give one of them",
        )


for _typer in ALL_APPS:
    for _command in _typer.registered_commands:
        if _command.callback is not None and _command.callback.__doc__:
            _command.callback.__doc__ = reflow(_command.callback.__doc__)


# The root options that take a value, and those that do not, as ``main`` declares them (a test keeps the two
# in step). The eager ones (--help, --version, completion) print and exit: a command line with one of them
# before the command gets the whole tree.
ROOT_VALUED_OPTIONS = ("--config", "--conn", "--api-url", "--connect-timeout")
ROOT_FLAG_OPTIONS = ("--debug",)


def app_for(argv: list[str]) -> typer.Typer:
    """The application to run ``statestore ARGV`` with: ``app`` with only the command the line names (a group
    whole), or ``app`` itself where the line names none (help, a typo, a misplaced option, shell completion).

    Typer builds the click command of every command and group before it reads a word of the command line:
    a dozen commands' parameters read from their signatures, for the one the line runs. Which command that is
    does not change what the command, its help or its errors say: none of them lists the other commands."""
    import os

    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in os.environ):
        return app
    at = 0
    while at < len(argv):
        word = argv[at]
        if word in ROOT_VALUED_OPTIONS:
            at += 2
        elif word in ROOT_FLAG_OPTIONS or (word.startswith("--") and word.split("=", 1)[0] in ROOT_VALUED_OPTIONS):
            at += 1
        else:
            break
    if at >= len(argv):
        return app
    name = argv[at]
    commands = [c for c in app.registered_commands if _command_name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if len(commands) + len(groups) != 1:
        return app
    import copy

    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def _command_name(command: typer.models.CommandInfo) -> str | None:
    if command.name:
        return command.name
    if command.callback is None:
        return None
    return typer.main.get_command_name(command.callback.__name__)
