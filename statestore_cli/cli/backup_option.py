"""``--backup FILE`` of ``clean``, ``clear`` and ``assets sweep``: the option, the checks made before anything
is deleted, and what the summaries say about the file (the library side is ``statestore_cli.ops.backup``)."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from statestore_cli.cli.output.safe_text import safe_text
from statestore_cli.config import Settings
from statestore_cli.errors import InvalidInputError

if TYPE_CHECKING:  # loaded only when --backup is given
    from statestore_cli.ops.backup_file import BackupFile

BackupOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--backup",
        metavar="FILE",
        help="First write every key deleted to FILE (a new or empty file), in the export format, each batch "
        "synced to disk before it commits; `statestore import FILE` restores them.",
    ),
]


def refuse_with_dry_run(path: Optional[Path], dry_run: bool, command: str) -> None:
    """A rehearsal deletes nothing, so it has nothing to back up: the two together are a mistake."""
    if path is not None and dry_run:
        raise InvalidInputError(
            f"--backup FILE keeps what {command} deletes and a --dry-run deletes nothing; drop one of them"
        )


def open_backup(path: Optional[Path]) -> Optional["BackupFile"]:
    """The backup ``--backup`` names, its path checked now, before anything is deleted (exit 2 when FILE
    exists and is not empty, or its folder is missing or not writable); created when deleting starts."""
    if path is None:
        return None
    from statestore_cli.ops.backup_file import BackupFile

    return BackupFile(path)


def name_restore(backup: Optional["BackupFile"], settings: Settings) -> None:
    """The import that restores ``backup``, with the --config and --conn this command was given."""
    if backup is not None:
        backup.restore = settings.command_line("import", str(backup.path))


def backup_document(backup: "BackupFile") -> dict[str, Any]:
    """The backup in a report's JSON (``"backup"``): where it is and how many lines (deleted keys) it holds."""
    return {"file": str(backup.path), "lines": backup.lines}


def backup_fields(backup: Optional["BackupFile"]) -> dict[str, Any]:
    """The backup as plain fields of a report (``backup_file``, ``backup_lines``); none without one."""
    if backup is None:
        return {}
    return {"backup_file": str(backup.path), "backup_lines": backup.lines}


def backup_sentence(backup: "BackupFile") -> str:
    """The summary's lines about the backup: where, how many keys, and on a line of its own (to copy whole)
    the command that restores them."""
    where = safe_text(str(backup.path))
    if not backup.lines:
        return f"backup {where} is empty: nothing was deleted"
    one = backup.lines == 1
    keys = f"{backup.lines:,} deleted key{'' if one else 's'}"
    return f"backed up {keys} to {where}\nrestore {'it' if one else 'them'} with: {safe_text(backup.restore)}"


def close_backup(backup: Optional["BackupFile"]) -> None:
    if backup is not None:
        backup.close()
