"""The metadata database: its ``Database`` (the engine and what its messages need), and error translation."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine, create_engine, make_url

from statestore_cli.config.sources import LOCK_TIMEOUT_OVERRIDE
from statestore_cli.errors import (
    PARAMETER,
    ConfigError,
    DatabaseError,
    IntegrityConflictError,
    SchemaMissingError,
    first_line,
)
from statestore_cli.masking import mask_text

T = TypeVar("T")

# The driver each optional extra of the package brings, and the requirement that installs it alone.
_EXTRAS = {"postgresql": ("postgres", "psycopg"), "mysql": ("mysql", "pymysql"), "mariadb": ("mysql", "pymysql")}
DRIVER_REQUIREMENTS = {"postgres": ("psycopg", "psycopg[binary]"), "mysql": ("PyMySQL", "PyMySQL")}


def install_hint(extra: str) -> str:
    """How to get what an extra of statestore brings: the package from PyPI, or statestore reinstalled
    with the extra from its source tree or wheel (no index serves statestore itself)."""
    name, requirement = DRIVER_REQUIREMENTS.get(extra, (extra, extra))
    return (
        f"{name} (pip install '{requirement}'), or reinstall statestore with its {extra} extra "
        f"(pip install '.[{extra}]' in its source tree)"
    )


def _driver_hint(url: URL) -> str:
    extra, driver = _EXTRAS[url.get_backend_name()]
    if url.get_driver_name() == driver:
        return f"install {install_hint(extra)}"
    return f"install it, or use {url.get_backend_name()}+{driver}:// after installing {install_hint(extra)}"


def parse_url(conn: str) -> URL:
    try:
        return make_url(conn)
    except (sa_exc.ArgumentError, ValueError):
        raise ConfigError(
            "invalid [database] sql_alchemy_conn: expected a SQLAlchemy URL such as sqlite:////path/airflow.db"
        ) from None


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for an in-memory database or another engine."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def _create_owner_only(path: Path) -> None:
    """Make a missing SQLite file empty and owner-only (0600) before SQLite opens it: the store holds every
    value, and SQLite would create it 0644 under the usual umask. Its journal and WAL files take the database
    file's mode. An existing file (or anything else at the path) is left for SQLite to open or refuse."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return
    os.close(fd)


def _sqlite_on_connect(busy_ms: int) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Cascades from dag_run and asset only work with foreign keys on, as Airflow runs SQLite.
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        # SQLite has one lock for the whole file, which readers wait for too: every session waits
        # for it as long as the lock timeout says.
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.close()

    return on_connect


# The execution option of a connection that holds the settings each of its transactions begins with
# on PostgreSQL (``set_per_transaction``), beside the engine's lock timeout.
_PER_TRANSACTION = "statestore_per_transaction"


def set_per_transaction(conn: Connection, name: str, milliseconds: int) -> None:
    """On PostgreSQL, set ``name`` (a timeout) for each transaction ``conn`` begins from now on.

    A session-level ``SET`` outlives the transaction, and behind a pooler in transaction mode
    (PgBouncer, as Airflow's Helm chart runs it) it stays on a server connection other clients get
    next, while our own next transaction may run on another server connection without it."""
    settings = dict(conn.get_execution_options().get(_PER_TRANSACTION, {}))
    settings[name] = milliseconds
    conn.execution_options(**{_PER_TRANSACTION: settings})


def _postgresql_on_begin(lock_ms: int | None) -> Callable[[Connection], None]:
    """Start every transaction with its timeouts, set for that transaction only (``set_config(...,
    true)`` is ``SET LOCAL``), all in one statement: nothing of ours outlives the transaction on the
    server connection, and each transaction has them whichever server connection a pooler gives it.
    SQLAlchemy fires ``begin`` for ``conn.begin()`` and for the transaction a statement begins by itself;
    the driver sends BEGIN with the first statement, this one."""

    def on_begin(conn: Connection) -> None:
        settings: dict[str, int] = {} if lock_ms is None else {"lock_timeout": lock_ms}
        settings.update(conn.get_execution_options().get(_PER_TRANSACTION, {}))
        if settings:
            calls = ", ".join(f"set_config('{name}', '{int(value)}', true)" for name, value in settings.items())
            conn.exec_driver_sql(f"SELECT {calls}")

    return on_begin


