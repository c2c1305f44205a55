"""The files the tool writes, attacked by another user of the host: backups, exports, metrics files, the
SQLite store ``db init`` makes, the filesystem backend's objects.

Another user (uid 65534, ``nobody``) plants files, symbolic links and FIFOs in a sticky, world-writable folder
of its own (mode 1777, owned by it, as a shared scratch folder is), then root runs the tool against them. The
tool must refuse what someone else put there (one line, exit 2, nothing deleted, nothing written where the
link points), and what it creates must be owner-only (0600) whatever the umask, so that user cannot read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from backups import seed
from cli_running import run_cli
from stores import sql

NOBODY = 65534
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="another user's files can be planted only by root acting as uid 65534 (CI runs as root)"
)
SHARED_PARENT = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


# -- the other user and the shared folder --------------------------------------------------------------------
def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run as uid/gid 65534 with no supplementary groups."""
    command = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", *argv]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


def plant(*argv: str) -> None:
    done = as_nobody(*argv)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky world-writable folder owned by the other user, which it and root can both reach (tmp_path's
    parents are root's, 0700: uid 65534 cannot traverse them)."""
    folder = Path(tempfile.mkdtemp(prefix="statestore-shared-", dir=SHARED_PARENT))
    try:
        os.chown(folder, NOBODY, NOBODY)
        folder.chmod(0o1777)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """The umask cron jobs and shells usually run with, for a run of the tool in this process."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def store(db_url: str) -> str:
    """Expired task keys for ``clean``, keys of a dag for ``clear``, an inactive asset's key for ``assets sweep``."""
    seed(db_url)
    sql(db_url, "DELETE FROM asset_active")
    return db_url


def digest(url: str) -> str:
    """The SQLite store's bytes: a refused command leaves it as it was, nothing deleted."""
    return hashlib.sha256(Path(url.removeprefix("sqlite:///")).read_bytes()).hexdigest()


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


DELETING = {
    "clean": ("clean",),
    "clear": ("clear", "--dag-id", "etl_orders_daily", "--yes"),
    "assets sweep": ("assets", "sweep", "--yes"),
}


# -- --backup FILE -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", list(DELETING))
def test_a_backup_refuses_an_empty_file_another_user_planted(store, shared, command):
    backup = shared / "backup.jsonl"
    plant("touch", str(backup))
    before = digest(store)
    result = run_cli(*DELETING[command], "--backup", str(backup), conn=store)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: --backup {backup}: is owned by another user (uid {NOBODY}), who could read or change "
        "the backup; remove it or give the path of a new file\n"
    )
    assert digest(store) == before
    assert backup.stat().st_size == 0 and backup.stat().st_uid == NOBODY


@pytest.mark.parametrize("command", list(DELETING))
def test_a_backup_refuses_a_symlink_to_an_empty_file_of_roots(store, shared, tmp_path, command):
    target = tmp_path / "root-only"
    target.touch(mode=0o600)
    target.chmod(0o600)
    backup = shared / "backup.jsonl"
    plant("ln", "-s", str(target), str(backup))
    before = digest(store)
    result = run_cli(*DELETING[command], "--backup", str(backup), conn=store)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: --backup {backup}: is a symbolic link, which a backup is never written through; "
        "give the path of a new file\n"
    )
    assert digest(store) == before
    assert target.stat().st_size == 0 and mode_of(target) == 0o600 and target.stat().st_uid == 0


def test_a_backup_refuses_an_empty_file_with_a_second_hard_link(store, shared, tmp_path):
    # A second name in a folder the other user can read would give it every line written under the first.
    backup = tmp_path / "backup.jsonl"
    backup.touch(mode=0o600)
    os.link(backup, shared / "other-name")
    before = digest(store)
    result = run_cli("clean", "--backup", str(backup), conn=store)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: --backup {backup}: has 2 hard links, through which the backup could be read; "
        "give a new path\n"
    )
    assert digest(store) == before and backup.stat().st_size == 0


