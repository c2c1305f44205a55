"""What the workers of one test run share: the run's token and folder, a run-wide lock, what is built once per
run; and which worker this process is."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def worker_id() -> str:
    """This test process: pytest-xdist's worker id (``gw0``, ``gw1``...), or ``main`` without workers."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


# One test run (all of its workers) shares a token and a folder, which the controller (the one process
# without workers) makes at the start and removes at the end (conftest's pytest_configure and
# pytest_unconfigure); workers inherit them through the environment. Two runs at once on one machine (two
# checkouts, a developer's and CI's) get different ones, so their databases and files never meet.
RUN_TOKEN_VARIABLE = "STATESTORE_TEST_RUN"


def run_token() -> str:
    """This test run's token (8 hex digits), shared by its workers."""
    return os.environ[RUN_TOKEN_VARIABLE]


def run_folder() -> Path:
    """This test run's folder, shared by its workers: for what is built once per run (``once_per_run``)."""
    return Path(tempfile.gettempdir()) / f"statestore-tests-{run_token()}"


def start_run() -> None:
    """Make this run's token and folder (in the controller, before the workers start)."""
    if RUN_TOKEN_VARIABLE not in os.environ:
        os.environ[RUN_TOKEN_VARIABLE] = uuid.uuid4().hex[:8]
    run_folder().mkdir(exist_ok=True)


@contextmanager
def run_lock(name: str) -> Iterator[None]:
    """Hold the run-wide lock ``name``: one worker at a time."""
    import fcntl

    with open(run_folder() / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def once_per_run(name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` of the run's folder, made by ``build(folder)`` the first time any worker asks
    (the others wait for it); a build that failed is tried again by the next to ask."""
    folder = run_folder() / name
    done = folder / ".done"
    with run_lock(name):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
