"""The exit codes every command can end with, described once: the commands reference prints this table, and
each command's section lists the codes it can exit with."""

from __future__ import annotations

from typing import NamedTuple

from statestore_cli import errors

ALL_COMMANDS = None  # ExitCode.commands: every command can end with this code


class ExitCode(NamedTuple):
    code: int
    meaning: str  # Markdown, one table cell
    commands: tuple[str, ...] | None = ALL_COMMANDS  # the commands (as typed after `statestore`) that can exit so


EXIT_CODES = (
    ExitCode(errors.EXIT_OK, "success"),
    ExitCode(
        errors.EXIT_NOT_FOUND,
        "`get` or `set --keep-expiry` did not find the key (or, for an asset scope, the asset: `no such asset`); "
        "`runs delete` / `assets delete` did not find the run or asset; `clear` was answered no (likewise "
        "`runs delete`, `assets delete`, `assets sweep`, `orphans --delete`), or got no answer (end of input): "
        "nothing deleted, said as an answer, not an error (`statestore: nothing deleted (answered no)`); `diff` "
        "found the store and the file differ (as diff(1))",
        ("get", "set", "clear", "assets sweep", "assets delete", "runs delete", "orphans", "diff"),
    ),
    ExitCode(
        errors.EXIT_USAGE,
        "bad usage or input: unknown option, a group without its command (`statestore db`: its help on stdout, "
        "then the error line), missing scope, invalid JSON or duration, a null, NaN, Infinity or oversized value, "
        "a timestamp without a time zone or (without `--force`) in the past, invalid configuration (a `_cmd` "
        "command that cannot run or prints nothing, a `_secret` without `[secrets] backend` or missing from it, "
        "bad `sql_alchemy_connect_args` / `sql_alchemy_engine_args`, `sql_alchemy_schema` on SQLite), missing "
        "driver, a deleting command (`clear`, `assets sweep`, `runs delete`, `assets delete`, `orphans --delete`) "
        "without `--yes` when stdin is not a terminal, `orphans --delete` where the database references none of "
        "the backend's objects (without `--all-unreferenced`), a `--backup FILE` that exists and is not empty (or "
        "is a directory, `-`, or in a folder missing or not writable), `--backup` with `--dry-run`, a bad line in "
        "an `import` or a `diff` FILE (or a dag run or "
        "asset missing from an Airflow "
        "database); on MySQL/MariaDB a key, dag run or asset differing from a stored one (or another line's) only "
        "in trailing spaces, and an asset name or uri outside latin1, to write or to filter by; `runs delete` / "
        "`assets delete` on an Airflow database",
    ),
    ExitCode(
        errors.EXIT_OPERATIONAL,
        "operational failure: a `_cmd` command that failed or did not finish within `[state_store] "
        "command_timeout`, a `[secrets] backend` that raised, database unreachable, schema missing (an Airflow "
        "database older than 3.3 included), a lock another session held past the lock timeout, backend error, "
        "another `--exclusive` clean running, `clean --metrics-file` could not write the file after the clean "
        "(what it deleted stays deleted), a `--backup` file that could not be written or synced midway (the batch "
        "in progress rolled back), a stored value a `--backup` cannot write as JSON, a `backend check` that did "
        "not pass, an `orphans --delete` that could "
        "not delete every orphan",
    ),
    ExitCode(
        errors.EXIT_STOPPED,
        "`clean --max-runtime` stopped before every expired key was deleted (run it again)",
        ("clean",),
    ),
    ExitCode(
        errors.EXIT_SKIPPED,
        "`clean --fail-on-skip` with a custom `[state_store] backend`: nothing was cleaned",
        ("clean",),
    ),
    ExitCode(
        errors.EXIT_INTERRUPTED,
        "interrupted by Ctrl-C, at any moment (connecting included): a clean that has started deleting stops "
        "after its current batch, a dry run says how many rows it listed, `clear` at its question deletes "
        "nothing, an import says which lines were imported",
    ),
    ExitCode(
        errors.EXIT_TERMINATED,
        "terminated by SIGTERM, at any moment (connecting included): a clean that has started deleting stops "
        "after its current batch",
    ),
)


def exit_codes_for(name: str) -> list[int]:
    return [row.code for row in EXIT_CODES if row.commands is ALL_COMMANDS or name in row.commands]
