"""The file a deleting command writes what it deletes to (``--backup FILE``): made and checked before anything is
deleted, lines appended in the export format, synced to disk before each batch commits, cut back to where a batch
began when it is rolled back (``statestore_cli.ops.backup`` says how each engine's batches use it)."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from statestore_cli.errors import PARAMETER, BackendError, InvalidInputError, StateStoreError
from statestore_cli.ops.records import printable, printable_utf8

WRITE_CHUNK = 1000  # lines per write(): a few hundred KB at most held
BACKUP_MODE = 0o600  # owner-only: the file holds every value the command deleted


class BackupFileError(BackendError):
    """The backup file could not be written or synced while the command ran: the batch in progress was
    rolled back, and what earlier batches deleted is in the file."""


# -- the file ------------------------------------------------------------------------------------------------
def _refuse(path: Path, problem: str) -> InvalidInputError:
    return InvalidInputError(f"{PARAMETER} {path}: {problem}", parameter="backup")


def check_backup_path(path: Path) -> None:
    """Refuse (``InvalidInputError``, nothing created) a backup path the command could not write to the end, or
    could write where another user reads or changes what it deletes: a file that exists and is not empty, a
    symbolic link, a directory or other non-file, a file another user owns or with a second name (hard link), a
    folder missing or not writable."""
    if str(path) == "-":
        raise InvalidInputError(
            f"{PARAMETER} - would be stdout, which cannot be synced to disk before each commit; give a file path",
            parameter="backup",
        )
    try:
        found = path.lstat()
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror}); give another path") from None
    if found is not None:
        _check_existing(path, found)
        if not os.access(path, os.W_OK):
            raise _refuse(path, "is not writable for this user; give another path")
        return
    folder = path.parent
    if not folder.exists():
        raise _refuse(path, f"the directory {folder} does not exist; create it or give another path")
    if not folder.is_dir():
        raise _refuse(path, f"{folder} is not a directory; give another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _refuse(path, f"cannot create files in {folder} (no permission, or a read-only file system)")


def _check_existing(path: Path, found: os.stat_result) -> None:
    """An existing backup path (its ``lstat``, or the ``fstat`` of what was opened) is used only when it is an
    empty regular file of this user's with no other name: anything else may be read or changed by someone else
    while it holds the deleted values, or (a symbolic link) send them into a file the user never named."""
    if stat.S_ISLNK(found.st_mode):
        raise _refuse(path, "is a symbolic link, which a backup is never written through; give the path of a new file")
    if stat.S_ISDIR(found.st_mode):
        raise _refuse(path, "is a directory; give the path of a new file in it")
    if not stat.S_ISREG(found.st_mode):
        raise _refuse(path, "is not a regular file; give the path of a new file")
    if found.st_uid != os.geteuid():
        raise _refuse(
            path,
            f"is owned by another user (uid {found.st_uid}), who could read or change the backup; remove it or "
            "give the path of a new file",
        )
    if found.st_nlink != 1:
        raise _refuse(path, f"has {found.st_nlink} hard links, through which the backup could be read; give a new path")
    if found.st_size > 0:
        raise _refuse(
            path,
            f"already exists and is not empty ({found.st_size:,} bytes); a backup never overwrites or appends "
            "to a file: give a new path",
        )


class BackupFile:
    """The file a deleting command writes each row it deletes to, in the export format.

    Made before anything is deleted: the path is checked then (``check_backup_path``); the file itself is
    created by the first ``start()`` (when the command is about to delete), owner-only (0600) whatever the
    umask, or an existing empty file of this user's is used, checked again once open and made 0600.
    ``restore`` is the command line that restores it, for the messages that name the file."""

    def __init__(self, path: Path | str, restore: str | None = None) -> None:
        if str(path) == "-":
            check_backup_path(Path("-"))  # refused: stdout, not a file named "-"
        self.path = Path(path).expanduser().absolute()
        check_backup_path(self.path)
        self.restore = restore or f"statestore import {shlex.quote(str(self.path))}"
        self.lines = 0  # lines in the file (each a deleted key)
        self._fd: int | None = None
        self._size = 0  # bytes written
        self._pending: list[str] = []

    @property
    def started(self) -> bool:
        return self._fd is not None

    def start(self) -> None:
        """Create the file (or open an existing empty one) for writing; nothing is deleted before this."""
        if self._fd is not None:
            return
        fd, created = self._open()
        try:
            if not created:  # what was opened, not what the path named when it was checked
                _check_existing(self.path, os.fstat(fd))
            os.fchmod(fd, BACKUP_MODE)  # whatever the umask, and an existing file's mode tightened
        except (StateStoreError, OSError) as exc:
            os.close(fd)
            if isinstance(exc, StateStoreError):
                raise
            raise _refuse(self.path, f"cannot be made owner-only ({exc.strerror})") from None
        self._fd = fd
        if created:  # the new name itself must survive a crash, not only the lines written under it
            self._sync_folder()

    def _open(self) -> tuple[int, bool]:
        """The file's descriptor and whether it was created. Never through a symbolic link (``O_NOFOLLOW``), and
        an existing file without waiting (``O_NONBLOCK``: a FIFO put there since the check fails at once)."""
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
        try:
            try:
                return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, BACKUP_MODE), True
            except FileExistsError:
                fd = os.open(self.path, flags | os.O_NONBLOCK)
        except OSError as exc:
            check_backup_path(self.path)  # says what is there now (a symbolic link, another user's file...)
            raise _refuse(self.path, f"cannot be created ({exc.strerror})") from None
        os.set_blocking(fd, True)
        return fd, False

    def _sync_folder(self) -> None:
        try:
            folder = os.open(self.path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return  # a folder that cannot be opened for reading cannot be synced either; the file's own fsync stands
        try:
            os.fsync(folder)
        except OSError:
            pass  # some file systems cannot sync a directory; the file's own fsync still holds its lines
        finally:
            os.close(folder)

    def add(self, line: str) -> None:
        """One line (without its newline); written out every ``WRITE_CHUNK`` lines, synced by ``sync()``."""
        self._pending.append(line)
        if len(self._pending) >= WRITE_CHUNK:
            self._write_pending()

    def add_many(self, lines: list[str]) -> None:
        """Lines (without their newlines), as ``add`` adds each."""
        self._pending.extend(lines)
        if len(self._pending) >= WRITE_CHUNK:
            self._write_pending()

    def add_lines(self, text: str) -> int:
        """Lines already joined, each ending in a newline; returns how many."""
        self._write_pending()
        count = text.count("\n")
        self._write(text, count)
        return count

    def add_bytes(self, data: bytes, count: int) -> None:
        """``count`` lines already joined and encoded (UTF-8), each ending in a newline."""
        self._write_pending()
        self._write_bytes(printable_utf8(data), count)

    def _write_pending(self) -> None:
        if self._pending:
            count = len(self._pending)
            text = "\n".join(self._pending) + "\n"
            self._pending.clear()
            self._write(text, count)

    def _write(self, text: str, count: int) -> None:
        # What the database built is escaped here as encode_line escapes (DEL, C1 controls, bidi overrides).
        self._write_bytes(printable(text).encode("utf-8"), count)

    def _write_bytes(self, data: bytes, count: int) -> None:
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._descriptor(), view)
                view = view[written:]
                self._size += written
        except OSError as exc:
            raise self._failed("write", exc) from None
        self.lines += count

    def sync(self) -> None:
        """Everything added so far is on disk when this returns (written, flushed, fsynced)."""
        self._write_pending()
        try:
            os.fsync(self._descriptor())
        except OSError as exc:
            raise self._failed("sync", exc) from None

    def mark(self) -> tuple[int, int]:
        """Where the file ends now (bytes, lines): ``cut(mark)`` takes it back there."""
        self._write_pending()
        return self._size, self.lines

    def cut(self, mark: tuple[int, int]) -> None:
        """Take the file back to ``mark``: the lines of a batch that was rolled back before its commit."""
        self._pending.clear()
        size, lines = mark
        if self._fd is None or (size, lines) == (self._size, self.lines):
            return
        try:
            os.ftruncate(self._fd, size)
            os.lseek(self._fd, size, os.SEEK_SET)
            os.fsync(self._fd)
        except OSError:
            return  # the lines stay: a few too many is safe, the import just writes those rows back
        self._size, self.lines = size, lines

    def close(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._pending:
                self._fd = fd
                self.sync()
                self._fd = None
        finally:
            os.close(fd)

    def _descriptor(self) -> int:
        if self._fd is None:
            raise BackendError("the backup file is not open")
        return self._fd

    def _failed(self, what: str, exc: OSError) -> BackupFileError:
        return BackupFileError(
            f"cannot {what} the backup {self.path} ({exc.strerror or exc}); the batch in progress was rolled back"
        )

    def describe(self) -> str:
        """Where the deleted keys are and how to put them back, for a message."""
        keys = f"{self.lines:,} deleted key{'s' if self.lines != 1 else ''}"
        return f"{self.path} holds the {keys}: `{self.restore}` restores them"


def with_backup(exc: StateStoreError, backup: BackupFile | None) -> StateStoreError:
    """``exc`` of a command that stopped midway, saying where the backup of what it deleted is."""
    if backup is None or not backup.lines:
        return exc
    return type(exc)(f"{exc.template}; {backup.describe()}", parameter=exc.parameter)
