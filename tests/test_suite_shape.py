"""The test suite's own shape: no test module imports another (what two share lives in a helper module named
for what it provides, fixtures in conftest.py), and no helper module imports a test module either."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(path: Path) -> list[str]:
    """The ``test_*`` modules ``path`` imports, anywhere in it (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [
            f"{path.name} line {node.lineno}: {name}" for name in names if name.split(".")[-1].startswith("test_")
        ]
    return found


def test_no_module_of_the_suite_imports_a_test_module():
    found = [use for path in sorted(TESTS.glob("*.py")) for use in imported_test_modules(path)]
    assert not found, "\n".join(found)


def test_the_check_sees_every_form_of_import(tmp_path):
    module = tmp_path / "test_probe.py"
    module.write_text(
        "import test_a\nfrom test_b import x\nfrom tests.test_c import y\n\ndef f():\n    import test_d\n"
        "import helpers_ok\nfrom stores import sql\n",
        encoding="utf-8",
    )
    assert imported_test_modules(module) == [
        "test_probe.py line 1: test_a",
        "test_probe.py line 2: test_b",
        "test_probe.py line 3: tests.test_c",
        "test_probe.py line 6: test_d",
    ]
