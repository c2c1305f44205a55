"""The shipped ``FilesystemBackend``: deterministic escaped paths that never leave the root, atomic
writes, gzip, ``list_refs``, fsspec URLs, and both roles through the CLI."""

from __future__ import annotations

import gzip
import json
import os
import sys
import uuid

import pytest
from stores import sql

from statestore_cli import AssetScope, FilesystemBackend, TaskScope
from statestore_cli.backends.base import REF_MARKER, StoredRef
from statestore_cli.backends.fs_paths import check_ref, segment, value_path
from statestore_cli.errors import BackendError, ConfigError, InvalidInputError

FS = "statestore_cli.backends.filesystem.FilesystemBackend"
RUN = "scheduled__2026-11-30T00:00:00+00:00"
KEY60 = "external_system_reference_for_partition_2026_11_30_eu_west_1"
HOSTILE = [
    "..",
    ".",
    "../../../../etc/passwd",
    "/etc/passwd",
    "..\\..\\windows\\system32",
    "nul\x00byte",
    "new\nline",
    "~",
    "%2E%2E",
    "a/../../b",
    "x" * 250,
    "é" * 250,  # 500 bytes of UTF-8, 1500 characters escaped
    "🎉" * 250,
    "region=00000000-0000-0000-0000-000000000001",
    "C:",
    "task",
]


def files_under(folder):
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_paths_are_readable_for_ordinary_ids():
    scope = TaskScope("etl_orders_daily", RUN, "submit_spark_job", 7)
    assert value_path(scope, KEY60) == (
        f"task/etl_orders_daily/scheduled__2026-11-30T00%3A00%3A00%2B00%3A00/submit_spark_job/7/{KEY60}.json"
    )
    region = uuid.UUID("5f2b8d8e-1c1a-4d4e-9a57-2b8d8e1c1a4d")
    assert value_path(TaskScope("etl", "r", "t", region_id=region), "k", ".json.gz") == (
        f"task/etl/r/region={region}/t/-1/k.json.gz"
    )
    assert value_path(AssetScope(name="orders", uri="s3://b/orders"), "wm") == "asset/name/orders/wm.json"
    assert value_path(AssetScope(uri="s3://b/orders"), "wm") == "asset/uri/s3%3A%2F%2Fb%2Forders/wm.json"
    assert value_path(AssetScope(asset_id=12), "wm") == "asset/id/12/wm.json"


def test_segments_are_distinct_safe_and_short():
    texts = [*HOSTILE, "x" * 251, "é" * 249, "a", "A", "%", "%25"]
    segments = [segment(t) for t in texts]
    assert len(set(segments)) == len(texts), "two different texts never share a segment"
    for text, seg in zip(texts, segments, strict=True):
        assert seg == segment(text), "deterministic"
        assert seg not in (".", "..") and not seg.startswith(".")
        assert not set(seg) & {"/", "\\", "\x00", "\n", ":"}
        assert len(seg.encode()) <= 160, (text[:20], seg)


@pytest.mark.parametrize("gzip_on", [False, True])
def test_hostile_ids_and_keys_write_nothing_outside_the_root(tmp_path, gzip_on):
    root = tmp_path / "root"
    outside_before = files_under(tmp_path)
    backend = FilesystemBackend(str(root), gzip=gzip_on)
    written = {}
    for n, text in enumerate(HOSTILE):
        scopes = [
            TaskScope(text, text, text, n),
            TaskScope("dag", "run", text, region_id=uuid.UUID(int=n + 1)),
            AssetScope(name=text),
            AssetScope(uri=text),
        ]
        for scope in scopes:
            key = text if len(text) <= 512 else text[:512]
            value = {"hostile": text, "n": n}
            ref = (
                backend.serialize_task_state_store_to_ref(value=value, key=key, scope=scope)
                if isinstance(scope, TaskScope)
                else backend.serialize_asset_state_store_to_ref(value=value, key=key, scope=scope)
            )
            assert ref not in written, "distinct scopes and keys get distinct references"
            written[ref] = value
            backend.set(scope, key + "!", json.dumps(value))
            assert json.loads(backend.get(scope, key + "!")) == value
    assert files_under(tmp_path) == sorted([*outside_before, *files_under(root)])
    inside = files_under(root)
    assert len(inside) == 2 * len(written)
    for path in inside:
        assert root in path.parents
        assert all(len(part.encode()) <= 255 for part in path.relative_to(root).parts)
    for ref, value in written.items():
        assert backend.deserialize_task_state_store_from_ref(ref) == value
    assert {r.ref for r in backend.list_refs()} >= set(written)


