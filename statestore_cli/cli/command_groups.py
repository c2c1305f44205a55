"""The command tree's typer applications: the root ``statestore`` and its groups (``db``, ``backend``,
``config``, ``assets``, ``runs``). The command modules register their commands on them;
``cli.root_command`` adds the root options and imports those modules, so the complete CLI is
``statestore_cli.cli.root_command.app``."""

import typer

from statestore_cli.cli.errors_to_exits import StateStoreGroup
from statestore_cli.cli.help_text import RICH_HELP, TASK_EXAMPLE, examples

app = typer.Typer(
    cls=StateStoreGroup,
    name="statestore",
    help="Read, write and garbage-collect Airflow's task and asset state store.\n\n"
    "Root options (--config, --conn, --api-url, --connect-timeout, --debug, --version) go before the command; "
    "the command's own options after it.",
    epilog=examples(
        "db check",
        f"get {TASK_EXAMPLE} job_id",
        "clean --dry-run",
        "--config /opt/airflow/airflow.cfg clean --batch-size 10000",
    ),
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion and _STATESTORE_COMPLETE
    rich_markup_mode="rich" if RICH_HELP else None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(
    help="Create and check the state store schema.",
    epilog=examples("db init", "db check", "--conn postgresql+psycopg://airflow@db/airflow db check -o json"),
    no_args_is_help=True,
)
backend_app = typer.Typer(
    help="Check custom backends.",
    epilog=examples("backend check", "backend check -o json"),
    no_args_is_help=True,
)
config_app = typer.Typer(
    help="Show the effective configuration.",
    epilog=examples("config show", "--config /opt/airflow/airflow.cfg config show -o json"),
    no_args_is_help=True,
)
assets_app = typer.Typer(
    help="Sweep the keys of inactive assets; delete an asset of a standalone store.",
    epilog=examples("assets sweep --dry-run", "assets sweep", "assets delete --asset-name orders --yes"),
    no_args_is_help=True,
)
runs_app = typer.Typer(
    help="Delete a dag run of a standalone store, with its keys.",
    epilog=examples("runs delete --dag-id etl --run-id manual__1 --yes"),
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")
app.add_typer(backend_app, name="backend")
app.add_typer(config_app, name="config")
app.add_typer(assets_app, name="assets")
app.add_typer(runs_app, name="runs")

ALL_APPS = (app, db_app, backend_app, config_app, assets_app, runs_app)
