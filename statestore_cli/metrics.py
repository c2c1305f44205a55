"""What a clean reports to monitoring: a Prometheus text-format file for node-exporter's textfile collector.

The file is replaced atomically (a temporary file in the same directory, written, fsynced, then
``os.replace``d over the old one), so the collector never reads half a file. Every run that gets past
its argument checks writes it, whether it finished, stopped early or failed, with its exit status; the
time of the last success is carried over from the previous file when this run did not succeed, so an
alert can ask how long cleans have been failing.

One file describes the cleans of one database, so no family has labels but one: on a database with a
dag-run state store (Airflow 3.4), ``rows_deleted_by_store`` splits ``rows_deleted`` by a ``store`` label
(``task``, ``dag_run``); elsewhere it is not written, and the file is as before. Kept free of
SQLAlchemy, typer and rich.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from statestore_cli.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OPERATIONAL,
    PARAMETER,
    InvalidInputError,
    MetricsFileError,
    StateStoreError,
)

PREFIX = "statestore_clean_"
LAST_SUCCESS = f"{PREFIX}last_success_timestamp_seconds"

# name (without the prefix), help text, in the order they are written; every one is a gauge: each
# describes the last run, not a running total (the textfile collector has no memory between runs).
_FAMILIES = (
    ("rows_deleted", "Expired task keys the last clean deleted (committed batches, also when it stopped or failed)."),
    (
        "rows_deleted_by_store",
        "Expired keys the last clean deleted per store (task, dag_run), which rows_deleted adds up; "
        "only where the database has a dag-run state store.",
    ),
    ("expired_rows_remaining", "Expired task keys past the last clean's cutoff still in the store after it ran."),
    ("batches", "Batches the last clean committed."),
    ("duration_seconds", "How long the last clean ran, in seconds."),
    (
        "exit_status",
        "Exit code of the last clean: 0 done, 2 bad usage or config, 3 operational failure, "
        "4 stopped at --max-runtime, 130 SIGINT, 143 SIGTERM.",
    ),
    ("last_run_timestamp_seconds", "When the last clean ended, in seconds since the Unix epoch."),
    ("last_success_timestamp_seconds", "When a clean last ended with exit status 0, in seconds since the Unix epoch."),
)


@dataclass(frozen=True)
class CleanMetrics:
    """One clean as monitoring sees it; ``None`` where a value is unknown (that sample is left out)."""

    exit_status: int
    duration_seconds: float
    finished_at: float  # Unix time
    rows_deleted: int = 0
    batches: int = 0
    expired_rows_remaining: int | None = None
    last_success_timestamp_seconds: float | None = None
    # store -> rows deleted; None where the clean is not known to clean a dag-run store (the family is left out)
    rows_deleted_by_store: dict[str, int] | None = None

    def render(self) -> str:
        """The exposition text: HELP and TYPE for every family, then its sample unless unknown."""
        values = {
            "rows_deleted": self.rows_deleted,
            "expired_rows_remaining": self.expired_rows_remaining,
            "batches": self.batches,
            "duration_seconds": self.duration_seconds,
            "exit_status": self.exit_status,
            "last_run_timestamp_seconds": self.finished_at,
            "last_success_timestamp_seconds": self.last_success_timestamp_seconds,
        }
        by_store = self.rows_deleted_by_store
        lines = []
        for name, help_text in _FAMILIES:
            if name == "rows_deleted_by_store":
                if by_store is None:
                    continue  # a database without a dag-run store: the file stays as it always was
                lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} gauge"]
                lines += [f'{PREFIX}{name}{{store="{store}"}} {_number(n)}' for store, n in by_store.items()]
                continue
            lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} gauge"]
            value = values[name]
            if value is not None:
                lines.append(f"{PREFIX}{name} {_number(value)}")
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}" if math.isfinite(value) else "NaN"


def check_writable(path: Path) -> None:
    """Fail before anything is deleted when ``path`` cannot be replaced: its directory must exist and
    take a new file (tried, then removed), and ``path`` must not be a directory."""
    directory = path.parent
    problem = None
    if path.is_dir():
        problem = "is a directory"
    elif directory.exists() and not directory.is_dir():
        problem = f"cannot be written: {directory} is not a directory"
    elif not directory.is_dir():
        problem = f"cannot be written: directory {directory} does not exist"
    else:
        try:
            with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{path.name}.", suffix=".check"):
                pass
        except OSError as exc:
            problem = f"cannot be written: {exc.strerror or exc} in {directory}"
    if problem:
        raise InvalidInputError(f"{PARAMETER} {path} {problem}", parameter="metrics_file")


def read_last_success(path: Path) -> float | None:
    """The last-success time a previous run wrote to ``path``; None when there is none to read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    match = re.search(rf"^{LAST_SUCCESS} (\S+)$", text, re.MULTILINE)
    if not match:
        return None
    try:
        value = float(match.group(1))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader sees the old file or the new one, never a mix."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes it 0600; node-exporter usually runs as another user
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)  # the rename itself survives a crash


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the file itself is on disk already
    finally:
        os.close(fd)


