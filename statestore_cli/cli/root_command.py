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

__all__ = ["app"]


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
    ctx.obj = CliState(config_path=config, conn=conn, debug=debug, connect_timeout=connect_timeout)


for _typer in ALL_APPS:
    for _command in _typer.registered_commands:
        if _command.callback is not None and _command.callback.__doc__:
            _command.callback.__doc__ = reflow(_command.callback.__doc__)
