"""Where the checkout's folders are, for the tests that read its files."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