class StoreOrigin(NamedTuple):
    """Why an engine's URL is the one it is (``Settings.conn_origin``) and the command that creates the
    store there (``Settings.init_command``): a missing store's message says both."""

    why: str
    fix: str
    init_command: str


def missing_store_guide(origin: StoreOrigin | None, what: str = "it") -> str:
    """The end of a missing store's message: where the URL came from, how to point elsewhere, how to create it."""
    if origin is None:
        return "; run `statestore db init`"
    return f"; {origin.why}; {origin.fix}; to create {what} here, run `{origin.init_command}`"


class LockLimit(NamedTuple):
    """The lock timeout an engine's sessions wait under, for the message when it is hit."""

    seconds: float  # as the engine applies it (MySQL: whole seconds)
    writes: bool  # made for a writing command, whose --lock-timeout the message can name


# The execution option of an engine (and so of its connections) that holds its ``Database``.
_DATABASE = "statestore_database"


class Database:
    """One engine on the metadata database and what its sessions and messages need: the connect timeout
    and lock limit it was made with (named when one is hit), why its URL is the one it is (named when the
    store is missing), and the layout of its tables, read once, on first use (``db.layout.layout_of``).

    Made by ``open_database``; the engine's execution options hold it, so code that has only the engine
    or one of its connections finds it (``Database.of``)."""

    def __init__(
        self, engine: Engine, connect_timeout: float, lock_limit: LockLimit | None, origin: StoreOrigin | None
    ) -> None:
        self.engine = engine
        self.connect_timeout = connect_timeout
        self.lock_limit = lock_limit  # None: a server session under the server's own lock timeout
        self.origin = origin
        # The ``db.layout.Layout`` of its tables: ``layout_of`` reads it on first use and keeps it here.
        self.layout: object | None = None
        engine.update_execution_options(**{_DATABASE: self})

    @staticmethod
    def of(bind: Engine | Connection) -> Database | None:
        """The Database ``bind`` (an engine or a connection) belongs to; None for an engine made elsewhere."""
        found = bind.get_execution_options().get(_DATABASE)
        return found if isinstance(found, Database) else None

    @classmethod
    def kept_for(cls, engine: Engine) -> Database:
        """The Database of ``engine``; for an engine made elsewhere (a caller's own ``create_engine``), one
        made now with the defaults (no origin, no lock limit of ours), so that its layout too is read once:
        statements built from two readings of a 3.4 layout would name two different Table objects."""
        return cls.of(engine) or cls(engine, DEFAULT_CONNECT_TIMEOUT, None, None)

    def dispose(self) -> None:
        """Close the engine's pooled connections."""
        self.engine.dispose()


def _mysql_timeouts(url: URL, timeout: float) -> dict[str, Any]:
    """PyMySQL's connect_timeout covers the TCP connect only; the server's greeting is read under
    read_timeout, so that bounds the handshake too, and ``_mysql_on_connect`` lifts it afterwards:
    a long DELETE must not be cut off by it. mysqlclient's connect_timeout covers both already."""
    seconds = max(1, math.ceil(timeout))
    if url.get_driver_name() == "pymysql":
        return {"connect_timeout": seconds, "read_timeout": seconds}
    return {"connect_timeout": seconds}


def _mysql_on_connect(lock_seconds: int | None) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # TIMESTAMP columns convert through the session time zone: pin it to UTC, as Airflow does, so
        # the server's own setting never shifts what is stored or what counts as expired.
        cursor = dbapi_conn.cursor()
        cursor.execute("SET time_zone = '+00:00'")
        if lock_seconds is not None:
            # Row locks wait under innodb_lock_wait_timeout, table and metadata locks (LOCK TABLES, an
            # ALTER TABLE in progress) under lock_wait_timeout, a year by default.
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_seconds}, lock_wait_timeout = {lock_seconds}")
        cursor.close()
        if hasattr(dbapi_conn, "_read_timeout"):  # PyMySQL: the handshake's bound, not every statement's
            dbapi_conn._read_timeout = None

    return on_connect


