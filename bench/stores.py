"""Stores to measure on: a generated original per size, and a fresh identical copy for each destructive run.

SQLite originals are cached in the work directory (keyed by size, seed and generator version) and
copied file by file. On PostgreSQL and MariaDB the original is a template schema/database and each
copy is a new schema/database filled with ``INSERT ... SELECT``; all of them are dropped at the end.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import generate
from generate import Counts, Spec

GENERATOR_VERSION = 1  # bump when generate.py changes what it writes: cached stores are then regenerated
REPO = Path(__file__).resolve().parent.parent
SERVERS = {
    "postgresql": os.environ.get("STATESTORE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    "mariadb": os.environ.get("STATESTORE_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}


@dataclass(frozen=True)
class Original:
    spec: Spec
    url: str  # read-only use only: dry runs, cold starts
    name: str  # file path (SQLite) or template schema/database
    generated_seconds: float | None  # None: taken from the cache


class SqliteStores:
    engine = "sqlite"

    def __init__(self, workdir: Path, env: dict[str, str], regenerate: bool) -> None:
        self.cache = workdir / "cache"
        self.copy_path = workdir / "run" / "copy.db"
        self.env = env
        self.regenerate = regenerate

    def original(self, spec: Spec) -> Original:
        path = self.cache / f"store-{spec.rows}-{spec.expired}-s{spec.seed}-v{GENERATOR_VERSION}.db"
        seconds = None
        if self.regenerate or not path.exists():
            self.cache.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial")
            counts: Counts = generate.generate_sqlite(partial, spec, self.env)
            partial.replace(path)
            seconds = counts.seconds
        return Original(spec, f"sqlite:///{path.resolve()}", str(path), seconds)

    @contextmanager
    def fresh(self, original: Original) -> Iterator[str]:
        """A copy of the original that a clean may destroy."""
        self.copy_path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_copy()
        shutil.copyfile(original.name, self.copy_path)
        try:
            yield f"sqlite:///{self.copy_path.resolve()}"
        finally:
            self._remove_copy()

    def _remove_copy(self) -> None:
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(str(self.copy_path) + suffix).unlink(missing_ok=True)

    def close(self) -> None:
        pass


class ServerStores:
    """PostgreSQL (schemas) or MariaDB (databases) on the server at ``admin_url``."""

    def __init__(self, engine: str, admin_url: str, env: dict[str, str]) -> None:
        self.engine = engine
        self.admin_url = admin_url
        self.env = env
        self._templates: list[str] = []

    def original(self, spec: Spec) -> Original:
        name = generate.new_store_name()
        self._templates.append(name)
        url, counts = generate.generate_server(self.admin_url, spec, name, self.env)
        return Original(spec, url, name, counts.seconds)

    @contextmanager
    def fresh(self, original: Original) -> Iterator[str]:
        name = generate.new_store_name()
        try:
            yield generate.clone_store(self.admin_url, original.name, name, self.env)
        finally:
            generate.drop_store(self.admin_url, name)

    def close(self) -> None:
        for name in self._templates:
            generate.drop_store(self.admin_url, name)
        self._templates.clear()


Stores = SqliteStores | ServerStores


def reachable(admin_url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        generate.connect(admin_url, connect_timeout=3).close()
    except Exception as exc:  # any failure to connect means: no server here
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def live_scope(original: Original) -> tuple[str, str, str, int, str]:
    """A key in the middle of a SQLite store that exists and has not expired: what cold-start ``get`` reads."""
    con = sqlite3.connect(original.name)
    try:
        row = con.execute(
            "SELECT dag_id, run_id, task_id, map_index, key FROM task_state_store "
            "WHERE id >= ? AND (expires_at IS NULL OR expires_at > ?) ORDER BY id LIMIT 1",
            (original.spec.rows // 2, generate.utc_text(generate.utcnow_naive())),
        ).fetchone()
    finally:
        con.close()
    if row is None:
        raise RuntimeError("the store has no live key in its second half to read")
    return row
