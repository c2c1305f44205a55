"""Scopes: whose keys a store operation touches, one task instance (``TaskScope``) or one asset (``AssetScope``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Union

from statestore_cli.errors import PARAMETER, InvalidInputError, NotFoundError

NIL_REGION = uuid.UUID(int=0)

# Column widths of Airflow 3.3.2's schema: longer ids could never be stored.
ID_MAX_LENGTH = 250
KEY_MAX_LENGTH = 512


def _check_text(name: str, value: object, max_length: int) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
    if len(value) > max_length:
        raise InvalidInputError(f"{name} is {len(value)} characters long; the limit is {max_length}")
    check_utf8(name, value)


def check_utf8(name: str, value: str) -> None:
    """Refuse text that is not UTF-8: bytes a command line could not decode arrive as lone surrogates,
    and no database or file stores those."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ord(value[exc.start])
        what = f"byte 0x{bad - 0xDC00:02x}" if 0xDC80 <= bad <= 0xDCFF else f"lone surrogate U+{bad:04X}"
        raise InvalidInputError(
            f"{name} is not valid UTF-8 ({what} at character {exc.start + 1}); pass it as UTF-8 text"
        ) from None


def check_key(key: object) -> str:
    """Return ``key`` when it can be stored, else raise ``InvalidInputError``."""
    _check_text("key", key, KEY_MAX_LENGTH)
    assert isinstance(key, str)
    return key


@dataclass(frozen=True)
class TaskScope:
    """One task instance: ``(dag_id, run_id, task_id, map_index)``; -1 means not mapped."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    region_id: uuid.UUID = field(default=NIL_REGION)

    def __post_init__(self) -> None:
        for name in ("dag_id", "run_id", "task_id"):
            _check_text(name, getattr(self, name), ID_MAX_LENGTH)
        if isinstance(self.map_index, bool) or not isinstance(self.map_index, int):
            raise InvalidInputError(f"map_index must be an integer, got {self.map_index!r}")
        if self.map_index < -1:
            raise InvalidInputError(f"map_index must be -1 (not mapped) or >= 0, got {self.map_index}")

    def describe(self) -> str:
        text = f"dag_id={self.dag_id} run_id={self.run_id} task_id={self.task_id} map_index={self.map_index}"
        if self.region_id.int:
            text += f" region_id={self.region_id}"
        return text


@dataclass(frozen=True)
class AssetScope:
    """One asset: by ``asset_id`` (server side) or by ``name`` and/or ``uri`` (worker side)."""

    asset_id: int | None = None
    name: str | None = None
    uri: str | None = None

    def __post_init__(self) -> None:
        if self.asset_id is None and not self.name and not self.uri:
            raise InvalidInputError("an asset scope needs at least one of asset_id, name or uri")
        for name in ("name", "uri"):
            if isinstance(getattr(self, name), str):
                check_utf8(f"asset {name}", getattr(self, name))
        if self.asset_id is not None and (isinstance(self.asset_id, bool) or not isinstance(self.asset_id, int)):
            raise InvalidInputError(f"asset_id must be an integer, got {self.asset_id!r}")

    def describe(self) -> str:
        parts = [
            f"{n}={v}"
            for n, v in (("asset_id", self.asset_id), ("name", self.name), ("uri", self.uri))
            if v is not None
        ]
        return " ".join(parts)


@dataclass(frozen=True)
class DagRunScope:
    """One dag run: ``(dag_id, run_id)``. Its keys live in Airflow 3.4's dag-run state store
    (``dag_run_state_store``): shared by every task of the run, expiring like task keys."""

    dag_id: str
    run_id: str

    def __post_init__(self) -> None:
        for name in ("dag_id", "run_id"):
            _check_text(name, getattr(self, name), ID_MAX_LENGTH)

    def describe(self) -> str:
        return f"dag run dag_id={self.dag_id} run_id={self.run_id}"


StoreScope = Union[TaskScope, AssetScope, DagRunScope]


def describe_keys_of(scope: StoreScope, *, all_map_indices: bool = False) -> str:
    """What ``clear`` deletes: the scope, with "all map indices" in place of the map index when asked."""
    if isinstance(scope, TaskScope) and all_map_indices:
        text = f"dag_id={scope.dag_id} run_id={scope.run_id} task_id={scope.task_id}, all map indices"
        return text + (f" region_id={scope.region_id}" if scope.region_id.int else "")
    return scope.describe()


def no_run_to_write(scope: TaskScope | DagRunScope, where: str) -> str:
    """Why a write of the scope's keys is refused on an Airflow ``where`` ("in this Airflow database", "on this
    api-server"): its dag run is not there, and only Airflow makes runs."""
    return (
        f"no dag run dag_id={scope.dag_id} run_id={scope.run_id} {where}; "
        "task keys can only be written for runs Airflow created"
    )


def no_asset_to_write(scope: AssetScope, where: str) -> str:
    """Why a write of an asset's keys is refused on an Airflow ``where``: no such (active) asset."""
    if scope.asset_id is not None:
        return f"no asset with asset_id={scope.asset_id}; give an existing asset"
    return f"no active asset {scope.describe()} {where}; assets are created by Airflow"


def missing_key(
    scope: StoreScope, key: str, *, run_exists: bool = True, elsewhere: Sequence[tuple[int, int]] = ()
) -> NotFoundError:
    """The error of a `get` that found nothing (the CLI and its fast path say it the same way);
    ``run_exists=False`` adds that the task's dag run itself does not exist (a mistyped run id);
    ``elsewhere`` (``(map_index, keys)`` pairs) that the key is at other map indices of the task."""
    message = f"no key {key!r} for {scope.describe()}"
    if isinstance(scope, TaskScope | DagRunScope) and not run_exists:
        message += f"; the dag run dag_id={scope.dag_id} run_id={scope.run_id} does not exist"
    if isinstance(scope, TaskScope) and elsewhere:
        hint = f"; {at_other_map_indices(scope, elsewhere, key)}: give {PARAMETER} N"
        return NotFoundError(message + hint, parameter="map_index")
    return NotFoundError(message)


def at_other_map_indices(scope: TaskScope, elsewhere: Sequence[tuple[int, int]], key: str | None = None) -> str:
    """What a task holds at map indices other than its scope's, from ``(map_index, keys)`` pairs: "21 keys
    of submit_spark_job are at map indices 0-20", or with ``key`` "the key is at map indices 0-20 of ..."."""
    indices = sorted(index for index, _ in elsewhere)
    where = f"map {'indices' if len(indices) > 1 else 'index'} {index_ranges(indices)}"
    if key is not None:
        return f"the key is at {where} of {scope.task_id}"
    total = sum(count for _, count in elsewhere)
    return f"{total:,} key{'s' if total != 1 else ''} of {scope.task_id} {'are' if total != 1 else 'is'} at {where}"


def index_ranges(indices: Sequence[int], most: int = 6) -> str:
    """Sorted integers as ranges, ``0-20`` or ``0-3, 5, 9-12``; past ``most`` ranges, ``...`` ends it."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    shown = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:most]]
    return ", ".join(shown) + (", ..." if len(runs) > most else "")
