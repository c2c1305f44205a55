"""What a fresh ``statestore`` process loaded at start-up: ``probe`` runs the CLI in a new interpreter and
reports its exit code, output and which of the watched top-level modules it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WATCHED = ("sqlalchemy", "rich", "pydantic", "typer")
PROBE = """
import json, sys
sys.argv = ["statestore", *{argv!r}]
from statestore_cli.__main__ import main

code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
finally:
    sys.stdout.flush()
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({watched!r}))
    print("LOADED=" + json.dumps([code, loaded]), file=sys.stderr)
"""


def probe(argv: list[str], tmp_path: Path, **env: str) -> tuple[int, str, set[str]]:
    """Run the CLI with ``argv`` in a new interpreter, stdout to a pipe: exit code, stdout, top-level modules."""
    code, stdout, _stderr, loaded = probe_all(argv, tmp_path, **env)
    return code, stdout, loaded


def probe_all(
    argv: list[str], tmp_path: Path, *, under_bash: bool = False, **env: str
) -> tuple[int, str, str, set[str]]:
    """``probe``, with what the CLI wrote on stderr; ``under_bash``: started by a bash that waits for it."""
    script = PROBE.format(argv=argv, watched=WATCHED)
    full_env = {k: v for k, v in os.environ.items() if k != "STATESTORE_NO_FAST_PATH"} | env
    command = [sys.executable, "-c", script]
    if under_bash:  # `; exit`: bash would otherwise exec the command in its own place and be no parent
        command = ["bash", "-c", '"$@"; exit $?', "bash", *command]
    proc = subprocess.run(command, capture_output=True, text=True, env=full_env, cwd=tmp_path)
    stderr, _, tail = proc.stderr.rpartition("LOADED=")
    assert tail, proc.stderr
    code, loaded = json.loads(tail)
    return code or 0, proc.stdout, stderr, set(loaded)
