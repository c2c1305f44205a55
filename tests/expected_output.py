"""What people see, checked against files in tests/expected: any change to it is deliberate."""

from __future__ import annotations

import os

import pytest
from paths import REPO

EXPECTED = REPO / "tests" / "expected"
UPDATE_EXPECTED = "STATESTORE_UPDATE_EXPECTED"


def assert_expected(name: str, actual: str) -> None:
    """``actual`` must equal the checked-in ``tests/expected/NAME``, so any change to what people see is
    deliberate. With ``STATESTORE_UPDATE_EXPECTED=1`` the file is written instead and the test fails:
    the new output is then reviewed in the diff and the test run again."""
    path = EXPECTED / name
    if os.environ.get(UPDATE_EXPECTED) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        pytest.fail(f"wrote {path.relative_to(REPO)}: review it, then run the test without {UPDATE_EXPECTED}")
    assert path.exists(), f"no expected output {path.relative_to(REPO)}; create it with {UPDATE_EXPECTED}=1"
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{path.relative_to(REPO)} differs:\n--- expected\n{expected}--- actual\n{actual}"
