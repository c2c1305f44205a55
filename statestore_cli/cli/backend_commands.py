"""``orphans`` and ``backend check``."""

from typing import Annotated, Optional

import typer

from statestore_cli.cli.command_groups import app, backend_app
from statestore_cli.cli.confirm import confirm_delete
from statestore_cli.cli.context import store_of
from statestore_cli.cli.errors_to_exits import decided
from statestore_cli.cli.help_text import examples
from statestore_cli.cli.options import HeaderOpt, OutputOpt, choose_output
from statestore_cli.cli.output.modes import OutputMode
from statestore_cli.errors import InvalidInputError, Outcome
from statestore_cli.model.retention import parse_duration, utcnow


# -- backends ---------------------------------------------------------------------------------------
@app.command(
    "orphans",
    epilog=examples(
        "orphans",
        "orphans --older-than 7d -o json",
        "orphans --delete --older-than 7d",
        "orphans --delete --older-than 7d --yes",
    ),
)
def orphans(
    ctx: typer.Context,
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete the orphans at least --older-than old (needs --older-than).")
    ] = False,
    older_than: Annotated[
        Optional[str],
        typer.Option("--older-than", metavar="DURATION", help="Only orphans at least this old (7d, 12h)."),
    ] = None,
    grace: Annotated[
        str,
        typer.Option("--grace", metavar="DURATION", help="Younger objects may be writes in flight: never deleted."),
    ] = "1h",
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    all_unreferenced: Annotated[
        bool,
        typer.Option(
            "--all-unreferenced",
            help="Delete even when the database references none of the backend's objects (else refused).",
        ),
    ] = False,
    output: OutputOpt = OutputMode.auto,
    header: HeaderOpt = False,
) -> Outcome:
    """List objects of the worker-side backend that no database row points to.

    Needs a worker-side backend that implements list_refs() (and delete_ref() for --delete).
    Objects younger than --grace are shown but never deleted. Exit 3 if a delete failed.

    --delete asks on a terminal with the count, and then deletes only the orphans it counted; anywhere else
    it needs --yes (exit 2). Answering no exits 1, nothing deleted. When the database references none of
    the objects the backend holds, --delete is refused (exit 2): that is what a wrong --conn or backend
    root looks like; --all-unreferenced deletes them all the same."""
    from statestore_cli.cli.output.backend_views import orphans_question
    from statestore_cli.ops import orphans as ops

    out = choose_output(output, header)
    grace_span = parse_duration(grace, "--grace")
    age = None if older_than is None else parse_duration(older_than, "--older-than")
    if all_unreferenced and not delete:
        raise InvalidInputError("--all-unreferenced applies to --delete; without it nothing is deleted")
    store = store_of(ctx, writes=False)  # only read: what is deleted is the worker backend's
    if not delete:
        report = ops.find_orphans(store, utcnow(), grace=grace_span, older_than=age)
    else:
        plan = ops.plan_orphan_delete(
            store, utcnow(), grace=grace_span, older_than=age, all_unreferenced=all_unreferenced
        )
        report = plan
        if plan.deletable:
            confirm_delete(yes, "orphans --delete deletes objects", orphans_question(plan))
            report = ops.delete_orphans(store, plan)  # only the orphans counted in the question
    decided(ctx, report)  # deletions are done: a reader closing the pipe does not change the exit code
    out.orphans(report)
    return report


@backend_app.command("check", epilog=examples("backend check", "backend check -o json"))
def backend_check(ctx: typer.Context, output: OutputOpt = OutputMode.auto, header: HeaderOpt = False) -> Outcome:
    """Check the configured custom backends as Airflow uses them.

    Checks the custom store backend and the worker-side backend: the class loads and is complete,
    references are deterministic and distinct, values round-trip, delete and clear work, the async
    methods do not block the event loop, JSON null is refused. Writes and removes keys of the dag
    and asset named statestore_backend_check. Exit 0 only when every check passes, else 3."""
    from statestore_cli.ops.backend_check import check_backends

    out = choose_output(output, header)
    report = check_backends(store_of(ctx))
    decided(ctx, report)
    out.backend_check(report)
    return report
