"""What an import did (or, in a dry run, would do), on a database or through the REST API, and what a failed
one says it left written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from statestore_cli.errors import InterruptedByUser, InvalidInputError, StateStoreError
from statestore_cli.ops.records import BadRecord


class StoreCounts(NamedTuple):
    inserted: int = 0
    updated: int = 0


class ImportSummary(NamedTuple):
    dry_run: bool
    lines: int
    batches: int
    batch_size: int
    task: StoreCounts
    asset: StoreCounts
    dag_runs_created: int
    assets_created: int
    elapsed: float
    dag_run: StoreCounts = StoreCounts()  # dag-run keys (Airflow 3.4)
    api_requests: int | None = None  # through the REST API: the requests made (each key its own write)

    @property
    def keys(self) -> int:
        return sum(self.task) + sum(self.dag_run) + sum(self.asset)


@contextmanager
def saying_how_far(done: Callable[[], str]) -> Iterator[None]:
    """An import's failure (a bad line, any ``StateStoreError``, a Ctrl-C) with what ``done()`` says it left
    written appended to its message."""
    try:
        yield
    except BadRecord as exc:
        raise InvalidInputError(f"{exc}; {done()}") from None
    except StateStoreError as exc:
        raise type(exc)(f"{exc.template}; {done()}", parameter=exc.parameter) from None
    except KeyboardInterrupt:
        raise InterruptedByUser(f"interrupted; {done()}") from None