def test_a_new_backup_is_owner_only_whatever_the_umask(store, shared):
    backup = shared / "backup.jsonl"
    with umask(0o022):
        result = run_cli("clean", "--backup", str(backup), conn=store)
    assert result.exit_code == 0, result.output
    assert backup.stat().st_size > 0 and backup.stat().st_uid == 0
    assert mode_of(backup) == 0o600
    read = as_nobody("cat", str(backup))
    assert read.returncode != 0 and read.stdout == "" and "Permission denied" in read.stderr


def test_an_empty_backup_file_of_this_users_is_made_owner_only(store, shared):
    backup = shared / "backup.jsonl"
    backup.touch()
    backup.chmod(0o644)
    result = run_cli("clean", "--backup", str(backup), conn=store)
    assert result.exit_code == 0, result.output
    assert backup.stat().st_size > 0 and mode_of(backup) == 0o600
    assert as_nobody("cat", str(backup)).returncode != 0


# -- export --file PATH --------------------------------------------------------------------------------------
def test_an_export_refuses_a_symlink_to_dev_null(store, shared):
    export = shared / "export.jsonl"
    plant("ln", "-s", "/dev/null", str(export))
    null = os.stat("/dev/null")
    result = run_cli("export", "--file", str(export), conn=store)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: export file {export}: is a symbolic link, which an export never writes through; "
        "remove it or give the path of a new file\n"
    )
    assert export.is_symlink() and os.readlink(export) == "/dev/null"
    now = os.stat("/dev/null")
    assert stat.S_ISCHR(now.st_mode) and (now.st_mode, now.st_uid, now.st_rdev) == (
        null.st_mode,
        null.st_uid,
        null.st_rdev,
    )
    assert [p.name for p in shared.iterdir()] == ["export.jsonl"]  # no temporary file left


def test_an_export_refuses_a_file_another_user_planted(store, shared):
    export = shared / "export.jsonl"
    plant("sh", "-c", f"touch {export} && chmod 6777 {export}")
    result = run_cli("export", "--file", str(export), conn=store)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: export file {export}: is owned by another user (uid {NOBODY}); an export replaces "
        "only this user's files: remove it or give the path of a new file\n"
    )
    assert export.stat().st_uid == NOBODY and export.stat().st_size == 0


def test_an_export_over_a_6777_file_keeps_no_special_bit_and_no_write_for_others(store, shared):
    export = shared / "export.jsonl"
    export.touch()
    export.chmod(0o6777)
    result = run_cli("export", "--file", str(export), conn=store)
    assert result.exit_code == 0, result.output
    assert export.stat().st_size > 0 and export.stat().st_uid == 0
    assert mode_of(export) == 0o755


def test_a_new_export_is_owner_only_whatever_the_umask(store, shared):
    export = shared / "export.jsonl"
    with umask(0o022):
        result = run_cli("export", "--file", str(export), conn=store)
    assert result.exit_code == 0, result.output
    assert export.stat().st_size > 0 and mode_of(export) == 0o600
    assert as_nobody("cat", str(export)).returncode != 0


def test_an_export_refuses_a_device(store, tmp_path):
    # Renaming the finished export over a device would put a regular file where every program expects the device
    # (a copy of /dev/null's node, not /dev/null itself: the code before the fix did replace it).
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    result = run_cli("export", "--file", str(null), conn=store)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"statestore: error: export file {null}: is not a regular file, which an export would replace; give the "
        "path of a new file\n"
    )
    assert stat.S_ISCHR(null.lstat().st_mode) and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# -- --metrics-file PATH -------------------------------------------------------------------------------------
PLANTED_METRICS = {
    "symlink": (
        ("ln", "-s", "{target}", "{path}"),
        "is a symbolic link, which the metrics file is never written through; remove it or give another path",
    ),
    "file": (("touch", "{path}"), f"is owned by another user (uid {NOBODY}); remove it or give another path"),
    "fifo": (("mkfifo", "{path}"), "is not a regular file; remove it or give another path"),
}