@pytest.mark.parametrize(
    "ref",
    [
        "../outside.json",
        "task/../../outside.json",
        "/etc/passwd",
        "task//x.json",
        "task/a\\..\\b.json",
        "asset/.hidden.json",
        "task/C:/x.json",
        "task/x.txt",
        "other/x.json",
    ],
)
def test_a_reference_that_could_leave_the_root_is_refused(tmp_path, ref):
    (tmp_path / "outside.json").write_text('"secret"')
    backend = FilesystemBackend(str(tmp_path / "root"))
    with pytest.raises(InvalidInputError, match="is not a filesystem backend reference"):
        check_ref(ref)
    with pytest.raises(InvalidInputError):
        backend.deserialize_task_state_store_from_ref(ref)
    with pytest.raises(InvalidInputError):
        backend.delete_ref(ref)
    assert (tmp_path / "outside.json").exists()


def test_writes_leave_no_temporary_file_and_replace_whole_values(tmp_path):
    backend = FilesystemBackend(str(tmp_path))
    scope = TaskScope("etl", RUN, "submit")
    backend.set(scope, "k", json.dumps({"v": "x" * 100_000}))
    backend.set(scope, "k", '{"v": 2}')
    assert [p.name for p in files_under(tmp_path)] == ["k.json"]
    assert backend.get(scope, "k") == '{"v": 2}'


def test_cleanup_removes_only_old_temporary_files(tmp_path):
    backend = FilesystemBackend(str(tmp_path))
    scope = TaskScope("etl", RUN, "submit")
    backend.set(scope, "k", "1")
    folder = files_under(tmp_path)[0].parent
    dead, fresh = folder / ".k.json.tmp-dead00000000", folder / ".k.json.tmp-fresh0000000"
    dead.write_bytes(b"half a val")
    fresh.write_bytes(b"in flight")
    two_hours_ago = dead.stat().st_mtime - 7200
    os.utime(dead, (two_hours_ago, two_hours_ago))
    assert backend.cleanup() == {"temporary_files_removed": 1}
    assert not dead.exists() and fresh.exists()
    assert [r.ref for r in backend.list_refs()] == [value_path(scope, "k")], "temporary files are not values"


def test_gzip_writes_compressed_files_and_reads_both_forms(tmp_path):
    scope = AssetScope(name="orders")
    plain = FilesystemBackend(str(tmp_path))
    plain.set(scope, "old", '"written before gzip"')
    zipped = FilesystemBackend(str(tmp_path), gzip=True)
    ref = zipped.serialize_asset_state_store_to_ref(value={"rows": [1] * 1000}, key="new", scope=scope)
    assert ref == "asset/name/orders/new.json.gz"
    data = (tmp_path / ref).read_bytes()
    assert data[:2] == b"\x1f\x8b" and json.loads(gzip.decompress(data)) == {"rows": [1] * 1000}
    assert zipped.get(scope, "old") == '"written before gzip"'
    zipped.set(scope, "old", '"rewritten"')
    assert sorted(p.name for p in files_under(tmp_path)) == ["new.json.gz", "old.json.gz"]
    assert zipped.delete(scope, "old") == 1 and zipped.get(scope, "old") is None


