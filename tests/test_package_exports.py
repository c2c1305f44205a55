"""The package root exports what the manual imports (docs/library.md, docs/backends.md), lazily."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from paths import REPO

import statestore_cli

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_every_exported_name_resolves():
    for name in statestore_cli.__all__:
        assert getattr(statestore_cli, name) is not None, name
    assert "accessor" in statestore_cli.__all__


def test_every_name_the_manual_imports_from_the_package_is_exported():
    imported = set()
    for page in (REPO / "docs").rglob("*.md"):
        for block in PYTHON_BLOCK.findall(page.read_text(encoding="utf-8")):
            for names in re.findall(r"^from statestore_cli import (.+)$", block, re.MULTILINE):
                imported |= {name.strip() for name in names.split(",")}
    assert {"accessor", "load_settings", "TaskScope", "BaseStoreBackend"} <= imported
    assert imported <= set(statestore_cli.__all__), imported - set(statestore_cli.__all__)


def test_the_library_guide_example_runs_as_written(db_url, monkeypatch):
    """docs/library.md's first example, unchanged, on a real store: its load_settings() finds the store
    through the environment, as it would in a deployment."""
    [example, *_] = PYTHON_BLOCK.findall((REPO / "docs" / "library.md").read_text(encoding="utf-8"))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", db_url)
    namespace: dict = {}
    exec(compile(example, "docs/library.md", "exec"), namespace)
    task, watermark = namespace["task"], namespace["watermark"]
    assert (task.get("job_id"), task.get("checkpoint")) == ({"id": "j-123"}, 42)
    assert watermark.get("last_seen") == "2026-11-30T00:00:00Z"


@pytest.mark.slow
def test_importing_the_package_does_not_load_sqlalchemy():
    probe = "import sys, statestore_cli; statestore_cli.MetastoreBackend; print('sqlalchemy' in sys.modules)"
    lazy = "import sys, statestore_cli; print('sqlalchemy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True).stdout == "False\n"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout == "True\n"
