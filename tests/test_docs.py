"""The manual: README.md stays a short guide whose two commands work, the generated reference pages match
the code that generates them, every relative link in README.md and docs/ leads to a file and a heading
that exist, and the exit-code table covers every exit code the code defines."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import warm
from paths import REPO

from statestore_cli import errors
from statestore_cli.cli import reference
from statestore_cli.cli.root_command import app

DOCS = REPO / "docs"
README = REPO / "README.md"
README_LIMIT = 300
# Linked before they exist: pages and files that land in the repository separately. Once one exists its
# links are checked like any other (its headings included); remove it from here then.
PENDING: set[str] = set()


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


# -- README --------------------------------------------------------------------------------------------------
def test_the_readme_is_a_guide_of_at_most_300_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_LIMIT, (
        f"README.md has {len(lines)} lines; move detail into docs/ (limit {README_LIMIT})"
    )


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def test_the_readme_test_command_is_the_one_ci_runs():
    """`.ci/run` runs the README's test command in a fresh clone: the two must stay one command."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    [command] = [line for line in ci if line.startswith("python3 -m venv .venv")]
    commands = [line for block in _shell_blocks(README.read_text(encoding="utf-8")) for line in block.splitlines()]
    assert command in commands, f"README.md no longer shows the test command .ci/run runs: {command}"


