"""``import`` through Airflow's REST API (``--api-url``): a restore of what ``export`` or ``clean --backup`` wrote,
where the database cannot be reached. The API has no bulk route, so each key is read (to count it inserted or
updated) and written with its own ``PUT``: two requests a key. Values and expiries are kept; ``updated_at`` (and
an asset key's ``last_updated_by``) are the server's, as for any write through it. A task instance or asset the
api-server does not have is refused as on an Airflow database: Airflow creates them, an import does not. Dag-run
keys and keys in a region have no route. ``dry_run`` checks every line and that each task instance and asset
exists, and writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from functools import partial

from statestore_cli.backends.api_backend import ApiBackend
from statestore_cli.errors import InvalidInputError, StateStoreError
from statestore_cli.model.scopes import NIL_REGION, AssetScope, StoreScope, TaskScope, index_ranges
from statestore_cli.ops.import_summary import ImportSummary, StoreCounts, saying_how_far
from statestore_cli.ops.records import AssetRow, BadRecord, DagRunRow, TaskRow, parse_line, read_lines

# Lines a batch writes, per request in flight: a batch's lines are all parsed and checked before any of them
# is written, then written ``[state_store] api_concurrency`` at a time.
BATCH_PER_REQUEST = 4


def import_over_api(
    backend: ApiBackend,
    lines: Iterable[str | bytes],
    max_value_bytes: int,
    dry_run: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> ImportSummary:
    """Write the keys of ``lines``, a batch at a time; a bad line stops the import before its batch is written,
    a refused write once the writes already sent have ended (the error says which lines were written)."""
    importer = _ApiImporter(backend, dry_run)
    start = time.monotonic()
    size = max(backend.concurrency, 1) * BATCH_PER_REQUEST
    batch: list[tuple[TaskRow | AssetRow, StoreScope, str]] = []
    number = 0
    with saying_how_far(importer.done):
        for number, text in enumerate(read_lines(lines, max_value_bytes), 1):
            row = parse_line(number, text, max_value_bytes)
            if row is None:
                continue
            key = _writable(row)
            if any((key[1], row.key) == (other, held.key) for held, other, _ in batch):  # a later line wins
                importer.write(batch, number - 1)
                batch = []
            batch.append(key)
            if len(batch) >= size:
                importer.write(batch, number)
                batch = []
                if on_progress is not None:
                    on_progress(number)
        importer.write(batch, number)
    if on_progress is not None:
        on_progress(number)
    task, asset = importer.counts["task"], importer.counts["asset"]
    elapsed = time.monotonic() - start
    counts = (StoreCounts(*task), StoreCounts(*asset))
    return ImportSummary(
        dry_run, number, importer.batches, size, *counts, 0, 0, elapsed, api_requests=backend.client.requests
    )


class _ApiImporter:
    def __init__(self, backend: ApiBackend, dry_run: bool) -> None:
        self.backend = backend
        self.dry_run = dry_run
        self.counts = {"task": [0, 0], "asset": [0, 0]}  # inserted, updated
        self.batches = 0
        self.through = 0  # every line up to this one is written
        self.also: list[int] = []  # lines after it written too, by a batch that failed
        self.present: dict[StoreScope, bool] = {}  # dry run: whether each task instance or asset exists

    def done(self) -> str:
        """What the API holds after a failure: for the error message."""
        if self.dry_run:
            return "nothing was written (dry run)"
        parts = [f"1-{self.through}" if self.through > 1 else "1"] if self.through else []
        parts += [index_ranges(sorted(self.also))] if self.also else []
        count = self.through + len(self.also)
        if not count:
            return "nothing was imported"
        return (
            f"line{'s' if count > 1 else ''} {', '.join(parts)} {'were' if count > 1 else 'was'} imported, nothing else"
        )

    def write(self, batch: list[tuple[TaskRow | AssetRow, StoreScope, str]], through: int) -> None:
        """Write (a dry run: check) the batch's keys; ``through``: the last line it covers."""
        if not batch:
            return
        self.batches += 1
        written: list[int] = []

        def heard(index: int, updated: bool) -> None:
            row, _scope, store = batch[index]
            self.counts[store][updated] += 1
            written.append(row.line)

        if self.dry_run:  # each task instance or asset asked about once, before its lines are checked
            unknown = list(dict.fromkeys(scope for _row, scope, _store in batch if scope not in self.present))
            found = [partial(self.backend.has_target, scope) for scope in unknown]
            self.backend.run_all(found, lambda index, there: self.present.__setitem__(unknown[index], there))
        calls = [partial(self._one, row, scope) for row, scope, _store in batch]
        try:
            self.backend.run_all(calls, heard)
        except BaseException:
            self.also = written
            raise
        self.through = through

    def _one(self, row: TaskRow | AssetRow, scope: StoreScope) -> bool:
        """One line's key written (a dry run: its target checked); whether it was there already."""
        try:
            if self.dry_run and not self.present[scope]:
                raise InvalidInputError(self.backend.no_target(scope))
            updated = self.backend.describe(scope, row.key) is not None
            if not self.dry_run:
                expires = row.expires_at if isinstance(row, TaskRow) else None  # None: never, as the line says
                self.backend.set(scope, row.key, row.value, expires_at=expires)
        except StateStoreError as exc:
            raise type(exc)(f"line {row.line}: {exc.template}", parameter=exc.parameter) from None
        return updated


def _writable(row: TaskRow | DagRunRow | AssetRow) -> tuple[TaskRow | AssetRow, StoreScope, str]:
    """The line's key with its scope and store; a line the API has no route for is a bad line."""
    if isinstance(row, DagRunRow):
        raise BadRecord(row.line, "a dag-run key, which Airflow's REST API has no route for: import it with --conn")
    if isinstance(row, AssetRow):
        return row, AssetScope(name=row.name, uri=row.uri), "asset"
    if row.region_id != NIL_REGION:
        raise BadRecord(row.line, "a key in a region, which Airflow's REST API has no route for: import it with --conn")
    return row, TaskScope(row.dag_id, row.run_id, row.task_id, row.map_index), "task"
