"""Files under a root for the filesystem backend: a local folder (``LocalFiles``) or any fsspec URL
(``FsspecFiles``). Paths given to them are relative, ``/``-separated and already safe (``fs_paths``)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from statestore_cli.backends.fs_paths import TEMP_MARK
from statestore_cli.errors import BackendError, ConfigError
from statestore_cli.masking import mask_text, register_url_password


class Files(Protocol):
    root: str  # as it may be shown: a URL's password masked

    def write(self, rel: str, data: bytes) -> None: ...
    def read(self, rel: str) -> bytes | None: ...
    def remove(self, rel: str) -> bool: ...
    def remove_tree(self, rel: str) -> None: ...
    def walk(self) -> Iterator[tuple[str, datetime | None]]: ...


def temp_name(rel: str) -> str:
    folder, _, name = rel.rpartition("/")
    return f"{folder}/.{name}{TEMP_MARK}{secrets.token_hex(6)}"


def open_files(root: str) -> Files:
    if "://" in root:
        return FsspecFiles(root)
    path = Path(root).expanduser()
    if not path.is_absolute():
        raise ConfigError(f"the filesystem backend's root {mask_text(root)!r} must be an absolute path or a URL")
    return LocalFiles(path)


_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_BELOW_ROOT = _FOLDER | os.O_NOFOLLOW  # under the root no symbolic link is followed, not even to a folder


class LocalFiles:
    """Values as files under a local folder, the root, which decides who may read them.

    Every folder and file under the root is opened from its parent's descriptor without following a symbolic
    link, so a link planted inside the root can neither send a write elsewhere nor make a read return another
    file; a link found there is an error naming it. New folders and files take the root's permissions (a file
    without its execute bits, the owner always able to read and write) whatever the umask, and, written by
    root, the root's owner and group: a value ``statestore set`` writes as root stays readable and replaceable
    by the Airflow workers that own the root. A missing root is created owner-only (0700)."""

    def __init__(self, root: Path) -> None:
        self.base = root
        self.root = str(root)

    # -- folders, opened from the root down --------------------------------------------------------------
    def _open_root(self, create: bool) -> int | None:
        try:
            return os.open(self.base, _FOLDER)  # the configured root itself may be a link (the operator's own)
        except FileNotFoundError:
            if not create:
                return None
        self.base.mkdir(mode=0o700, parents=True, exist_ok=True)
        return os.open(self.base, _FOLDER)

    def _open_folder(self, rel: str, create: bool = False) -> int | None:
        """A descriptor of the folder ``rel`` (``""``: the root), or None when it does not exist and not
        ``create``; a symbolic link or a file on the way is a ``BackendError``."""
        fd = self._open_root(create)
        if fd is None:
            return None
        root = os.fstat(fd)
        walked = ""
        for part in rel.split("/") if rel else ():
            walked = f"{walked}/{part}" if walked else part
            try:
                child = self._child_folder(fd, part, root if create else None)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise self._not_a_folder(walked) from None
                raise
            os.close(fd)
            if child is None:
                return None
            fd = child
        return fd

    @staticmethod
    def _child_folder(fd: int, name: str, root: os.stat_result | None) -> int | None:
        """The folder ``name`` in ``fd``, made (as ``root`` says) when missing and ``root`` is given."""
        try:
            return os.open(name, _BELOW_ROOT, dir_fd=fd)
        except FileNotFoundError:
            if root is None:
                return None
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
            made = True
        except FileExistsError:  # another writer made it first: it is theirs to have set up
            made = False
        child = os.open(name, _BELOW_ROOT, dir_fd=fd)
        if made:
            _take_root_access(child, root, stat.S_IMODE(root.st_mode) & 0o2777 | 0o700)
        return child

    def _not_a_folder(self, rel: str) -> BackendError:
        return BackendError(
            f"the filesystem backend's {self.base / rel} is a symbolic link or a file where a folder of values "
            "belongs; nothing under the root is followed through a link: remove it"
        )

    # -- Files -----------------------------------------------------------------------------------------
    def write(self, rel: str, data: bytes) -> None:
        folder_rel, _, name = rel.rpartition("/")
        folder = self._open_folder(folder_rel, create=True)
        assert folder is not None
        try:
            root = os.stat(self.base)
            temp = temp_name(rel).rpartition("/")[2]
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder
            )
            try:
                with open(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    _take_root_access(handle.fileno(), root, stat.S_IMODE(root.st_mode) & 0o666 | 0o600)
                    os.fsync(handle.fileno())  # the rename must not publish a file whose bytes are not on disk
                # atomic: a reader sees the old file or the new one, never half of one; a link there is replaced
                os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            finally:
                _unlink(temp, folder)
        finally:
            os.close(folder)

    def read(self, rel: str) -> bytes | None:
        folder_rel, _, name = rel.rpartition("/")
        folder = self._open_folder(folder_rel)
        if folder is None:
            return None
        try:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._not_a_file(rel) from None
                raise
            with open(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would hang the read, a device feed it
                    raise self._not_a_file(rel)
                return handle.read()
        finally:
            os.close(folder)

    def _not_a_file(self, rel: str) -> BackendError:
        return BackendError(
            f"the filesystem backend's {self.base / rel} is a symbolic link or a special file, not a value "
            "this backend wrote; nothing under the root is read through a link: remove it"
        )

    def remove(self, rel: str) -> bool:
        folder_rel, _, name = rel.rpartition("/")
        folder = self._open_folder(folder_rel)
        if folder is None:
            return False
        try:
            os.unlink(name, dir_fd=folder)  # a link is removed itself, never its target
        except FileNotFoundError:
            return False
        finally:
            os.close(folder)
        self._prune(folder_rel)
        return True

    def remove_tree(self, rel: str) -> None:
        import shutil

        parent_rel, _, name = rel.rpartition("/")
        parent = self._open_folder(parent_rel)
        if parent is None:
            return
        try:
            try:
                found = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                found = None
            if found is not None and stat.S_ISDIR(found.st_mode):
                shutil.rmtree(name, dir_fd=parent)  # from descriptors: a link inside is removed, not followed
        finally:
            os.close(parent)
        self._prune(parent_rel)

    def _prune(self, rel: str) -> None:
        """Remove the folders of ``rel`` left empty, deepest first, up to the root (a writer racing to create
        one re-creates it)."""
        parts = rel.split("/") if rel else []
        root = self._open_root(create=False)
        if root is None:
            return
        fds = [root]
        try:
            for part in parts:
                try:
                    fds.append(os.open(part, _BELOW_ROOT, dir_fd=fds[-1]))
                except OSError:
                    return
            for depth in range(len(parts) - 1, -1, -1):
                os.close(fds.pop())
                try:
                    os.rmdir(parts[depth], dir_fd=fds[-1])
                except OSError:
                    return
        finally:
            for fd in fds:
                os.close(fd)

    def walk(self) -> Iterator[tuple[str, datetime | None]]:
        for folder, _, names in os.walk(self.base):  # into no linked folder
            for name in names:
                path = Path(folder, name)
                try:
                    moment = datetime.fromtimestamp(path.lstat().st_mtime, UTC)
                except FileNotFoundError:  # deleted while we walked
                    continue
                yield path.relative_to(self.base).as_posix(), moment


def _take_root_access(fd: int, root: os.stat_result, mode: int) -> None:
    """Give the new file or folder ``fd`` the root's owner and group (when written by root for another user)
    and ``mode``, made from the root's permissions: the root folder decides who reads the values."""
    if os.geteuid() == 0 and (root.st_uid, root.st_gid) != (0, 0):
        os.fchown(fd, root.st_uid, root.st_gid)
    os.fchmod(fd, mode)  # after the chown, which clears the setgid bit


