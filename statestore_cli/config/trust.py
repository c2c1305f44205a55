"""Files whose content statestore runs (a config file's ``_cmd`` commands, the modules dotted paths name)
that another user could change: each gets a warning, ``UntrustedFileWarning``, before it runs.

statestore often runs as root (cron, sudo) on a host where Airflow's files belong to the ``airflow`` user.
A config file or module that user can write lets them choose what runs as root. Airflow runs them without a
word; statestore runs them too (refusing would break deployments that work), but says so, naming the file,
why, and the fix.

What counts, as OpenSSH checks a key file: the file and every directory above it (symbolic links resolved)
must be owned by root or by this user, and none may be writable by its group or others, except a directory
with the sticky bit (``/tmp``), where others cannot replace a file they do not own.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path


class UntrustedFileWarning(UserWarning):
    """A file whose code or command statestore runs can be changed by a user other than root and this one."""


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _owner(uid: int) -> str:
    name = _user(uid)
    return f"uid {uid} ({name})" if name != str(uid) else f"uid {uid}"


def why_untrusted(path: Path) -> tuple[str, str] | None:
    """Why a user other than root and this one could change ``path`` (or swap it), and the fix; None
    when none could, or when it cannot be looked at (then the import or command reports what is wrong)."""
    me = _user(os.geteuid())
    try:
        real = path.resolve(strict=True)
        mode = real.stat()
    except (OSError, RuntimeError):
        return None
    if mode.st_uid not in (0, os.geteuid()):
        return f"is owned by {_owner(mode.st_uid)}, not by root or this user", f"`chown {me} {real}`"
    if mode.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(mode.st_mode):04o})", f"`chmod go-w {real}`"
    for folder in real.parents:
        try:
            held = folder.stat()
        except OSError:
            return None
        if held.st_uid not in (0, os.geteuid()):
            return f"is in {folder}, owned by {_owner(held.st_uid)}", f"`chown {me} {folder}`, or move the file"
        if held.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not held.st_mode & stat.S_ISVTX:
            mode_text = f"{stat.S_IMODE(held.st_mode):04o}"
            return (
                f"is in {folder}, writable by other users (mode {mode_text}, no sticky bit)",
                f"`chmod go-w {folder}`, or move the file",
            )
    return None


def warn_if_untrusted(path: Path, what: str, runs: str = "code") -> None:
    """Warn (``UntrustedFileWarning``) when another user could change ``path``, which ``what`` describes,
    before statestore runs the ``runs`` it holds."""
    found = why_untrusted(path)
    if found is not None:
        problem, fix = found
        warnings.warn(
            UntrustedFileWarning(
                f"{what} {problem}: another user can make statestore run their {runs} as "
                f"{_user(os.geteuid())}; fix it with {fix}"
            ),
            stacklevel=2,
        )


def check_module_files(module_name: str, where: str) -> None:
    """Warn about each file of ``module_name`` (its packages' ``__init__`` first) that another user could
    change, before it is imported. Modules imported already are not looked at again; a package is imported
    when its child is looked up, after it was checked itself. What cannot be found is left to the import."""
    import sys
    from importlib.util import find_spec

    parts = module_name.split(".")
    for end in range(1, len(parts) + 1):
        name = ".".join(parts[:end])
        if name in sys.modules:
            continue
        try:
            spec = find_spec(name)  # imports the parent package (checked above), as the import itself would
        except Exception:  # the import that follows fails too, and says why in its own words
            return
        if spec is None or not spec.has_location or not spec.origin:
            return
        warn_if_untrusted(Path(spec.origin), f"module {name!r} at {spec.origin}, imported for {where},")
