"""The floors: the least any tool could do for the same result, without our CLI in between.

* raw DELETE: one ``DELETE ... WHERE expires_at < '<now>'`` through the engine's own shell
  (``sqlite3``, ``psql``, ``mysql``), or a bare ``python -c`` with the sqlite3 module when the
  ``sqlite3`` shell is not installed; on SQLite its fastest form, ``DELETE ... WHERE id IN (SELECT id
  ... WHERE expires_at < '<now>')``, which deletes in rowid order (the plain form follows the expiry
  index, a random page per row: twice as slow at 500,000 of 1,000,000 rows);
* dry run: a bare Python script selecting the same rows' identifying columns in the same order
  with the plain driver and writing them as JSON, as ``clean --dry-run -o json`` does;
* cold start: a bare ``python -c`` running the ``get`` SELECT with the sqlite3 module.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from generate import driver_params, is_postgresql
from sqlalchemy.engine import make_url

SELECTION = "expires_at IS NOT NULL AND expires_at < {param}"
ORDER = "ORDER BY dag_id, run_id, task_id, map_index, {key}"


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: dict[str, str]  # added to the benchmark's environment
    label: str  # how the floor ran, for the report


def cutoff_text(engine: str) -> str:
    """Now, as a literal each engine compares with ``expires_at`` (sessions run in UTC)."""
    text = datetime.now(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")
    return text + "+00" if engine == "postgresql" else text


# -- raw DELETE --------------------------------------------------------------------------------------------
def sqlite_shell() -> str | None:
    return shutil.which("sqlite3")


def sqlite_shell_version() -> str:
    shell = sqlite_shell()
    if shell is None:
        return "none"
    done = subprocess.run([shell, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.split(" ")[0] if done.returncode == 0 else "unknown"


_PY_DELETE = (
    "import sqlite3, sys\n"
    "con = sqlite3.connect(sys.argv[1])\n"
    "count = con.execute(sys.argv[2]).rowcount\n"
    "con.commit()\n"
    "print(count)\n"
)


def delete_command(engine: str, url: str) -> Command:
    cutoff = cutoff_text(engine)
    statement = f"DELETE FROM task_state_store WHERE expires_at < '{cutoff}'"
    if engine == "sqlite":
        selected = f"SELECT id FROM task_state_store WHERE expires_at < '{cutoff}'"
        statement = f"DELETE FROM task_state_store WHERE id IN ({selected})"  # in rowid order: see the docstring
        path = make_url(url).database or ""
        shell = sqlite_shell()
        if shell:
            return Command([shell, path, f"{statement}; SELECT changes();"], {}, "sqlite3 shell")
        return Command([sys.executable, "-c", _PY_DELETE, path, statement], {}, "python -c with the sqlite3 module")
    if engine == "postgresql":
        argv = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-c", "\\timing on", "-c", statement]
        return Command(argv, libpq_env(url), "psql (wall time, including psql start and connect)")
    params = driver_params(url)
    argv = ["mysql", "-N", "-B", "-h", params["host"], "-P", str(params.get("port", 3306)), "-u", params["user"]]
    argv += [params["database"], "-e", f"SET time_zone = '+00:00'; {statement}; SELECT ROW_COUNT();"]
    env = {"MYSQL_PWD": params["password"]} if params.get("password") else {}
    return Command(argv, env, "mysql client (wall time, including client start and connect)")


def libpq_env(url: str) -> dict[str, str]:
    params = driver_params(url)
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD", "dbname": "PGDATABASE"}
    env = {names[k]: str(v) for k, v in params.items() if k in names}
    if "options" in params:
        env["PGOPTIONS"] = params["options"]
    return env


def deleted_count(engine: str, stdout: str) -> int:
    """How many rows the floor's DELETE removed, from its output."""
    if engine == "postgresql":
        found = re.search(r"^DELETE (\d+)", stdout, re.MULTILINE)
        if not found:
            raise ValueError(f"no DELETE count in psql output: {stdout!r}")
        return int(found.group(1))
    return int(stdout.strip().splitlines()[-1])