@pytest.mark.parametrize("planted", list(PLANTED_METRICS))
@pytest.mark.parametrize("command", ["clean", "stats"])
def test_a_metrics_file_another_user_planted_is_refused(store, shared, tmp_path, planted, command):
    target = tmp_path / "root-only.prom"
    target.write_text("statestore_clean_last_success_timestamp_seconds 1\n")
    target.chmod(0o600)
    path = shared / "statestore.prom"
    argv, problem = PLANTED_METRICS[planted]
    plant(*(arg.format(target=target, path=path) for arg in argv))
    before = digest(store)
    result = run_cli(command, "--metrics-file", str(path), conn=store)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"statestore: error: --metrics-file {path} {problem}\n"
    assert digest(store) == before
    assert path.lstat().st_uid == NOBODY
    assert target.read_text() == "statestore_clean_last_success_timestamp_seconds 1\n" and mode_of(target) == 0o600


# -- the SQLite store db init creates -------------------------------------------------------------------------
def test_db_init_creates_an_owner_only_sqlite_file(shared):
    path = shared / "airflow.db"
    conn = f"sqlite:///{path}"
    task = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")
    with umask(0o022):
        assert run_cli("db", "init", conn=conn).exit_code == 0
        assert run_cli("set", *task, "k", "1", conn=conn).exit_code == 0
    assert path.stat().st_uid == 0 and mode_of(path) == 0o600
    assert as_nobody("cat", str(path)).returncode != 0
    assert json.loads(run_cli("get", *task, "k", conn=conn).stdout) == 1


# -- the filesystem backend's objects --------------------------------------------------------------------------
FS_TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")


@pytest.fixture
def fs_root(shared, monkeypatch, clean_environment) -> Path:
    """The filesystem backend's root as the Airflow workers (here uid 65534) own it: 0750, their folder."""
    root = shared / "state"
    plant("sh", "-c", f"umask 022 && mkdir {root} && chmod 750 {root}")
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "statestore_cli.backends.filesystem.FilesystemBackend")
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", str(root))
    return root


def test_a_value_root_writes_takes_the_roots_owner_and_permissions(fs_root):
    with umask(0o022):
        assert run_cli("set", *FS_TASK, "k", '"v"').exit_code == 0
    value = fs_root / "task/d/r/t/-1/k.json"
    folders = [fs_root / "task", fs_root / "task/d/r/t/-1"]
    assert [(p.stat().st_uid, p.stat().st_gid, mode_of(p)) for p in (*folders, value)] == [
        (NOBODY, NOBODY, 0o750),
        (NOBODY, NOBODY, 0o750),
        (NOBODY, NOBODY, 0o640),
    ]
    plant("sh", "-c", f"printf '\"w\"' > {value}.new && mv {value}.new {value}")  # the workers replace it
    assert run_cli("get", *FS_TASK, "k").stdout == '"w"\n'


def test_a_link_planted_in_the_filesystem_backends_root_is_not_followed(fs_root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    plant("ln", "-s", str(elsewhere), str(fs_root / "task"))
    result = run_cli("set", *FS_TASK, "k", '"v"')
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"statestore: error: the filesystem backend's {fs_root}/task is a symbolic link or a file where a folder "
        "of values belongs; nothing under the root is followed through a link: remove it\n"
    )
    assert list(elsewhere.iterdir()) == []


def test_a_value_planted_as_a_link_to_a_root_only_file_is_not_read(fs_root, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('"s3cret"')
    secret.chmod(0o600)
    plant("sh", "-c", f"mkdir -p {fs_root}/task/d/r/t/-1 && ln -s {secret} {fs_root}/task/d/r/t/-1/k.json")
    result = run_cli("get", *FS_TASK, "k")
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"statestore: error: the filesystem backend's {fs_root}/task/d/r/t/-1/k.json is a symbolic link or a "
        "special file, not a value this backend wrote; nothing under the root is read through a link: remove it\n"
    )
    assert "s3cret" not in result.stdout