# URL forms Airflow users have, mapped to a driver this package can install when theirs is missing.
_DRIVER_FALLBACKS = {
    "postgresql": ("psycopg2", "postgresql+psycopg"),
    "postgresql+psycopg2": ("psycopg2", "postgresql+psycopg"),
    "mysql": ("MySQLdb", "mysql+pymysql"),
    "mysql+mysqldb": ("MySQLdb", "mysql+pymysql"),
    "mariadb": ("MySQLdb", "mariadb+pymysql"),
    "mariadb+mysqldb": ("MySQLdb", "mariadb+pymysql"),
}


def _usable_driver(url: URL) -> URL:
    """``url`` with its driver, or the equivalent driver of our extras when that one is not installed."""
    fallback = _DRIVER_FALLBACKS.get(url.drivername)
    if fallback is None or _installed(fallback[0]):
        return url
    return url.set(drivername=fallback[1])


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module blocked or half-installed counts as missing
        return False


SUPPORTED_BACKENDS = ("sqlite", "postgresql", "mysql", "mariadb")


DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds; [state_store] connect_timeout
DEFAULT_LOCK_TIMEOUT = 30.0  # seconds; [state_store] lock_timeout


def open_database(
    conn: str,
    *,
    create_file: bool = False,
    connect_timeout: float | None = None,
    lock_timeout: float | None = None,
    writes: bool = True,
    schema: str | None = None,
    connect_args: dict[str, Any] | None = None,
    engine_args: dict[str, Any] | None = None,
    origin: StoreOrigin | None = None,
) -> Database:
    """The Database of an engine for ``conn``; a SQLite file must exist unless ``create_file`` (``db init``).

    ``connect_timeout`` (seconds, default 10) bounds how long a server may take to accept a connection,
    the handshake included: a server that accepts and never answers must not hang a scheduled job.
    ``lock_timeout`` (seconds, default 30) bounds every wait for a lock another session holds: SQLite's
    busy timeout always; on a server only with ``writes`` (PostgreSQL's ``lock_timeout``, set at the start
    of every transaction for that transaction only, so that nothing of ours stays on a pooler's server
    connection; MySQL's ``innodb_lock_wait_timeout`` and ``lock_wait_timeout``, in whole seconds, once per
    session). On PostgreSQL psycopg 3 prepares no statements (``prepare_threshold=None``), for the same reason.
    ``writes=False`` is for the engine of a command that only reads: reads on a server never wait for a
    row lock, so its sessions are spared the statement, and a lock wait's message names no ``--lock-timeout``.
    ``schema``, ``connect_args``, ``engine_args``: ``[database] sql_alchemy_schema``, ``..._connect_args``
    (merged over ours) and ``..._engine_args`` (keyword arguments of ``create_engine``), as Airflow uses them.
    ``origin``: why the URL is this one and the ``db init`` command for it, for the message of a missing store."""
    url = parse_url(conn)
    backend = url.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ConfigError(
            f"unsupported database {backend!r} in [database] sql_alchemy_conn",
            hint="use sqlite://, postgresql:// or mysql://",
        )
    path = sqlite_path(url)
    if path is not None:
        if create_file:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            raise SchemaMissingError(f"no state store at {path}: the file does not exist{missing_store_guide(origin)}")
    url = _usable_driver(url)
    options: dict[str, Any] = {}
    timeout = DEFAULT_CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    if backend in ("mysql", "mariadb"):
        # Row locks only, no gap locks: concurrent upserts and batched deletes do not deadlock each other.
        options["isolation_level"] = "READ COMMITTED"
        options["connect_args"] = _mysql_timeouts(url, timeout)
    elif backend == "postgresql":
        # libpq counts whole seconds and takes 2 as its least.
        options["connect_args"] = {"connect_timeout": max(2, math.ceil(timeout))}
        if url.get_driver_name() == "psycopg":
            # psycopg 3 turns a statement run a fifth time on a connection into a prepared statement of
            # the server session. Behind a pooler in transaction mode (PgBouncer before 1.21) the next
            # transaction may get another server connection, where it does not exist, and the one it was
            # prepared on keeps it for the next client, whose own statement of that name then clashes.
            # psycopg2 never prepares.
            options["connect_args"]["prepare_threshold"] = None
    for name in url.query:  # a timeout written in the URL itself wins
        options.get("connect_args", {}).pop(name, None)
    if schema and backend == "sqlite":
        raise ConfigError(
            f"[database] sql_alchemy_schema = {schema!r} is set, but SQLite has no schemas (Airflow cannot use "
            "one there either): unset it"
        )
    if schema:  # every statement built from the schema's Table objects names it (see statestore_cli.db.schema)
        options["execution_options"] = {"schema_translate_map": {None: schema}}
    if connect_args:
        options["connect_args"] = {**options.get("connect_args", {}), **connect_args}
    for name, value in (engine_args or {}).items():
        if name in ("connect_args", "execution_options") and isinstance(value, dict):
            value = {**options.get(name, {}), **value}
        options[name] = value
    try:
        engine = create_engine(url, **options)
    except (TypeError, ValueError) as exc:  # only what the configured arguments can cause
        if not engine_args:
            raise
        refused = first_line(exc)
        raise ConfigError(f"[database] sql_alchemy_engine_args: create_engine refused them: {refused}") from None
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"the database driver for {url.drivername!r} is not installed ({exc.name}); {_driver_hint(url)}"
        ) from None
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError) as exc:
        raise ConfigError(f"unsupported [database] sql_alchemy_conn: {first_line(exc)}") from None
    if path is not None and create_file:  # once the configuration is known to be good
        _create_owner_only(path)
    if url.get_driver_name() == "pymysql":
        from statestore_cli.db import mysql_tls

        event.listen(engine, "do_connect", mysql_tls.connect)
    limit = _bound_lock_waits(engine, DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout, writes)
    return Database(engine, timeout, limit, origin)


