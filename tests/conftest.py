"""Fixtures: a clean Airflow environment per test, real stores (SQLite, or a server where a module asks), the CLI.

Helpers that are not fixtures are in modules named for what they provide: ``cli_running`` (the CLI in-process
or as a process), ``servers`` (the database servers, each worker's database on them, throwaway databases),
``stores`` (a store of its own, raw SQL), ``run_scope`` (what a run's workers share), ``airflow_schema``,
``seeded_stores``, ``terminals``, ``faults``, ``metrics_files``, ``pgbouncer_proxy``, ``expected_output``...;
``sample_backends`` holds the custom backends, ``NullBackend`` the one stub the others build on. No test
module imports another: what two of them share goes into such a module.

Parallel workers. The suite runs on pytest-xdist's workers (``-n`` in pyproject's addopts), so no test may
rely on another's rows, locks, files or settings, nor on running alone. How a test gets a database:

- a store with the schema made: ``db_url`` (SQLite; ``@pytest.mark.parametrize("db_url", ENGINES,
  indirect=True)``, or ``ALL_ENGINES = True`` in the module, for PostgreSQL and MariaDB too); an empty one:
  ``empty_db_url`` (the same parameters) or ``stores.isolated_database(engine, tmp_path)``;
- a whole server database (PgBouncer, an Airflow schema): ``servers.throwaway_database`` /
  ``airflow_schema.throwaway_airflow_database``, named by ``servers.database_name``, which names the worker.

Each worker has a database of its own on each server, ``sstest_<run>_<worker>`` (``servers.require_server``
gives its URL: create databases and schemas from it, never tables in it); the PostgreSQL schemas above are
made inside it. Never write the URL or name of a database a test uses into the test, nor change a server-wide
setting (``SET GLOBAL``): set it for the test's own sessions (the URL's ``options`` or ``init_command``). What is
costly and only read is built once per run for every worker (``run_scope.once_per_run``, ``servers.run_database``:
Airflow's migrated databases, the wheel); servers a test starts listen on a free loopback port. A test on a
server, or one that starts processes, terminals or servers or waits out a timeout, is ``slow``: the quick
subset (``-m 'not slow'``) leaves it out.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_running import Result, run_cli
from monitoring import Server, node_exporter
from run_scope import once_per_run, start_run
from servers import ENGINES, drop_worker_databases, finish_run
from stores import isolated_database, mariadb_store, postgresql_store

from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.masking import forget_secrets
from statestore_cli.ops.commands import db_init

# tmp_path on a RAM-backed file system where the machine has one (Linux's /dev/shm), unless the caller chose
# a root: the SQLite stores, backups and metrics files of two thousand tests are fsynced at every commit (a
# run on a 2-core VM waited 111 s on the disk, 73 s with this). Nothing here tests the disk (the full-disk
# tests mount a tmpfs of their own), and a path the caller passes with --basetemp still wins.
_RAM = Path("/dev/shm")
if "PYTEST_DEBUG_TEMPROOT" not in os.environ and _RAM.is_dir() and os.access(_RAM, os.W_OK | os.X_OK):
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(_RAM)

# Hypothesis's caches (the Unicode character map its text strategies build, the constants it reads from the
# modules it finds) in a folder kept between runs, beside the Airflow venv's (``airflow_venv``), not in the
# checkout's .hypothesis: CI tests a fresh clone, where each worker that ran a property test built them again
# (seconds of CPU each). No example is ever stored: the property tests run without a database, derandomised.
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(Path.home() / ".cache" / "statestore-tests" / "hypothesis")

# The tests that interrupt a command (Ctrl-C, SIGINT, SIGQUIT) need it to start with the default handling of
# those signals. A shell without job control starts a background job (`.ci/run &` in a script) with both
# ignored, and an ignored signal stays ignored across exec: every process the tests started would go on.
for _number in (signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_number) == signal.SIG_IGN:
        signal.signal(_number, signal.default_int_handler if _number == signal.SIGINT else signal.SIG_DFL)


def pytest_configure(config: pytest.Config) -> None:
    # Python's cyclic collector, a tenth as often as by default (every 7,000 allocations, not 700), and blind
    # to what collection made (pytest_collection_finish): a worker keeps every module's tests, SQLAlchemy's
    # tables and typer's commands alive for the whole run, and each collection walked them again. Together
    # 13% of the quick subset's CPU (21.5 s -> 18.6 s in one process). Nothing here waits for the collector:
    # the tool closes what it opens, and a test that needs a collection makes one.
    gc.set_threshold(7000, 10, 10)
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers): the run's token and folder
        start_run()
        _compile_package()
        if config.getoption("numprocesses", None):
            _rewrite_test_modules(config)


def _compile_package() -> None:
    """The package's bytecode, written before the workers start, as pip writes an installed package's: the
    tests start the tool in hundreds of new processes, and from an editable install under
    PYTHONDONTWRITEBYTECODE each would compile every module it imports again (0.03-0.07 s of CPU each)."""
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parents[1] / "statestore_cli", quiet=1)


def _rewrite_test_modules(config: pytest.Config) -> None:
    """The test modules imported once, before the workers start, with their bytecode written: pytest keeps a
    module's rewritten assertions in ``__pycache__`` and every worker reads them from there. Without it, under
    PYTHONDONTWRITEBYTECODE (or in a fresh clone), each worker rewrote every module itself: 3-4 s of CPU per
    worker, 0.6 s with the cache, some 10 s of a 6-worker run's wall time on 2 cores."""
    import importlib

    tests = Path(__file__).resolve().parent
    named = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    only_files = named and all(path.is_file() and path.parent == tests for path in named)
    modules = named if only_files else sorted(tests.glob("test_*.py"))
    if _bytecode_written(modules):
        return  # a run before wrote it all, and nothing changed since: the imports here would only cost time
    was, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    try:
        for module in modules:
            try:
                importlib.import_module(module.stem)
            except KeyboardInterrupt:
                raise
            except BaseException:  # a module that skips (pytest.skip raises one) or fails does so again in its worker
                pass
    finally:
        sys.dont_write_bytecode = was