@pytest.mark.slow
def test_the_readme_quick_start_runs_the_demo_on_the_embedded_default(tmp_path):
    """The quick start installs the checkout and runs examples/demo.sh with the installed `statestore`;
    here the demo runs with this checkout's CLI as `statestore`, on the SQLite default it picks itself."""
    commands = [line for block in _shell_blocks(README.read_text(encoding="utf-8")) for line in block.splitlines()]
    [quick_start] = [line for line in commands if "examples/demo.sh" in line]
    assert quick_start.startswith("python3 -m venv ") and "pip install -q . " in quick_start, quick_start
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Its eleven `statestore` processes forked by the worker's warm server (``warm``), each a real process of
    # this checkout's CLI without an import of the tool; where a fork would differ, a cold one.
    forked = warm.launcher(bin_dir)
    if not forked:
        wrapper = bin_dir / "statestore"
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m statestore_cli "$@"\n', encoding="utf-8")
        wrapper.chmod(0o755)
    env = {**os.environ, **forked, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    env.pop("AIRFLOW_HOME", None)  # the demo makes its own
    run = subprocess.run(
        ["sh", "examples/demo.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr
    assert "statestore: created the SQLite file " in run.stderr, run.stderr
    assert re.search(r"^deleted 2 expired task keys in one statement ", run.stderr, re.MULTILINE), run.stderr
    assert run.stdout.rstrip().endswith("3 keys"), run.stdout  # what the clean left: the unexpired ones


# -- generated pages ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return reference.render_pages()


@pytest.mark.parametrize("page", sorted(reference.PAGES))
def test_a_generated_page_matches_the_code(generated, page):
    """Regenerated in memory and compared byte for byte with the committed page."""
    committed = (DOCS / page).read_bytes() if (DOCS / page).is_file() else b""
    if committed != generated[page].encode("utf-8"):
        diff = difflib.unified_diff(
            committed.decode("utf-8", "replace").splitlines(),
            generated[page].splitlines(),
            f"docs/{page} (committed)",
            f"docs/{page} (generated)",
            lineterm="",
            n=1,
        )
        shown = "\n".join(list(diff)[:40])
        pytest.fail(f"docs/{page} is out of date: run `{reference.REGENERATE}` and commit the result\n{shown}")


def test_the_generator_writes_the_pages_and_check_finds_a_stale_one(tmp_path, generated):
    script = [sys.executable, "-m", "statestore_cli.cli.reference"]
    written = subprocess.run([*script, str(tmp_path)], capture_output=True, text=True, check=False)
    assert written.returncode == 0, written.stderr
    for page, text in generated.items():
        assert (tmp_path / page).read_bytes() == text.encode("utf-8"), page
    fresh = subprocess.run([*script, "--check", str(tmp_path)], capture_output=True, text=True, check=False)
    assert (fresh.returncode, fresh.stderr) == (0, "")
    (tmp_path / reference.COMMANDS_PAGE).write_text("# stale\n", encoding="utf-8")
    stale = subprocess.run([*script, "--check", str(tmp_path)], capture_output=True, text=True, check=False)
    assert stale.returncode == 1
    assert stale.stderr == f"{tmp_path / reference.COMMANDS_PAGE} is out of date: run {reference.REGENERATE}\n"
    assert (tmp_path / reference.COMMANDS_PAGE).read_text(encoding="utf-8") == "# stale\n", "--check writes nothing"


def _walk(command, path="statestore"):
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if not sub.hidden:
            yield from _walk(sub, f"{path} {name}")


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_command_reference_has_every_command_argument_and_option(generated):
    """Read from the command tree here, independently of the generator: nothing it holds is left out."""
    text = generated[reference.COMMANDS_PAGE]
    tree = list(_walk(typer.main.get_command(app)))
    assert len(tree) > 20
    for path, command in tree:
        section = _section(text, f"`{path}`")
        for param in command.params:
            if param.hidden:
                continue
            first = param.opts[0] if param.param_type_name == "option" else (param.metavar or param.name.upper())
            assert f"\n| `{first}`" in section, (path, first)
            if param.help:
                assert " ".join(param.help.replace("\\[", "[").split()) in section, (path, first)
        summary = " ".join(command.help.split("\n\n")[0].split())
        assert summary in section, path


def test_each_option_that_defaults_to_a_config_option_names_its_environment_variable(generated):
    text = generated[reference.COMMANDS_PAGE]
    clean = _section(text, "`statestore clean`")
    row = next(line for line in clean.splitlines() if line.startswith("| `--batch-size`"))
    assert "(configuration.md#state_store-state_cleanup_batch_size)" in row
    assert "`AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE`" in row
    root = _section(text, "`statestore`")
    conn = next(line for line in root.splitlines() if line.startswith("| `--conn`"))
    assert "`AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`" in conn


def test_the_exit_code_table_covers_every_exit_code_of_the_code(generated):
    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    codes = [row.code for row in reference.EXIT_CODES]
    assert codes == sorted(set(codes)), "one row per code, in order"
    assert set(codes) == defined
    known = {path.partition(" ")[2] for path, _ in _walk(typer.main.get_command(app))}
    for row in reference.EXIT_CODES:
        assert row.commands is None or set(row.commands) <= known, row
    table = _section(generated[reference.COMMANDS_PAGE], "Exit codes")
    for code in defined:
        assert re.search(rf"^\| {code} \| \S", table, re.MULTILINE), code
    clean = _section(generated[reference.COMMANDS_PAGE], "`statestore clean`")
    assert "Exit codes: 0, 2, 3, 4, 5, 130, 143 (" in clean
    delete = _section(generated[reference.COMMANDS_PAGE], "`statestore delete`")
    assert "Exit codes: 0, 2, 3, 130, 143 (" in delete  # a missing key is not an error there


def test_the_configuration_reference_has_every_option_with_its_default_and_variable(generated):
    from statestore_cli.config import load_option_specs

    text = generated[reference.CONFIGURATION_PAGE]
    for spec in load_option_specs():
        section = text[text.index(f"\n### `[{spec.section}] {spec.option}`\n") :]
        section = section[: section.find("\n### ", 1)]
        assert spec.description in section
        assert f"- Environment variable: `{spec.env_var}`." in section
        assert "\n- Default: " in section and "\n- Accepts: " in section  # which default: tests/test_config.py
    assert "## Lookup order\n\nLookup order, first match wins" in text
    assert "1. `conn_override` (`sql_alchemy_conn` only; the CLI's `--conn`)" in text


# -- links ---------------------------------------------------------------------------------------------------
def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but - and _ dropped, spaces as
    -, a repeated one numbered -1, -2..."""
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower().replace("`", "")).replace(" ", "-")
            candidate, n = slug, 0
            while candidate in found:
                n += 1
                candidate = f"{slug}-{n}"
            found.add(candidate)
    return found


def _links(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans hold examples, not links
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", pages(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_a_heading(page):
    text = page.read_text(encoding="utf-8")
    for link in _links(text):
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        target, _, fragment = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        relative = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
        if relative in PENDING and not path.exists():
            continue
        assert path.exists(), f"{page.relative_to(REPO)}: the link {link} leads to no file"
        if fragment:
            assert path.suffix == ".md", f"{page.relative_to(REPO)}: {link}: an anchor into a file that is not Markdown"
            anchors = _anchors(path.read_text(encoding="utf-8"))
            assert fragment in anchors, f"{page.relative_to(REPO)}: the link {link} leads to no heading"


def test_the_link_checker_finds_a_broken_link_and_a_broken_anchor():
    assert _links("see [a](usage.md#x) and `[b](not-a-link.md)`\n```sh\n[c](neither.md)\n```\n") == ["usage.md#x"]
    assert _anchors("# A `b` c\n## What `clean` deletes\n## Dup\n## Dup\n") == {
        "a-b-c",
        "what-clean-deletes",
        "dup",
        "dup-1",
    }


def test_every_page_of_the_manual_is_in_its_table_of_contents():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = {(DOCS / link.partition("#")[0]).resolve() for link in _links(index)}
    for page in sorted(DOCS.rglob("*.md")):
        if page.name != "index.md":
            assert page.resolve() in linked, f"docs/index.md does not link {page.relative_to(DOCS)}"


def test_the_generator_is_not_on_the_start_up_path():
    probe = (
        "import sys; from statestore_cli.cli.root_command import app; "
        "print('statestore_cli.cli.reference' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout == "False\n"