def make_engine(conn: str, **options: Any) -> Engine:
    """The engine of ``open_database(conn, **options)``, for a caller that needs nothing else of it."""
    return open_database(conn, **options).engine


def _bound_lock_waits(engine: Engine, seconds: float, writes: bool) -> LockLimit | None:
    """Set the lock timeout on each new session (PostgreSQL: each transaction) of ``engine`` (see
    ``open_database``); returns it as applied, None where the server's own applies."""
    backend = engine.url.get_backend_name()
    millis = math.ceil(seconds * 1000)
    if backend == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect(millis))
        return LockLimit(millis / 1000, writes)
    if backend in ("mysql", "mariadb"):
        whole = max(1, math.ceil(seconds)) if writes else None
        event.listen(engine, "connect", _mysql_on_connect(whole))
        return None if whole is None else LockLimit(whole, writes)
    # PostgreSQL: per transaction, for the lock timeout and for what ``set_per_transaction`` adds
    event.listen(engine, "begin", _postgresql_on_begin(millis if writes else None))
    return LockLimit(millis / 1000, writes) if writes else None


def mask_url(url: URL) -> str:
    """The URL as it may be shown: the password and password-like query parameters replaced by ***."""
    return mask_text(url.render_as_string(hide_password=True))


def describe_engine(engine: Engine) -> str:
    return mask_url(engine.url)