def server_milliseconds(stdout: str) -> float | None:
    """The statement's own time as psql's ``\\timing`` reports it."""
    found = re.search(r"^Time: ([\d.]+) ms", stdout, re.MULTILINE)
    return float(found.group(1)) if found else None


# -- dry run ----------------------------------------------------------------------------------------------
_CONNECT = {
    "sqlite": "import sqlite3\ncon = sqlite3.connect(sys.argv[1])\n",
    "postgresql": (
        "import os, psycopg\n"
        "con = psycopg.connect(**json.loads(os.environ['BENCH_DB']))\n"
        "con.execute(\"SET TIME ZONE 'UTC'\")\n"
    ),
    "mariadb": (
        "import os, pymysql\n"
        "con = pymysql.connect(**json.loads(os.environ['BENCH_DB']))\n"
        "con.cursor().execute(\"SET time_zone = '+00:00'\")\n"
    ),
}
_ISO = {  # expires_at as the driver returns it -> ISO 8601 in UTC
    "sqlite": "expires_at.replace(' ', 'T') + '+00:00'",
    "postgresql": "expires_at.isoformat(timespec='microseconds')",
    "mariadb": "expires_at.isoformat(timespec='microseconds') + '+00:00'",
}
_DRY_RUN = """\
import json, sys
{connect}cutoff = sys.argv[2]
cur = con.cursor()
cur.execute(
    "SELECT dag_id, run_id, task_id, map_index, {key}, expires_at FROM task_state_store WHERE {selection} {order}",
    (cutoff,),
)
out = sys.stdout
out.write('{{"dry_run": true, "cutoff": ' + json.dumps(cutoff) + ', "rows": [')
count = 0
for dag_id, run_id, task_id, map_index, key, expires_at in cur:
    doc = {{"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index, "key": key}}
    doc["expires_at"] = {iso}
    out.write(("," if count else "") + "\\n  " + json.dumps(doc))
    count += 1
out.write(("\\n" if count else "") + '], "would_delete": ' + str(count) + "}}\\n")
"""


def dry_run_script(engine: str) -> str:
    kind = "mariadb" if engine in ("mysql", "mariadb") else engine
    key = "`key`" if kind == "mariadb" else "key"
    param = "?" if kind == "sqlite" else "%s"
    return _DRY_RUN.format(
        connect=_CONNECT[kind],
        key=key,
        selection=SELECTION.format(param=param),
        order=ORDER.format(key=key),
        iso=_ISO[kind],
    )


def dry_run_command(engine: str, url: str) -> Command:
    script = dry_run_script(engine)
    cutoff = cutoff_text("sqlite")  # a naive UTC literal; the server sessions run in UTC
    if engine == "sqlite":
        return Command([sys.executable, "-c", script, make_url(url).database or "", cutoff], {}, "python sqlite3")
    driver = "psycopg" if is_postgresql(url) else "pymysql"
    return Command([sys.executable, "-c", script, "-", cutoff], {"BENCH_DB": json.dumps(driver_params(url))}, driver)


# -- cold start -------------------------------------------------------------------------------------------
_GET = (
    "import sqlite3, sys\n"
    "con = sqlite3.connect(sys.argv[1])\n"
    'query = "SELECT value FROM task_state_store WHERE dag_id = ? AND run_id = ? AND task_id = ? '
    'AND map_index = ? AND key = ?"\n'
    "row = con.execute(query, (*sys.argv[2:5], int(sys.argv[5]), sys.argv[6])).fetchone()\n"
    "print(row[0])\n"
)


def get_command(path: str, scope: tuple[str, str, str, int, str]) -> Command:
    dag_id, run_id, task_id, map_index, key = scope
    return Command([sys.executable, "-c", _GET, path, dag_id, run_id, task_id, str(map_index), key], {}, "python -c")
