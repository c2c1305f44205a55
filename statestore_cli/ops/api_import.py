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

from statestore_cli.backends.api_backend import ApiBackend
from statestore_cli.errors import InterruptedByUser, InvalidInputError, StateStoreError
from statestore_cli.model.scopes import NIL_REGION, AssetScope, StoreScope, TaskScope
from statestore_cli.ops.import_summary import ImportSummary, StoreCounts
from statestore_cli.ops.records import AssetRow, BadRecord, DagRunRow, TaskRow, parse_line, read_lines

PROGRESS_EVERY = 100  # lines between progress calls: each key is a round trip, so the bar moves often enough


def import_over_api(
    backend: ApiBackend,
    lines: Iterable[str | bytes],
    max_value_bytes: int,
    dry_run: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> ImportSummary:
    """Write the keys of ``lines`` one request each, in the file's order; a bad line or a refused write stops
    the import there, the keys before it written (the error says which lines)."""
    importer = _ApiImporter(backend, dry_run)
    start = time.monotonic()
    number = 0
    try:
        for number, text in enumerate(read_lines(lines, max_value_bytes), 1):
            row = parse_line(number, text, max_value_bytes)
            if row is not None:
                importer.write(row)
            if on_progress is not None and number % PROGRESS_EVERY == 0:
                on_progress(number)
    except BadRecord as exc:
        raise InvalidInputError(f"{exc}; {importer.done()}") from None
    except StateStoreError as exc:
        raise type(exc)(f"line {number}: {exc.template}; {importer.done()}", parameter=exc.parameter) from None
    except KeyboardInterrupt:
        raise InterruptedByUser(f"interrupted; {importer.done()}") from None
    if on_progress is not None:
        on_progress(number)
    task, asset = importer.counts["task"], importer.counts["asset"]
    keys = sum(task) + sum(asset)
    elapsed = time.monotonic() - start
    counts = (StoreCounts(*task), StoreCounts(*asset))
    return ImportSummary(dry_run, number, keys, 1, *counts, 0, 0, elapsed, api_requests=backend.client.requests)


class _ApiImporter:
    def __init__(self, backend: ApiBackend, dry_run: bool) -> None:
        self.backend = backend
        self.dry_run = dry_run
        self.counts = {"task": [0, 0], "asset": [0, 0]}  # inserted, updated
        self.written_through = 0  # the last line written
        self.present: dict[StoreScope, bool] = {}  # dry run: whether each task instance or asset exists

    def done(self) -> str:
        """What the API holds after a failure: for the error message."""
        if self.dry_run:
            return "nothing was written (dry run)"
        last = self.written_through
        if last == 0:
            return "nothing was imported"
        return f"{'line 1 was' if last == 1 else f'lines 1-{last} were'} imported, nothing after"

    def write(self, row: TaskRow | DagRunRow | AssetRow) -> None:
        scope, store = _scope(row)
        if self.dry_run:
            self._check(scope)
        updated = self.backend.describe(scope, row.key) is not None
        if not self.dry_run:
            expires = row.expires_at if isinstance(row, TaskRow) else None  # None: never, as the line says
            self.backend.set(scope, row.key, row.value, expires_at=expires)
            self.written_through = row.line
        self.counts[store][updated] += 1

    def _check(self, scope: StoreScope) -> None:
        """Dry run: refuse the line whose task instance or asset the api-server does not have, as the write
        would be refused."""
        if scope not in self.present:
            self.present[scope] = self.backend.has_target(scope)
        if not self.present[scope]:
            raise InvalidInputError(self.backend.no_target(scope))


def _scope(row: TaskRow | DagRunRow | AssetRow) -> tuple[StoreScope, str]:
    if isinstance(row, DagRunRow):
        raise BadRecord(row.line, "a dag-run key, which Airflow's REST API has no route for: import it with --conn")
    if isinstance(row, AssetRow):
        return AssetScope(name=row.name, uri=row.uri), "asset"
    if row.region_id != NIL_REGION:
        raise BadRecord(row.line, "a key in a region, which Airflow's REST API has no route for: import it with --conn")
    return TaskScope(row.dag_id, row.run_id, row.task_id, row.map_index), "task"
