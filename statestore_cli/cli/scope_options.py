"""The scope options shared by the key commands, declared once and added to each command."""

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from statestore_cli.entries import KeyFilter
from statestore_cli.errors import InvalidInputError
from statestore_cli.scopes import AssetScope, StoreScope, TaskScope

_PANEL = "Scope"
_SCOPE_HELP = (
    "give --dag-id, --run-id and --task-id (and --map-index) for a task, "
    "or --asset-name, --asset-uri or --asset-id for an asset"
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


@dataclass(frozen=True)
class ScopeArgs:
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    asset_name: str | None = None
    asset_uri: str | None = None
    asset_id: int | None = None

    @property
    def _task_given(self) -> bool:
        return any(v is not None for v in (self.dag_id, self.run_id, self.task_id, self.map_index))

    @property
    def _asset_given(self) -> bool:
        return any(v is not None for v in (self.asset_name, self.asset_uri, self.asset_id))

    def scope(self) -> StoreScope:
        """Exactly one kind of scope, complete, or an ``InvalidInputError`` saying what is missing."""
        if self._task_given and self._asset_given:
            raise InvalidInputError(f"a task scope and an asset scope were both given; {_SCOPE_HELP}")
        if self._asset_given:
            return AssetScope(asset_id=self.asset_id, name=self.asset_name, uri=self.asset_uri)
        missing = [f"--{n.replace('_', '-')}" for n in ("dag_id", "run_id", "task_id") if getattr(self, n) is None]
        if missing and self._task_given:
            raise InvalidInputError(f"a task scope needs {', '.join(missing)} as well")
        if missing:
            raise InvalidInputError(f"no scope given: {_SCOPE_HELP}")
        map_index = -1 if self.map_index is None else self.map_index
        return TaskScope(self.dag_id, self.run_id, self.task_id, map_index)  # type: ignore[arg-type]

    def key_filter(self, store: str | None) -> KeyFilter:
        """Any subset of the scope options, as a filter for ``list``."""
        if self._task_given and self._asset_given:
            raise InvalidInputError("filter by task options or by asset options, not both")
        return KeyFilter(
            store=store,
            dag_id=self.dag_id,
            run_id=self.run_id,
            task_id=self.task_id,
            map_index=self.map_index,
            asset_id=self.asset_id,
            name=self.asset_name,
            uri=self.asset_uri,
        )


def with_scope_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the scope options to ``command``, which receives them as one ``scope_args: ScopeArgs``."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "scope_args"]
    added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a) for n, a in _PARAMS]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name, _ in _PARAMS}
        return command(*args, scope_args=ScopeArgs(**values), **kwargs)

    wrapper.__signature__ = signature.replace(parameters=own + added)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{k: v for k, v in command.__annotations__.items() if k != "scope_args"},
        **dict(_PARAMS),
    }
    del wrapper.__wrapped__  # typer must read the new signature, not the wrapped one
    return wrapper
