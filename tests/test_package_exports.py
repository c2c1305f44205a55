"""The package root exports what the README's Library section imports, lazily."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

import statestore_cli
from statestore_cli import NEVER_EXPIRE, TaskScope, accessor, load_settings


def test_every_exported_name_resolves():
    for name in statestore_cli.__all__:
        assert getattr(statestore_cli, name) is not None, name
    assert "accessor" in statestore_cli.__all__


def test_readme_library_example_runs(db_url):
    settings = load_settings(conn_override=db_url)
    task = accessor(settings, TaskScope("etl", "manual__2026-11-30", "submit"))
    task.set("job_id", {"id": "j-123"}, retention=timedelta(hours=6))
    task.set("checkpoint", 42, retention=NEVER_EXPIRE)
    assert (task.get("job_id"), task.get("checkpoint")) == ({"id": "j-123"}, 42)


@pytest.mark.slow
def test_importing_the_package_does_not_load_sqlalchemy():
    probe = "import sys, statestore_cli; statestore_cli.accessor; print('sqlalchemy' in sys.modules)"
    lazy = "import sys, statestore_cli; print('sqlalchemy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True).stdout == "False\n"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout == "True\n"
