"""The version is written once, in statestore_cli/__init__.py; the package metadata reads it from there."""

from __future__ import annotations

from pathlib import Path

from hatchling.metadata.core import ProjectMetadata
from hatchling.plugin.manager import PluginManager

import statestore_cli

ROOT = Path(__file__).resolve().parent.parent


def test_package_metadata_takes_the_version_from_the_module():
    metadata = ProjectMetadata(str(ROOT), PluginManager())
    assert "version" in metadata.config["project"]["dynamic"]
    assert "version" not in metadata.config["project"]
    assert metadata.version == statestore_cli.__version__
