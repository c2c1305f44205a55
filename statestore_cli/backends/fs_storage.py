"""Files under a root for the filesystem backend: a local folder (``LocalFiles``) or any fsspec URL
(``FsspecFiles``). Paths given to them are relative, ``/``-separated and already safe (``fs_paths``)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from statestore_cli.backends.fs_paths import TEMP_MARK
from statestore_cli.errors import ConfigError
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


class LocalFiles:
    def __init__(self, root: Path) -> None:
        self.base = root
        self.root = str(root)

    def write(self, rel: str, data: bytes) -> None:
        target = self.base / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = self.base / temp_name(rel)
        try:
            with open(temp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())  # the rename must not publish a file whose bytes are not on disk
            os.replace(temp, target)  # atomic: a reader sees the old file or the new one, never half of one
        finally:
            temp.unlink(missing_ok=True)

    def read(self, rel: str) -> bytes | None:
        try:
            return (self.base / rel).read_bytes()
        except FileNotFoundError:
            return None

    def remove(self, rel: str) -> bool:
        try:
            (self.base / rel).unlink()
        except FileNotFoundError:
            return False
        self._prune((self.base / rel).parent)
        return True

    def remove_tree(self, rel: str) -> None:
        import shutil

        folder = self.base / rel
        if folder.is_dir():
            shutil.rmtree(folder)
        self._prune(folder.parent)

    def _prune(self, folder: Path) -> None:
        """Remove folders left empty, up to the root (a writer racing to create one re-creates it)."""
        while folder != self.base and self.base in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def walk(self) -> Iterator[tuple[str, datetime | None]]:
        for folder, _, names in os.walk(self.base):
            for name in names:
                path = Path(folder, name)
                try:
                    moment = datetime.fromtimestamp(path.stat().st_mtime, UTC)
                except FileNotFoundError:  # deleted while we walked
                    continue
                yield path.relative_to(self.base).as_posix(), moment


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
