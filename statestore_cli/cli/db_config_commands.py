"""``db init``, ``db check`` and ``config show``."""

import sys
from typing import TYPE_CHECKING

import typer

from statestore_cli.cli.command_groups import config_app, db_app
from statestore_cli.cli.context import store_of
from statestore_cli.cli.errors_to_exits import decided
from statestore_cli.cli.failure import FLAGS
from statestore_cli.cli.help_text import examples
from statestore_cli.cli.options import HeaderOpt, LockTimeoutOpt, OutputOpt, choose_output
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.cli.output.safe_text import safe_text

if TYPE_CHECKING:
    from statestore_cli.backends.store import Store
    from statestore_cli.ops.api_check import ApiReport
    from statestore_cli.ops.db_report import DbReport


# -- db ---------------------------------------------------------------------------------------------
@db_app.command("init", epilog=examples("db init", "--conn postgresql+psycopg://airflow@db/airflow db init"))
def db_init(
    ctx: typer.Context,
    lock_timeout: LockTimeoutOpt = None,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> None:
    """Create the state store schema (idempotent).

    Refuses to touch an Airflow database older than 3.3."""
    from statestore_cli.ops import commands  # here, not at the top: `--help` need not load SQLAlchemy

    out = choose_output(output, header)
    store = store_of(ctx, create_file=True)
    settings = store.settings
    report = commands.db_init(store)
    out.db_report(report, created=True)
    if report.created_file is not None:  # on stderr: stdout keeps the report (JSON with -o json)
        why = settings.conn_origin()[0]
        sys.stdout.flush()
        sys.stderr.write(safe_text(f"statestore: created the SQLite file {report.created_file} ({why})") + "\n")


@db_app.command("check", epilog=examples("db check", "db check -o json"))
def db_check(ctx: typer.Context, output: OutputOpt = OutputMode.auto, header: HeaderOpt = False) -> None:
    """Report engine, schema state and mode.

    Through the REST API: its Airflow release, its database's health, and whether it takes the credentials.
    Exits 0 only when the store is usable, else 3 with the reason (2: credentials the API refuses)."""
    out = choose_output(output, header)
    store = store_of(ctx, writes=False)
    checked = _api_check(store) if store.api_mode else _db_check(store)
    problem = checked.problem()
    decided(ctx, problem)
    out.db_report(checked)
    if problem is not None:
        raise problem


def _api_check(store: "Store") -> "ApiReport":
    from statestore_cli.ops.api_check import api_check  # not the database's modules: SQLAlchemy stays unloaded

    return api_check(store)


def _db_check(store: "Store") -> "DbReport":
    from statestore_cli.ops import commands

    return commands.db_check(store)


# -- config -----------------------------------------------------------------------------------------
@config_app.command("show", epilog=examples("config show", "--config /opt/airflow/airflow.cfg config show -o json"))
def config_show(ctx: typer.Context, output: OutputOpt = OutputMode.auto, header: HeaderOpt = False) -> None:
    """Show every effective setting and where it came from.

    Secrets are masked."""
    from statestore_cli.ops import commands

    out = choose_output(output, header)
    store = store_of(ctx, writes=False)
    settings = store.settings
    config_file = str(settings.config_file) if settings.config_file else None
    searched = settings.config_search.worded(FLAGS) if settings.config_search else None
    out.config(commands.config_rows(store), config_file, str(settings.airflow_home), searched)