def _bytecode_written(modules: list[Path]) -> bool:
    """Whether ``_rewrite_test_modules`` wrote the bytecode of ``modules`` before (as pytest rewrites them), each
    file newer than its source, and no helper module's bytecode it wrote then is older than its source now."""
    rewritten = f".{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
    sources = [(path, path.parent / "__pycache__" / (path.stem + rewritten)) for path in modules]
    for path in Path(__file__).resolve().parent.glob("*.py"):
        cached = Path(importlib.util.cache_from_source(str(path)))
        if not path.name.startswith("test_") and cached.exists():
            sources.append((path, cached))
    try:
        return all(cached.stat().st_mtime >= path.stat().st_mtime for path, cached in sources)
    except OSError:  # one is missing
        return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made lives as long as the run: out of the collector's sight from now on."""
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # every worker has ended
        finish_run()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No test sees the developer's Airflow: AIRFLOW_* and the REST API's variables cleared, AIRFLOW_HOME a fresh
    folder."""
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__", "STATESTORE_API_")) or name in (
            "AIRFLOW_HOME",
            "AIRFLOW_CONFIG",
            "AIRFLOW_CLI_TOKEN",
            "NO_COLOR",
            "FORCE_COLOR",
        ):
            monkeypatch.delenv(name)
    home = tmp_path / "airflow-home"
    home.mkdir()
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "100")  # rich reads it: fixed-width tables
    monkeypatch.setenv("TERM", "dumb")
    return home


SERVER_ENGINES = {"postgresql", "mariadb"}


def _on_a_server(value: object) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_on_a_server(v) for v in value)
    return isinstance(value, str) and value in SERVER_ENGINES


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test parametrised to run on PostgreSQL or MariaDB is ``slow`` (the quick subset, ``-m 'not slow'``,
    runs on SQLite); and the slow tests run first, those starting Airflow (``_starts_airflow``) first of all, so
    that the parallel workers start the longest ones early, not at the end, when the others would wait for them.

    The tests starting Airflow run on one worker (``xdist_group``): the first of them waits for Airflow's
    once-per-run ``db migrate``, which would otherwise hold every worker at the start while one migrates."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(_on_a_server(v) for v in callspec.params.values()):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("airflow") is not None:
            item.add_marker(pytest.mark.xdist_group("airflow"))
    items.sort(key=lambda item: (not _starts_airflow(item), item.get_closest_marker("slow") is None))


def _starts_airflow(item: pytest.Item) -> bool:
    """A test that starts Airflow (marked ``airflow``, or in a group of Airflow's such as its api-server's): its
    group's long setup begins with the run, not after the other slow tests."""
    group = item.get_closest_marker("xdist_group")
    named = group is not None and bool(group.args) and str(group.args[0]).startswith("airflow")
    return item.get_closest_marker("airflow") is not None or named


