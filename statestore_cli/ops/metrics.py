"""What a clean reports to monitoring: a Prometheus text-format file for node-exporter's textfile collector.

The file is replaced atomically (a temporary file in the same directory, written, fsynced, then
``os.replace``d over the old one), so the collector never reads half a file. Every run that gets past
its argument checks writes it, whether it finished, stopped early or failed, with its exit status; the
time of the last success is carried over from the previous file when this run did not succeed, so an
alert can ask how long cleans have been failing.

Every sample names what it measured: a ``database`` label (by default the URL's host and database name,
``db.internal/airflow``, or the SQLite file's name; never a user or password) and the operator's own
labels (``--metrics-label region=eu``), so files for different databases in one textfile directory hold
distinct series (node-exporter refuses duplicates). On a database with a dag-run state store (Airflow
3.4), ``rows_deleted_by_store`` splits ``rows_deleted`` by a ``store`` label too (``task``, ``dag_run``);
elsewhere it is not written. ``stats --metrics-file`` writes the store's gauges (``StatsMetrics``) with
the same writer and labels. Free of typer and rich; SQLAlchemy is imported only to read a URL's parts.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from statestore_cli.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OPERATIONAL,
    PARAMETER,
    InvalidInputError,
    MetricsFileError,
    StateStoreError,
)

if TYPE_CHECKING:
    from statestore_cli.ops.stats import StoreStats

PREFIX = "statestore_clean_"
LAST_SUCCESS = f"{PREFIX}last_success_timestamp_seconds"
METRICS_MODE = 0o644  # readable by the textfile collector's user: no values in it

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
    (
        "spared_unfinished",
        "Expired task keys the last clean kept since their task instance has not finished (a retry may need "
        "them); only on an Airflow database, when the clean ran to its end without --include-unfinished.",
    ),
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
    spared_unfinished: int | None = None  # None: nothing was spared by rule, or it was not counted
    labels: Mapping[str, str] = field(default_factory=dict)  # on every sample: database, the operator's own

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
            "spared_unfinished": self.spared_unfinished,
        }
        by_store = self.rows_deleted_by_store
        families: list[Family] = []
        samples: list[Sample]
        for name, help_text in _FAMILIES:
            if name == "rows_deleted_by_store":
                if by_store is None:
                    continue  # a database without a dag-run store: the family is not written
                samples = [({"store": store}, n) for store, n in by_store.items()]
            elif name == "spared_unfinished" and self.spared_unfinished is None:
                continue  # no task instances to ask (a standalone store), or not counted: the family is not written
            else:
                samples = [({}, values[name])]
            families.append(Family(f"{PREFIX}{name}", help_text, samples))
        return render_families(families, self.labels)


# A family's samples: the labels of each (beside the file's own), its value; None = unknown, left out.
Sample = tuple[Mapping[str, str], "float | None"]


@dataclass(frozen=True)
class Family:
    """One metric family: every one a gauge (each describes the last run; the collector keeps no history)."""

    name: str
    help: str
    samples: Sequence[Sample]


def render_families(families: Iterable[Family], labels: Mapping[str, str]) -> str:
    """The exposition text: HELP and TYPE for every family, then each of its known samples with ``labels``
    (the file's: database and the operator's) and its own."""
    lines = []
    for family in families:
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} gauge"]
        for own, value in family.samples:
            if value is not None:
                lines.append(f"{family.name}{label_text({**labels, **own})} {_number(value)}")
    return "\n".join(lines) + "\n"


def label_text(labels: Mapping[str, str]) -> str:
    """``{name="value",...}`` with the exposition format's escapes; empty for no labels."""
    if not labels:
        return ""
    escaped = (f'{name}="{_escape(value)}"' for name, value in labels.items())
    return "{" + ",".join(escaped) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}" if math.isfinite(value) else "NaN"


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
DATABASE = "database"
_FAMILY_LABELS = ("store",)  # labels some families set on their own samples


def database_label(url: str) -> str:
    """What the ``database`` label names by default: the URL's host (with its port when given) and
    database name, ``db.internal/airflow``; a SQLite file's name. Never a user or password."""
    from sqlalchemy.engine import make_url  # SQLAlchemy parses the URL only; nothing connects
    from sqlalchemy.exc import ArgumentError

    from statestore_cli.db.engines import impl_of

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return "unknown"
    if not impl_of(parsed).has_server:  # a file (or memory) of its own
        name = parsed.database or ""
        return _as_utf8(Path(name).name) if name not in ("", ":memory:") else "memory"
    host = parsed.host or "localhost"
    if parsed.port is not None:
        host = f"{host}:{parsed.port}"
    return _as_utf8(f"{host}/{parsed.database or ''}")