def _unlink(name: str, folder: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


class FsspecFiles:
    def __init__(self, url: str) -> None:
        # sftp://, ftp://, smb:// roots carry credentials: fsspec's own errors may quote the password
        register_url_password(url)
        shown = mask_text(url)
        try:
            from fsspec.core import url_to_fs  # type: ignore[import-untyped, import-not-found, unused-ignore]
        except ImportError:
            raise ConfigError(
                f"the filesystem backend's root {shown!r} is a URL, which needs fsspec: install fsspec "
                "(pip install fsspec), or reinstall statestore with its fsspec extra (pip install '.[fsspec]' "
                "in its source tree)"
            ) from None
        self.root = shown
        self.fs, base = url_to_fs(url)
        self.base = base.rstrip("/")
        # Object stores publish a whole object per put; a local or network file system needs the rename.
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self.rename = bool({"file", "local"} & set(protocols))

    def _path(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def write(self, rel: str, data: bytes) -> None:
        if not self.rename:
            self.fs.pipe_file(self._path(rel), data)
            return
        temp = self._path(temp_name(rel))
        self.fs.makedirs(self._path(rel).rpartition("/")[0], exist_ok=True)
        self.fs.pipe_file(temp, data)
        try:
            self.fs.mv(temp, self._path(rel))
        finally:
            if self.fs.exists(temp):
                self.fs.rm_file(temp)

    def read(self, rel: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(rel)))
        except FileNotFoundError:
            return None

    def remove(self, rel: str) -> bool:
        try:
            self.fs.rm_file(self._path(rel))
        except FileNotFoundError:
            return False
        return True

    def remove_tree(self, rel: str) -> None:
        if self.fs.exists(self._path(rel)):
            self.fs.rm(self._path(rel), recursive=True)

    def walk(self) -> Iterator[tuple[str, datetime | None]]:
        if not self.fs.exists(self.base):
            return
        for path, info in self.fs.find(self.base, detail=True).items():
            yield path[len(self.base) + 1 :], _modified(info)


def _modified(info: dict[str, Any]) -> datetime | None:
    """A listed file's last write, from whichever field this fsspec implementation fills."""
    for name in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(name)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None