@pytest.fixture(autouse=True)
def forgotten_secrets() -> Iterator[None]:
    """What one test's `_cmd` or `_secret` gave is not masked in the next test's messages (the mask is per
    process, and a worker runs many tests' commands in one)."""
    yield
    forget_secrets()


@pytest.fixture(autouse=True, scope="session")
def worker_databases() -> Iterator[None]:
    """The databases ``require_server`` made for this worker are dropped when its session ends."""
    yield
    drop_worker_databases()


# -- engines --------------------------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules that set ALL_ENGINES = True run every test that uses a store on each engine (unless the
    test picks its engines itself)."""
    for fixture in ("db_url", "empty_db_url"):
        marks = metafunc.definition.iter_markers("parametrize")
        chosen = any(fixture in str(mark.args[0]) for mark in marks)
        if getattr(metafunc.module, "ALL_ENGINES", False) and fixture in metafunc.fixturenames and not chosen:
            metafunc.parametrize(fixture, ENGINES, indirect=True)


_sqlite_template: list[Path] = []  # a SQLite store db_init made, once per worker
_REUSED_STORES = {"postgresql": postgresql_store, "mariadb": mariadb_store}


def _configured() -> bool:
    """Whether anything but the test's empty AIRFLOW_HOME could reach db_init's settings."""
    home = Path(os.environ["AIRFLOW_HOME"])
    return any(n.startswith("AIRFLOW__") or n == "AIRFLOW_CONFIG" for n in os.environ) or any(home.iterdir())


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A store with the schema created, as the CLI's --conn takes it (SQLite unless parametrised).

    On SQLite, a copy of the file ``db init`` made once for the worker (with nothing configured); on PostgreSQL
    and MariaDB a store the worker's earlier test had and left as it was, emptied (``stores.postgresql_store``,
    ``stores.mariadb_store``); unless the test has configured something before asking for its store: then
    ``db init`` makes this one."""
    name = getattr(request, "param", "sqlite")
    if name in _REUSED_STORES and not _configured():
        with _REUSED_STORES[name]() as url:
            yield url
        return
    with isolated_database(name, tmp_path) as url:
        if name == "sqlite" and not _configured():
            if not _sqlite_template:
                folder = tmp_path_factory.mktemp("sqlite-template")
                template = folder / "store.db"
                db_init(
                    Store.open(
                        load_settings(conn_override=f"sqlite:///{template}", environ={"AIRFLOW_HOME": str(folder)}),
                        create_file=True,
                    )
                )
                _sqlite_template.append(template)
            shutil.copyfile(_sqlite_template[0], tmp_path / "store.db")
        else:
            db_init(Store.open(load_settings(conn_override=url), create_file=True))
        yield url