def exit_status_of(error: BaseException) -> int:
    """The exit code the CLI gives a run that ended with ``error``."""
    if isinstance(error, StateStoreError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, SystemExit):
        return error.code if isinstance(error.code, int) else EXIT_OPERATIONAL
    return EXIT_OPERATIONAL


class CleanRecorder:
    """Follows one clean and writes its metrics file when it ends, however it ends.

    Created before the clean starts (it checks that the file can be written, so a bad path fails before
    anything is deleted); ``on_progress`` follows the committed batches, so a clean that fails midway
    still reports what it deleted, and ``on_store`` which store they were deleted from; ``finish``
    writes the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        check_writable(self.path)
        self.started = time.monotonic()
        self.rows_deleted = 0
        self.batches = 0
        self.store_started: dict[str, int] = {}  # store -> rows_deleted when its walk began, in order

    def on_store(self, store: str) -> None:
        """Called when the clean starts on a store: the rows deleted from now on are that store's."""
        self.store_started[store] = self.rows_deleted

    def on_progress(self, deleted: int) -> None:
        """Called after every batch with the rows deleted so far; a batch that deleted rows counts."""
        if deleted > self.rows_deleted:
            self.batches += 1
            self.rows_deleted = deleted

    def finish(
        self,
        exit_status: int,
        *,
        rows_deleted: int | None = None,
        batches: int | None = None,
        remaining: int | None = None,
        deleted_by_store: dict[str, int] | None = None,
    ) -> CleanMetrics:
        """Write the file for a run that ended with ``exit_status``; the counts default to what
        ``on_progress`` and ``on_store`` saw."""
        finished_at = time.time()
        succeeded = exit_status == EXIT_OK
        by_store = self._by_store() if deleted_by_store is None else dict(deleted_by_store)
        metrics = CleanMetrics(
            exit_status=exit_status,
            duration_seconds=time.monotonic() - self.started,
            finished_at=finished_at,
            rows_deleted=self.rows_deleted if rows_deleted is None else rows_deleted,
            batches=self.batches if batches is None else batches,
            expired_rows_remaining=remaining,
            rows_deleted_by_store=by_store if "dag_run" in by_store else None,
            last_success_timestamp_seconds=finished_at if succeeded else read_last_success(self.path),
        )
        try:
            write_atomically(self.path, metrics.render())
        except OSError as exc:
            raise MetricsFileError(
                f"cannot write {PARAMETER} {self.path}: {exc.strerror or exc}", parameter="metrics_file"
            ) from None
        return metrics

    def _by_store(self) -> dict[str, int]:
        """The rows deleted from each store the clean reached, from where its walk began to the next's."""
        starts = list(self.store_started.items())
        if not starts:
            return {}  # it failed before it reached a store
        ends = [start for _store, start in starts[1:]] + [self.rows_deleted]
        return {store: end - start for (store, start), end in zip(starts, ends, strict=True)}