def metric_labels(given: Iterable[str], database: str) -> dict[str, str]:
    """The labels of every sample: ``database`` (``database``, unless one of ``given`` sets it), then the
    ``NAME=VALUE`` pairs ``given`` in their order. A bad pair is an ``InvalidInputError``."""
    own: dict[str, str] = {}
    for pair in given:
        name, equals, value = pair.partition("=")
        where = f"{PARAMETER} {pair!r}"
        if not equals:
            problem = "is not NAME=VALUE; write e.g. region=eu-west-1"
        elif not _LABEL_NAME.fullmatch(name):
            problem = f"has a bad label name {name!r}: letters, digits and _, not starting with a digit"
        elif name.startswith("__"):
            problem = f"uses {name!r}: names starting with __ are reserved by Prometheus; rename it"
        elif name in _FAMILY_LABELS:
            problem = f"uses {name!r}, which the store families set themselves; choose another name"
        elif name in own:
            problem = f"sets {name!r} a second time; give each label once"
        elif "\n" in value or "\r" in value:
            problem = "has a line break in its value; give the value on one line"
        elif not _is_utf8(value):  # bytes the command line could not decode: the file is UTF-8
            problem = "has a value that is not valid UTF-8; pass it as UTF-8 text"
        else:
            own[name] = value
            continue
        raise InvalidInputError(f"{where} {problem}", parameter="labels")
    return {DATABASE: own.pop(DATABASE, database), **own}


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _as_utf8(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (a file name's undecodable bytes, kept as surrogate escapes)
    replaced by U+FFFD: a label is written to a UTF-8 file after the clean, when it must not fail."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if not _is_utf8(text) else text


def check_writable(path: Path) -> None:
    """Fail before anything is deleted when ``path`` cannot be replaced: its directory must exist and
    take a new file (tried, then removed), and ``path`` must not be a directory. The file holds no values,
    but it must be this user's: a symbolic link, a special file or another user's file there is refused
    (``os.replace`` would put ours in its place; refusing says that someone else has the path)."""
    problem = _not_ours(path) or _not_writable(path)
    if problem:
        raise InvalidInputError(f"{PARAMETER} {path} {problem}", parameter="metrics_file")


def _not_writable(path: Path) -> str | None:
    directory = path.parent
    if path.is_dir():
        return "is a directory"
    if directory.exists() and not directory.is_dir():
        return f"cannot be written: {directory} is not a directory"
    if not directory.is_dir():
        return f"cannot be written: directory {directory} does not exist"
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{path.name}.", suffix=".check"):
            pass
    except OSError as exc:
        return f"cannot be written: {exc.strerror or exc} in {directory}"
    return None


def _not_ours(path: Path) -> str | None:
    """Why the metrics file at ``path`` is not one this user may replace, or None (also when there is none)."""
    try:
        found = path.lstat()
    except OSError:
        return None  # none there, or the checks after this say why it cannot be written
    if stat.S_ISLNK(found.st_mode):
        return "is a symbolic link, which the metrics file is never written through; remove it or give another path"
    if not stat.S_ISREG(found.st_mode) and not stat.S_ISDIR(found.st_mode):
        return "is not a regular file; remove it or give another path"
    if stat.S_ISREG(found.st_mode) and found.st_uid != os.geteuid():
        return f"is owned by another user (uid {found.st_uid}); remove it or give another path"
    return None


def read_last_success(path: Path) -> float | None:
    """The last-success time a previous run wrote to ``path``, with or without labels; None when there is
    none to read. Carried over whatever its labels: the file is the clean's of one database, and a run
    that cannot read its configuration (``database="unknown"``) must not lose it. Only from a regular file
    of this user's, never through a symbolic link, and without waiting on a FIFO put in its place."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with open(fd, "rb") as handle:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
            return None
        try:
            text = handle.read(1 << 20).decode("utf-8")  # a metrics file is a few KB
        except (OSError, UnicodeDecodeError):
            return None
    match = re.search(rf"^{LAST_SUCCESS}(\{{.*\}})? (\S+)$", text, re.MULTILINE)
    if not match:
        return None
    try:
        value = float(match.group(2))
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
            # mkstemp makes it 0600 (never through a link); node-exporter usually runs as another user, and
            # the file holds counts and labels, no values
            os.fchmod(handle.fileno(), METRICS_MODE)
            os.fsync(handle.fileno())
        os.replace(temporary, path)  # replaces whatever is at path itself, never a link's target
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)  # the rename itself survives a crash


def write_file(path: Path, text: str) -> None:
    """``write_atomically``, an ``OSError`` reported as a ``MetricsFileError``."""
    try:
        write_atomically(path, text)
    except OSError as exc:
        raise MetricsFileError(
            f"cannot write {PARAMETER} {path}: {exc.strerror or exc}", parameter="metrics_file"
        ) from None


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
    # Anything else, SystemExit included (code we ran calling sys.exit, even sys.exit(0)), is a failure:
    # a clean that did not finish must never move last_success forward.
    return EXIT_OPERATIONAL


class CleanRecorder:
    """Follows one clean and writes its metrics file when it ends, however it ends.

    Created before the clean starts (it checks that the file can be written, so a bad path fails before
    anything is deleted); ``on_progress`` follows the committed batches, so a clean that fails midway
    still reports what it deleted, and ``on_store`` which store they were deleted from; ``finish``
    writes the file.
    """

    def __init__(self, path: str | os.PathLike[str], labels: Mapping[str, str] | None = None) -> None:
        self.path = Path(path).expanduser()
        self.labels = dict(labels or {})
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
        spared: dict[str, int] | None = None,
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
            spared_unfinished=None if spared is None else sum(spared.values()),
            last_success_timestamp_seconds=finished_at if succeeded else read_last_success(self.path),
            labels=self.labels,
        )
        write_file(self.path, metrics.render())
        return metrics

    def _by_store(self) -> dict[str, int]:
        """The rows deleted from each store the clean reached, from where its walk began to the next's."""
        starts = list(self.store_started.items())
        if not starts:
            return {}  # it failed before it reached a store
        ends = [start for _store, start in starts[1:]] + [self.rows_deleted]
        return {store: end - start for (store, start), end in zip(starts, ends, strict=True)}


# -- stats --metrics-file --------------------------------------------------------------------------------
STATS_PREFIX = "statestore_"
STORES = ("task", "asset", "dag_run")


@dataclass(frozen=True)
class StatsMetrics:
    """A store's figures as gauges; ``None`` where a figure is unknown (the filter left its store out)."""

    keys: dict[str, int | None]  # store -> keys; dag_run only where the database has that store
    value_bytes: dict[str, int | None]
    task_keys_expired: int | None
    task_keys_never_expire: int | None
    oldest_expired_key_age_seconds: float | None
    timestamp: float  # Unix time of the figures
    labels: Mapping[str, str] = field(default_factory=dict)
    # store -> values over max_value_storage_bytes; None (no sample) when there is no limit or the store was not counted
    values_over_limit: dict[str, int | None] = field(default_factory=dict)
    max_value_storage_bytes: int | None = None  # 0 = no limit

    @classmethod
    def of(cls, stats: StoreStats, oldest_expired_age: float | None, labels: Mapping[str, str]) -> StatsMetrics:
        """The gauges of ``stats``; ``oldest_expired_age`` is the age of its oldest expired task key
        (0 when there is none, None when task keys were not counted)."""
        figures = {"task": stats.task, "asset": stats.asset, "dag_run": stats.dag_run}
        present = {s: f for s, f in figures.items() if s != "dag_run" or stats.has_dag_run_store}
        task = stats.task
        return cls(
            keys={s: None if f is None else f.rows for s, f in present.items()},
            value_bytes={s: None if f is None else f.value_bytes for s, f in present.items()},
            task_keys_expired=None if task is None else task.expiry["expired"],
            task_keys_never_expire=None if task is None else task.expiry["never"],
            oldest_expired_key_age_seconds=oldest_expired_age,
            timestamp=stats.now.timestamp(),
            labels=labels,
            values_over_limit={s: None if f is None else f.over_limit for s, f in present.items()},
            max_value_storage_bytes=stats.max_value_storage_bytes,
        )

    def render(self) -> str:
        p = STATS_PREFIX
        families = [
            Family(f"{p}keys", "Keys in each state store (task, asset, dag_run).", _per_store(self.keys)),
            Family(
                f"{p}task_keys_expired",
                "Task keys whose expires_at has passed: what a clean without --older-than would delete now.",
                [({}, self.task_keys_expired)],
            ),
            Family(
                f"{p}task_keys_never_expire",
                "Task keys without an expires_at, which no clean deletes.",
                [({}, self.task_keys_never_expire)],
            ),
            Family(
                f"{p}value_bytes",
                "Bytes of the stored values in each state store (task, asset, dag_run).",
                _per_store(self.value_bytes),
            ),
            Family(
                f"{p}values_over_limit",
                "Values larger than [state_store] max_value_storage_bytes in each state store; none without a limit.",
                _per_store(self.values_over_limit),
            ),
            Family(
                f"{p}max_value_storage_bytes",
                "The [state_store] max_value_storage_bytes the values were compared with; 0 = no limit.",
                [({}, self.max_value_storage_bytes)],
            ),
            Family(
                f"{p}oldest_expired_key_age_seconds",
                "Seconds since the oldest expired task key expired; 0 when none has.",
                [({}, self.oldest_expired_key_age_seconds)],
            ),
            Family(
                f"{p}stats_timestamp_seconds",
                "When these figures were counted, in seconds since the Unix epoch.",
                [({}, self.timestamp)],
            ),
        ]
        return render_families(families, self.labels)


def _per_store(values: Mapping[str, int | None]) -> list[Sample]:
    return [({"store": store}, value) for store, value in values.items()]
