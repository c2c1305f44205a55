"""`statestore get` for one task key on the embedded SQLite store, without typer, rich or SQLAlchemy.

A retrying task or a shell script often runs just this; loading the full CLI costs several times the
lookup itself. ``answer`` handles the plain case and returns None for everything else (another
command, an asset scope, a custom backend, another engine, an option it does not read, any doubt),
and the full CLI takes over, also when a value would come from a ``_cmd`` command or a ``_secret``
(which then run once, in the full CLI). What it prints comes from the modules the full CLI prints
with (``cli.output.modes``, ``cli.output.documents``, ``cli.failure``), and tests compare the two paths byte for
byte and hold the options below to the ``get`` command's.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime

from statestore_cli.cli.failure import report_error
from statestore_cli.cli.output.documents import expired_notice, get_output
from statestore_cli.cli.output.modes import MODES, resolve
from statestore_cli.errors import StateStoreError

# The options the fast path answers; any other option goes to the full CLI.
ROOT_OPTIONS = ("--config", "--conn")
GET_OPTIONS = ("--dag-id", "--run-id", "--task-id", "--map-index", "--output", "-o")
# Options of the full CLI the fast path leaves to it on purpose (a test holds these lists to the CLI's).
ROOT_HANDED_OVER = (
    "--connect-timeout",
    "--debug",
    "--version",
    "--help",
    "-h",
    "--install-completion",
    "--show-completion",
    "--api-url",  # through the REST API: no database is read here
)
GET_HANDED_OVER = ("--asset-name", "--asset-uri", "--asset-id", "--raw", "--help", "-h")

# Airflow 3.3's layout only, the one a standalone store has: a table with regions (Airflow 3.4) has a
# region_id column, and this query would read keys of every region; the first query finds that column
# and hands over to the full CLI, which reads the database's layout (a 3.4 table without map_index
# fails the second query, and hands over too).
_REGIONS = "SELECT 1 FROM pragma_table_info('task_state_store') WHERE name = 'region_id'"
_QUERY = (
    "SELECT value, updated_at, expires_at FROM task_state_store "
    "WHERE dag_id = ? AND run_id = ? AND task_id = ? AND map_index = ? AND key = ?"
)
_RUN_QUERY = "SELECT 1 FROM dag_run WHERE dag_id = ? AND run_id = ? LIMIT 1"
# The key at other map indices of the task, which a missing key's message names (``commands.get_entry``).
_ELSEWHERE_QUERY = (
    "SELECT map_index, count(*) FROM task_state_store WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = ? "
    "AND map_index != ? GROUP BY map_index"
)


def _options(args: Sequence[str], names: Sequence[str]) -> tuple[dict[str, str], list[str]] | None:
    """``--name value`` / ``--name=value`` pairs for ``names``, and the positional rest; None on anything else."""
    found: dict[str, str] = {}
    rest: list[str] = []
    items = list(args)
    while items:
        item = items.pop(0)
        name, sep, inline = item.partition("=")
        if sep and not name.startswith("--"):
            return None  # `-o=json`: click reads the value as "=json"; let it say so
        if name in names and name not in found:
            if not sep and not items:
                return None
            found[name] = inline if sep else items.pop(0)
        elif item.startswith("-") and item != "-":
            return None
        else:
            rest.append(item)
    return found, rest


def _parse(argv: Sequence[str]) -> tuple[dict[str, str], dict[str, str], str] | None:
    if "get" not in argv:
        return None
    split = list(argv).index("get")
    root = _options(argv[:split], ROOT_OPTIONS)
    command = _options(argv[split + 1 :], GET_OPTIONS)
    if root is None or command is None or root[1] or len(command[1]) != 1:
        return None
    options = command[0]
    if "-o" in options and "--output" in options:
        return None
    return root[0], options, command[1][0]


def answer(argv: Sequence[str], environ: dict[str, str] | None = None) -> int | None:
    """Run `get` and return its exit code, or None when the full CLI must handle ``argv``."""
    env = os.environ if environ is None else environ
    # Through Airflow's REST API (--api-url, or its variable) nothing is read from a database here.
    through_api = env.get("STATESTORE_NO_FAST_PATH") or env.get("STATESTORE_API_URL")
    parsed = None if through_api else _parse(argv)
    if parsed is None:
        return None
    root, options, key = parsed
    output = options.get("--output", options.get("-o", "auto"))
    if output not in MODES or not all(name in options for name in ("--dag-id", "--run-id", "--task-id")):
        return None
    try:
        return _get(root, options, key, output)
    except BrokenPipeError:
        raise  # the value was being written: the caller ends quietly (cli.failure), no second answer
    except (StateStoreError, ValueError, OSError, sqlite3.Error):
        return None  # the full CLI explains the problem properly


def _get(root: dict[str, str], options: dict[str, str], key: str, output: str) -> int | None:
    from statestore_cli.backends.base import stored_ref
    from statestore_cli.config import load_settings
    from statestore_cli.model.entries import Entry
    from statestore_cli.model.json_depth import nests_deeper_than
    from statestore_cli.model.scopes import TaskScope, check_key, missing_key
    from statestore_cli.model.timestamps import utc_instant

    scope = TaskScope(
        options["--dag-id"], options["--run-id"], options["--task-id"], int(options.get("--map-index", "-1"))
    )
    check_key(key)
    # No command runs and no secrets backend is asked here (a value from one raises, and the full CLI
    # takes over): the full CLI would run the command a second time after any doubt below.
    settings = load_settings(root.get("--config"), root.get("--conn"), resolve_indirect=False)
    conn_url = settings.sql_alchemy_conn
    if settings.warnings:
        return None  # the full CLI shows them
    database = ("sql_alchemy_schema", "sql_alchemy_connect_args", "sql_alchemy_engine_args")
    if any(settings.setting("database", option).value for option in database):
        return None  # what they change (or refuse, a schema on SQLite) is the full CLI's engine's
    if not settings.uses_builtin_backend or settings.worker_backend or not conn_url.startswith("sqlite:///"):
        return None
    if settings.api_url:  # [state_store] api_url: the REST API answers, not a database
        return None
    path = conn_url.removeprefix("sqlite:///")
    if "?" in path or not path or path == ":memory:" or not os.path.isfile(path):
        return None
    uri_path = path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")  # urllib costs start-up time
    # closing(): a connection's own `with` block ends a transaction but leaves the connection open.
    # timeout=0: a file another process holds locked goes to the full CLI at once, which waits for it
    # under the lock timeout and words the error: the lock is waited for once, not twice.
    with closing(sqlite3.connect(f"file:{uri_path}?mode=ro", uri=True, timeout=0)) as conn:
        if conn.execute(_REGIONS).fetchone() is not None:
            return None
        row = conn.execute(_QUERY, (scope.dag_id, scope.run_id, scope.task_id, scope.map_index, key)).fetchone()
        run_exists = row is not None or conn.execute(_RUN_QUERY, (scope.dag_id, scope.run_id)).fetchone() is not None
        ids = (scope.dag_id, scope.run_id, scope.task_id, key, scope.map_index)
        elsewhere = sorted(conn.execute(_ELSEWHERE_QUERY, ids).fetchall()) if row is None else []
    if row is None:
        return report_error(missing_key(scope, key, run_exists=run_exists, elsewhere=elsewhere))
    value, updated_at, expires_at = row
    if nests_deeper_than(value):  # json would recurse past Python's limit: the full CLI words the error
        return None
    decoded = json.loads(value)
    if stored_ref(decoded) is not None:
        return None  # a worker-side reference with no worker backend configured: the full CLI warns
    entry = Entry(
        "task",
        key,
        utc_instant(updated_at),
        None if expires_at is None else utc_instant(expires_at),
        scope.dag_id,
        scope.run_id,
        scope.task_id,
        scope.map_index,
        value=decoded,
    )
    mode = resolve(output)
    sys.stdout.write(get_output(entry, mode))
    notice = expired_notice(entry, datetime.now(UTC)) if mode == "table" else None
    if notice:  # as the full CLI: on a terminal only
        sys.stdout.flush()
        sys.stderr.write(notice)
    return 0
