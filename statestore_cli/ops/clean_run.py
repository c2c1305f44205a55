"""One clean as a scheduled job runs it: the clean, then (with a metrics file) the count of the expired
keys it left and the file that says how it ended, whatever ended it.

``CleanRun`` is a context manager entered before the configuration is read, so a broken config, a
lost database or an interrupt is a failed clean in the metrics file too::

    with CleanRun(metrics_file, labels, skip_code=EXIT_OK) as run:
        store = ...
        result = run.clean(store, batch_size, now=now, control=control, older_than=grace)
    # run.problems: what could not be counted or written, for the caller to show
    # run.unwritten: the clean succeeded but its metrics file could not be written (exit 3)

Without a metrics file it is the clean alone. Free of typer and rich.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from statestore_cli.errors import EXIT_OK, StateStoreError, StopReason

if TYPE_CHECKING:
    from statestore_cli.backends.store import Store
    from statestore_cli.ops.backup_file import BackupFile
    from statestore_cli.ops.cleaning import CleanSkipped
    from statestore_cli.ops.cleanup import CleanControl, CleanReport
    from statestore_cli.ops.metrics import CleanRecorder


class Problem(NamedTuple):
    """Something about the metrics that went wrong beside the clean: ``doing`` says what (or is empty)."""

    doing: str
    error: StateStoreError


class CleanRun:
    def __init__(
        self, metrics_file: Path | None, labels: dict[str, str] | None = None, *, skip_code: int = EXIT_OK
    ) -> None:
        self.recorder: CleanRecorder | None = None
        if metrics_file is not None:
            from statestore_cli.ops.metrics import CleanRecorder

            self.recorder = CleanRecorder(metrics_file, labels)  # an unwritable path fails here, before deleting
        self.skip_code = skip_code  # what a skipped clean (a custom backend) records: 0, or 5 with --fail-on-skip
        self.problems: list[Problem] = []
        self.unwritten: StateStoreError | None = None
        self.recorded = False  # the file says how the clean ended: what follows the clean cannot change it

    def __enter__(self) -> CleanRun:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is None or self.recorder is None or self.recorded:
            return
        from statestore_cli.ops.metrics import exit_status_of

        try:
            self.recorder.finish(exit_status_of(error))  # the failure itself is what the caller reports
        except StateStoreError as write_error:
            self.problems.append(Problem("", write_error))

    def clean(
        self,
        store: Store,
        batch_size: int | None,
        *,
        now: datetime,
        control: CleanControl,
        older_than: timedelta | None,
        backup: BackupFile | None = None,
        include_unfinished: bool = False,
    ) -> CleanReport | CleanSkipped:
        """The clean (the report, or why it was skipped), recorded when it ended without an error; with
        ``backup`` every row it deletes is written there first; ``include_unfinished``: the keys of unfinished
        task instances too."""
        from statestore_cli.ops import cleaning

        if self.recorder is not None:
            control = replace(
                control,
                on_progress=_both(control.on_progress, self.recorder.on_progress),
                on_store=self.recorder.on_store,
            )
        result = cleaning.clean(
            store,
            batch_size,
            now=now,
            control=control,
            older_than=older_than,
            backup=backup,
            include_unfinished=include_unfinished,
        )
        if self.recorder is not None:
            self._record(result, self._remaining(store, result, now, older_than, include_unfinished))
        return result

    def _remaining(
        self,
        store: Store,
        result: CleanReport | CleanSkipped,
        now: datetime,
        older_than: timedelta | None,
        include_unfinished: bool,
    ) -> int | None:
        """The expired keys the clean left that it would delete (not those it spares), for the metrics: not
        counted after a skip, or after a signal, which asks for a quick exit."""
        from statestore_cli.ops import cleaning

        if isinstance(result, cleaning.CleanSkipped):
            return None
        if result.stopped in (StopReason.INTERRUPTED, StopReason.TERMINATED):
            return None
        try:
            return cleaning.count_expired_keys(store, now, older_than, include_unfinished=include_unfinished)
        except StateStoreError as exc:
            self.problems.append(Problem("the expired keys left were not counted", exc))
            return None

    def _record(self, result: CleanReport | CleanSkipped, remaining: int | None) -> None:
        from statestore_cli.ops.cleaning import CleanSkipped

        assert self.recorder is not None
        self.recorded = True
        try:
            if isinstance(result, CleanSkipped):
                self.recorder.finish(self.skip_code)
            else:
                self.recorder.finish(
                    result.exit_code,
                    rows_deleted=result.deleted,
                    batches=result.batches,
                    remaining=remaining,
                    deleted_by_store=result.deleted_by_store,
                    spared=result.spared,
                )
        except StateStoreError as exc:
            self.unwritten = exc


def _both(first: Callable[[int], None] | None, second: Callable[[int], None]) -> Callable[[int], None]:
    if first is None:
        return second

    def call(done: int) -> None:
        first(done)
        second(done)

    return call