@pytest.fixture
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store of its own, no schema (SQLite unless parametrised, as ``db_url``)."""
    with isolated_database(getattr(request, "param", "sqlite"), tmp_path) as url:
        yield url


@pytest.fixture
def cli(db_url: str) -> Iterator[Callable[..., Result]]:
    """Run ``statestore --conn <db_url> ARGS`` in-process (``run_cli``); ``conn=None`` leaves the connection
    to the config."""

    def invoke(*args: str, input: str | None = None, conn: str | None = db_url) -> Result:
        return run_cli(*args, conn=conn, input=input)

    yield invoke


# -- custom backends --------------------------------------------------------------------------------------
# The module the ``backends`` fixture makes importable as ``ss_test_backends``.
BACKENDS_MODULE = '''
from sample_backends import NullBackend


class DictBackend(NullBackend):
    """A tiny valid backend: nothing is ever stored."""


class NotABackend:
    pass


not_a_class = 42
'''


@pytest.fixture
def backends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A module ``ss_test_backends`` importable from tmp_path, forgotten again after the test."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ss_test_backends.py").write_text(BACKENDS_MODULE, encoding="utf-8")
    (folder / "ss_test_broken.py").write_text("raise RuntimeError('boom at import\\nsecond line')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    yield "ss_test_backends"
    for name in ("ss_test_backends", "ss_test_broken"):
        sys.modules.pop(name, None)


@pytest.fixture
def sample_objects() -> Iterator[dict]:
    """The shared object store of ``sample_backends`` (tests/sample_backends.py), empty for this test."""
    import sample_backends

    sample_backends.OBJECTS.clear()
    yield sample_backends.OBJECTS
    sample_backends.OBJECTS.clear()


# -- Airflow 3.3.2 in its own venv (the modules marked `airflow`) ------------------------------------------
@pytest.fixture(scope="session")
def airflow_python() -> Path:
    """The Python of the cached venv with Airflow 3.3.2 and the common-io provider (``airflow_venv``)."""
    from airflow_venv import airflow_venv_python

    return airflow_venv_python()


@pytest.fixture(scope="session")
def migrated_sqlite(airflow_python: Path) -> Path:
    """A SQLite file ``airflow db migrate`` made, once per test run (the first worker to need it makes it,
    the others wait); tests copy it."""
    from airflow_venv import airflow, airflow_env

    def migrate(folder: Path) -> None:
        airflow(airflow_python, airflow_env(folder / "home", f"sqlite:///{folder / 'airflow.db'}"), "db", "migrate")

    return once_per_run("airflow-sqlite", migrate) / "airflow.db"


@pytest.fixture(scope="session")
def airflow_api(airflow_python: Path, migrated_sqlite: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Airflow's api-server on 127.0.0.1 over a SQLite database with a dag run of its own (``api_server``), for
    this worker's session; the tests using it share one worker (``xdist_group("airflow-api")``)."""
    from api_server import api_server

    with api_server(airflow_python, migrated_sqlite, tmp_path_factory.mktemp("airflow-api")) as server:
        yield server


# -- monitoring: node-exporter's textfile collector (tests/monitoring.py) -----------------------------------
@pytest.fixture
def textfile_exporter(tmp_path: Path) -> Iterator[Server]:
    """node-exporter on a free port of 127.0.0.1 with only its textfile collector, reading
    ``tmp_path / "textfile"``; stopped after the test, and checked to be gone."""
    directory = tmp_path / "textfile"
    directory.mkdir()
    with node_exporter(directory, tmp_path / "node-exporter.log") as server:
        yield server
    assert server.proc.poll() is not None, "node-exporter is still running"


# -- a full disk (test_faults, test_backup) ----------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, where the machine lets the test mount one."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root; a full disk cannot be set up here")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs here ({mounted.stderr.decode().strip()}); a full disk cannot be set up"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
