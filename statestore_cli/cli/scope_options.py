"""The scope options shared by the key commands, declared once and added to each command."""

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from statestore_cli.errors import InvalidInputError
from statestore_cli.model.entries import KeyFilter
from statestore_cli.model.scopes import AssetScope, DagRunScope, StoreScope, TaskScope

_PANEL = "Scope"
_SCOPE_HELP = (
    "give --dag-id, --run-id and --task-id (and --map-index) for a task, --dag-id and --run-id alone for "
    "a dag run's keys (Airflow 3.4), or --asset-name, --asset-uri or --asset-id for an asset"
)

_PARAMS: tuple[tuple[str, Any], ...] = (
    ("dag_id", Annotated[Optional[str], typer.Option("--dag-id", help="DAG id of the task.", rich_help_panel=_PANEL)]),
    ("run_id", Annotated[Optional[str], typer.Option("--run-id", help="Run id of the task.", rich_help_panel=_PANEL)]),
    ("task_id", Annotated[Optional[str], typer.Option("--task-id", help="Task id.", rich_help_panel=_PANEL)]),
    (
        "map_index",
        Annotated[
            Optional[int],
            typer.Option(
                "--map-index", help="Map index; -1 (the default) for an unmapped task.", rich_help_panel=_PANEL
            ),
        ],
    ),
    ("asset_name", Annotated[Optional[str], typer.Option("--asset-name", help="Asset name.", rich_help_panel=_PANEL)]),
    ("asset_uri", Annotated[Optional[str], typer.Option("--asset-uri", help="Asset URI.", rich_help_panel=_PANEL)]),
    (
        "asset_id",
        Annotated[
            Optional[int], typer.Option("--asset-id", help="Asset id (as in the asset table).", rich_help_panel=_PANEL)
        ],
    ),
)


def scope_of(given: KeyFilter) -> StoreScope:
    """Exactly one kind of scope, complete, or an ``InvalidInputError`` saying what is missing."""
    if given.has_task_fields and given.has_asset_fields:
        raise InvalidInputError(f"a task scope and an asset scope were both given; {_SCOPE_HELP}")
    if given.has_asset_fields:
        return AssetScope(asset_id=given.asset_id, name=given.name, uri=given.uri)
    if given.dag_id is not None and given.run_id is not None and given.task_id is None and given.map_index is None:
        return DagRunScope(given.dag_id, given.run_id)
    missing = [f"--{n.replace('_', '-')}" for n in ("dag_id", "run_id", "task_id") if getattr(given, n) is None]
    if missing and given.has_task_fields:
        raise InvalidInputError(f"a task scope needs {', '.join(missing)} as well")
    if missing:
        raise InvalidInputError("no scope given", hint=_SCOPE_HELP)
    map_index = -1 if given.map_index is None else given.map_index
    return TaskScope(given.dag_id, given.run_id, given.task_id, map_index)  # type: ignore[arg-type]


def as_filter(given: KeyFilter, store: str | None, key: str | None) -> KeyFilter:
    """Any subset of the scope options, with ``--store`` and ``--key``, as a filter for ``list`` and ``stats``."""
    if store not in (None, "task", "dag_run", "asset"):
        raise InvalidInputError(f"unknown --store {store!r}: use task, dag_run or asset")
    if given.has_task_fields and given.has_asset_fields:
        raise InvalidInputError("filter by task options or by asset options, not both")
    return given._replace(store=store, key=key)


_FILTER_FIELDS = {"asset_name": "name", "asset_uri": "uri"}  # option name -> KeyFilter field


def with_scope_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the scope options to ``command``, which receives them as one ``scope_args: KeyFilter``."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "scope_args"]
    added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a) for n, a in _PARAMS]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {_FILTER_FIELDS.get(name, name): kwargs.pop(name) for name, _ in _PARAMS}
        return command(*args, scope_args=KeyFilter(**values), **kwargs)

    wrapper.__signature__ = signature.replace(parameters=own + added)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{k: v for k, v in command.__annotations__.items() if k != "scope_args"},
        **dict(_PARAMS),
    }
    del wrapper.__wrapped__  # typer must read the new signature, not the wrapped one
    return wrapper