@contextmanager
def translate_errors(engine: Engine) -> Iterator[None]:
    """Turn driver and SQLAlchemy failures into one-line ``DatabaseError``s; a lock wait that timed
    out names the lock timeout it waited for and how to raise it."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        message = first_line(exc.orig) if exc.orig is not None else first_line(exc)
        where = describe_engine(engine)
        database = Database.of(engine)
        if exc.statement is None and _is_timeout(message):  # no statement yet: connecting
            seconds = DEFAULT_CONNECT_TIMEOUT if database is None else database.connect_timeout
            why = message if message.startswith("(") and message.endswith(")") else f"({message})"
            raise DatabaseError(
                f"connect timeout: {where} did not accept a connection within {seconds:g}s {why}; check the "
                "host and port, or raise the connect timeout (--connect-timeout, [state_store] connect_timeout)"
            ) from None
        if _is_missing_table(message):
            guide = missing_store_guide(database.origin if database else None, "them")
            raise SchemaMissingError(f"the state store tables are missing in {where}{guide}") from None
        if _is_lock_timeout(exc, message):
            limit = database.lock_limit if database else None
            raise _lock_timeout(engine, limit, exc, where, message) from None
        hint = next((h for text, h in _HINTS.items() if text in message.lower()), "")
        error = IntegrityConflictError if isinstance(exc, sa_exc.IntegrityError) else DatabaseError
        raise error(f"database error on {where}: {message}{hint}") from None
    except sa_exc.SQLAlchemyError as exc:
        raise DatabaseError(f"database error on {describe_engine(engine)}: {first_line(exc)}") from None


# What to do about the SQLite failures a user can fix.
_HINTS = {
    "readonly database": (
        "; the file, its directory or the filesystem is read-only for this user: write as a user that may, "
        "or use a writable copy"
    ),
    "database or disk is full": "; free space on its filesystem, then retry: the previous values are kept",
    "unable to open database file": "; the file or its directory cannot be opened: check they exist and may be read",
}


def _lock_timeout(
    engine: Engine, limit: LockLimit | None, exc: sa_exc.DBAPIError, where: str, message: str
) -> DatabaseError:
    if limit is None:  # a server session without our limit: the server's own ran out
        return DatabaseError(
            f"gave up waiting for a lock on {where} ({message}); another transaction holds the rows: retry later"
        )
    seconds = f"{limit.seconds:.3f}".rstrip("0").rstrip(".")
    # SQLite locks the whole file; a server, rows of one table.
    on = where if engine.dialect.name == "sqlite" else _locked_table(exc) or where
    text = f"waited {seconds}s for a lock held by another session on {on}; raise [state_store] lock_timeout"
    if not limit.writes:  # a reading command has no --lock-timeout to name
        return DatabaseError(text)
    return DatabaseError(f"{text} or {PARAMETER}", parameter=LOCK_TIMEOUT_OVERRIDE)


# PostgreSQL names the table of the row it waited for in the error's context; MySQL names none, so
# the table the statement writes (or reads) is named.
_WAITED_RELATION = re.compile(r'in relation "([^"]+)"')
_STATEMENT_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+[`"]?(\w+)', re.IGNORECASE)


def _locked_table(exc: sa_exc.DBAPIError) -> str | None:
    context = getattr(getattr(exc.orig, "diag", None), "context", None)
    found = _WAITED_RELATION.search(context or "") or _STATEMENT_TABLE.search(exc.statement or "")
    return found.group(1) if found else None


def _is_timeout(message: str) -> bool:
    lowered = message.lower()
    return "timeout expired" in lowered or "timed out" in lowered


def _is_lock_timeout(exc: sa_exc.DBAPIError, message: str) -> bool:
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == "55P03":  # PostgreSQL: lock_not_available
        return True
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    if args and args[0] == 1205:  # MySQL / MariaDB: ER_LOCK_WAIT_TIMEOUT
        return True
    lowered = message.lower()
    return any(m in lowered for m in ("lock timeout", "lock wait timeout", "database is locked"))


def is_deadlock(exc: BaseException) -> bool:
    """A transaction the database rolled back to break a deadlock: safe to run again."""
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) in ("40P01", "40001"):  # PostgreSQL
        return True
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    return bool(args) and args[0] == 1213  # MySQL / MariaDB: ER_LOCK_DEADLOCK


def retry_deadlocks(action: Callable[[], T], attempts: int = 5) -> T:
    """Run ``action`` (a whole transaction), again when the database chose it as a deadlock victim."""
    for attempt in range(attempts):
        try:
            return action()
        except sa_exc.DBAPIError as exc:
            if attempt == attempts - 1 or not is_deadlock(exc):
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def _is_missing_table(message: str) -> bool:
    lowered = message.lower()
    return (
        "no such table" in lowered
        or ("relation" in lowered and "does not exist" in lowered)
        or ("table" in lowered and "doesn't exist" in lowered)
    )