def test_clear_follows_map_indices_and_prunes_empty_folders(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    backend = FilesystemBackend(str(root))
    for index in (0, 1):
        backend.set(TaskScope("etl", RUN, "load", index), "k", str(index))
    backend.clear(TaskScope("etl", RUN, "load", 0))
    assert backend.get(TaskScope("etl", RUN, "load", 1), "k") == "1"
    backend.clear(TaskScope("etl", RUN, "load", 0), all_map_indices=True)
    assert list(root.iterdir()) == []


def test_a_missing_object_is_a_backend_error(tmp_path):
    backend = FilesystemBackend(str(tmp_path))
    with pytest.raises(BackendError, match=r"has no object task/etl/r/t/-1/k\.json under"):
        backend.deserialize_task_state_store_from_ref("task/etl/r/t/-1/k.json")


def test_fsspec_urls(tmp_path):
    pytest.importorskip("fsspec")
    for root in ("memory://statestore-test/objects", f"file://{tmp_path}/objects"):
        backend = FilesystemBackend(root, gzip=True)
        scope = TaskScope("../etl", RUN, "submit")
        ref = backend.serialize_task_state_store_to_ref(value={"job": "é"}, key="../k", scope=scope)
        assert backend.deserialize_task_state_store_from_ref(ref) == {"job": "é"}
        [listed] = backend.list_refs()
        assert listed.ref == ref and listed.modified_at is not None
        backend.delete_ref(ref)
        assert list(backend.list_refs()) == []
    assert not [p for p in files_under(tmp_path) if "objects" not in p.parts]


def test_a_url_root_without_fsspec_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    hint = r"needs fsspec: install fsspec \(pip install fsspec\), or reinstall statestore with its fsspec extra"
    with pytest.raises(ConfigError, match=hint):
        FilesystemBackend("s3://bucket/prefix")


def test_a_relative_root_is_refused():
    with pytest.raises(ConfigError, match="must be an absolute path or a URL"):
        FilesystemBackend("state/objects")


# -- through the CLI ------------------------------------------------------------------------------------------
TASK = ["--dag-id", "etl_orders_daily", "--run-id", RUN, "--task-id", "submit_spark_job"]


def test_as_the_store_backend(monkeypatch, tmp_path, cli):
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", FS)
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", str(tmp_path / "objects"))
    assert cli("set", *TASK, KEY60, '{"id": "j-1"}').exit_code == 0
    assert (tmp_path / "objects" / value_path(TaskScope("etl_orders_daily", RUN, "submit_spark_job"), KEY60)).exists()
    assert cli("get", *TASK, KEY60).stdout == '{"id": "j-1"}\n'
    assert cli("delete", *TASK, KEY60).exit_code == 0
    assert cli("get", *TASK, KEY60).exit_code == 1


def test_as_the_worker_backend(monkeypatch, tmp_path, cli, db_url):
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", FS)
    monkeypatch.setenv("AIRFLOW__STATE_STORE_FILESYSTEM__ROOT", str(tmp_path / "objects"))
    assert cli("set", *TASK, KEY60, '{"id": "j-1"}').exit_code == 0
    ref = value_path(TaskScope("etl_orders_daily", RUN, "submit_spark_job"), KEY60)
    assert [tuple(r) for r in sql(db_url, "SELECT value FROM task_state_store")] == [(json.dumps({REF_MARKER: ref}),)]
    assert json.loads((tmp_path / "objects" / ref).read_text()) == {"id": "j-1"}
    assert cli("get", *TASK, KEY60).stdout == '{"id": "j-1"}\n'
    assert cli("get", *TASK, KEY60, "--raw").stdout == json.dumps({REF_MARKER: ref}) + "\n"
    assert cli("delete", *TASK, KEY60).exit_code == 0
    assert not (tmp_path / "objects" / ref).exists()
    assert list(FilesystemBackend(str(tmp_path / "objects")).list_refs()) == []


def test_without_a_root_commands_exit_2_naming_the_option(monkeypatch, cli):
    monkeypatch.setenv("AIRFLOW__WORKERS__STATE_STORE_BACKEND", FS)
    result = cli("get", *TASK, "k")
    assert result.exit_code == 2
    assert result.stderr == (
        "statestore: error: the filesystem backend needs [state_store_filesystem] root "
        "(or AIRFLOW__STATE_STORE_FILESYSTEM__ROOT): a folder or an fsspec URL\n"
    )


def test_the_root_and_gzip_come_from_the_config_file(tmp_path, cli):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(
        f"[workers]\nstate_store_backend = {FS}\n[state_store_filesystem]\nroot = {tmp_path}/o\ngzip = yes\n"
    )
    assert cli("--config", str(cfg), "set", *TASK, "k", "1").exit_code == 0
    assert [p.name for p in files_under(tmp_path / "o")] == ["k.json.gz"]
    cfg.write_text(
        f"[workers]\nstate_store_backend = {FS}\n[state_store_filesystem]\nroot = {tmp_path}/o\ngzip = maybe\n"
    )
    result = cli("--config", str(cfg), "get", *TASK, "k")
    assert result.exit_code == 2
    assert (
        result.stderr == f"statestore: error: {cfg}: invalid value 'maybe' for [state_store_filesystem] gzip: "
        "expected true or false\n"
    )


def test_stored_ref_is_a_named_pair():
    assert StoredRef("task/x.json", None) == ("task/x.json", None)
