"""Packaging: what the wheel holds, and that the installed wheel runs on its own, without the checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from cli_running import run_statestore_process
from paths import REPO
from run_scope import once_per_run

pytestmark = pytest.mark.slow  # builds the wheel and the sdist, installs the wheel

TASK = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]


@pytest.fixture(scope="session")
def wheel() -> Path:
    """The wheel of this checkout, built once per test run (``once_per_run``); tests only read it."""

    def build(out: Path) -> None:
        pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
        subprocess.run([*pip, str(REPO)], check=True)

    [built] = once_per_run("wheel", build).glob("statestore_cli-*.whl")
    return built


def test_wheel_ships_the_option_schema(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "statestore_cli/config/options.toml" in names
    assert "statestore_cli/py.typed" in names
    assert not any(name.startswith("tests/") for name in names)


def test_wheel_declares_the_statestore_command(wheel):
    with zipfile.ZipFile(wheel) as archive:
        [entry_points] = [name for name in archive.namelist() if name.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "[console_scripts]\nstatestore = statestore_cli.__main__:main\n" in text


def test_installed_wheel_runs_without_the_checkout(wheel, tmp_path):
    """Installed from the wheel, run with no site hooks (so no editable path) and cwd outside the repo."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True
    )
    deps = sysconfig.get_paths()["purelib"]
    env = {
        "PYTHONPATH": f"{site}{os.pathsep}{deps}",
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "PATH": os.environ["PATH"],
    }

    def run(*args: str, code: str | None = None):
        return run_statestore_process(*args, code=code, python_flags=["-S"], cwd=tmp_path, env=env)

    where = run(code="import statestore_cli; print(statestore_cli.__file__)")
    assert where.exit_code == 0, where.output
    assert where.stdout.startswith(str(site)), where.stdout
    assert run("db", "init").exit_code == 0
    assert run("set", *TASK, "k", '{"x": 1}').exit_code == 0
    got = run("get", *TASK, "k")
    assert (got.exit_code, got.stdout) == (0, '{"x": 1}\n'), got.stderr
    shown = run("config", "show", "-o", "json")
    assert shown.exit_code == 0 and '"default_retention_days": {"value": 30' in shown.stdout, shown.stderr


def test_sdist_ships_the_deployable_recipes_and_the_wheel_does_not(wheel, tmp_path):
    """config/ is for operators and for the tests that run it: in the source distribution, not installed."""
    build = [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(tmp_path)]
    subprocess.run(build, cwd=REPO, check=True, capture_output=True)
    [sdist] = tmp_path.glob("statestore_cli-*.tar.gz")
    with tarfile.open(sdist) as archive:
        shipped = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    recipes = {str(path.relative_to(REPO)) for path in (REPO / "config").rglob("*") if path.is_file()}
    assert recipes == {
        "config/airflow.cfg",
        "config/cron/statestore-clean",
        "config/grafana/statestore.json",
        "config/kubernetes/cronjob.yaml",
        "config/prometheus/statestore-alerts.test.yml",
        "config/prometheus/statestore-alerts.yml",
        "config/systemd/statestore-clean.service",
        "config/systemd/statestore-clean.timer",
    }
    assert (
        recipes <= shipped
        and {"tests/test_config_recipes.py", "tests/test_alert_rules.py", "tests/test_grafana_dashboard.py"} <= shipped
    )
    manual = {str(path.relative_to(REPO)) for path in (REPO / "docs").rglob("*.md")}
    assert {"docs/index.md", "docs/reference/commands.md"} <= manual <= shipped  # README's links resolve in it
    assert not any(name.startswith("config/") for name in zipfile.ZipFile(wheel).namelist())


def test_the_readme_installs_from_the_source_or_a_wheel_never_from_an_index(wheel):
    """No index serves statestore: every install line, hint and recipe uses the checkout or its wheel."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Installation") : readme.index("## Quick start")]
    for command in ("pip install .", "pip install '.[postgres]'", "pipx install", "python -m build", "pip wheel"):
        assert command in section, command
    [pattern] = set(re.findall(r"dist/(statestore_cli-\*\.whl)", section))
    assert wheel.match(pattern), (wheel.name, pattern)  # the name the Dockerfile copies is the name built
    metadata = zipfile.ZipFile(wheel).read(next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA")))
    manual = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    extras = {extra for page in manual for extra in re.findall(r"'\.\[(\w+)\]'", page.read_text(encoding="utf-8"))}
    assert {"postgres", "mysql", "fsspec"} <= extras  # README's install lines, docs/backends.md's fsspec
    for extra in extras:
        assert f"Provides-Extra: {extra}" in metadata.decode(), extra
    shipped = [
        *manual,
        *sorted((REPO / "config").rglob("*")),
        *sorted((REPO / "statestore_cli").rglob("*.py")),
    ]
    for path in shipped:
        if path.is_file():
            assert "statestore-cli[" not in path.read_text(encoding="utf-8"), path
