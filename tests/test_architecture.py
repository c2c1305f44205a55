"""The package's shape, read from its source with ``ast``: no module imports another in a circle (imports
inside functions count, as they run too), none uses another module's private (underscore) names (nor do
the tests and benchmarks), the library (everything outside ``statestore_cli.cli``) never imports typer,
rich or the CLI package, and only ``schema`` spells the asset store's writer columns.

Imports under ``if TYPE_CHECKING:`` count as well: a cycle of annotations is still two modules that can
only be understood together."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import statestore_cli

ROOT = Path(statestore_cli.__file__).parent
REPO = ROOT.parent
PACKAGE = "statestore_cli"
CLI = f"{PACKAGE}.cli"
UI_LIBRARIES = ("typer", "rich", "click")

# One worker runs the module (``xdist_group``): its tests share the package read once (``modules``, a second of
# CPU), which every worker that was handed one of them read again.
pytestmark = pytest.mark.xdist_group("architecture")


def module_name(path: Path, root: Path = ROOT, package: str = PACKAGE) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: dict[str, int] = field(default_factory=dict)  # module imported -> first line
    external: dict[str, int] = field(default_factory=dict)  # top-level name outside the package -> line
    private_uses: list[tuple[int, int, str]] = field(default_factory=list)  # line, column, what


def load_modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Module]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root, package)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules[name] = Module(name, path, path.name == "__init__.py", tree)
    for module in modules.values():
        _read_imports(module, modules, package)
    return modules


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The module an ``from X import ...`` names, a relative one resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base = base[:-1]  # a module's siblings are its package's
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _read_imports(module: Module, modules: dict[str, Module], package: str) -> None:
    bound: dict[str, str] = {}  # a local name bound to one of the package's modules -> that module
    imported: dict[str, str] = {}  # a local name bound to a module's class, function or value -> its dotted name

    def depends(target: str, line: int) -> None:
        if target == module.name:
            return
        module.imports.setdefault(target, line)

    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top != package:
                    module.external.setdefault(top, node.lineno)
                    continue
                depends(alias.name, node.lineno)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[top] = top  # `import a.b` binds `a`; `a.b._x` is resolved below
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            top = source.split(".")[0]
            if top != package:
                module.external.setdefault(top, node.lineno)
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:  # `from pkg import module`: the module itself
                    depends(submodule, node.lineno)
                    bound[alias.asname or alias.name] = submodule
                    continue
                depends(source, node.lineno)
                imported[alias.asname or alias.name] = f"{source}.{alias.name}"
                if is_private(alias.name) and source != module.name:
                    used = f"from {source} import {alias.name}"
                    module.private_uses.append((node.lineno, node.col_offset, used))
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            target = _dotted_module(node.value, bound, modules)
            if target is None and isinstance(node.value, ast.Name):  # an imported class's private member
                target = imported.get(node.value.id)
            if target is not None and target != module.name:
                module.private_uses.append((node.lineno, node.col_offset, f"{target}.{node.attr}"))
    module.private_uses.sort()


def _dotted_module(node: ast.expr, bound: dict[str, str], modules: dict[str, Module]) -> str | None:
    """The package's module an expression names (``commands``, ``statestore_cli.cli.failure``), else None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        parent = _dotted_module(node.value, bound, modules)
        if parent is not None and f"{parent}.{node.attr}" in modules:
            return f"{parent}.{node.attr}"
    return None


def import_cycles(modules: dict[str, Module]) -> list[tuple[list[str], list[str]]]:
    """Every group of two or more modules that import each other, directly or not (a strongly
    connected component, Tarjan's algorithm), with the shortest cycle through its first module."""
    graph = {name: sorted(t for t in module.imports if t in modules) for name, module in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            connect(name)
    return [(group, _cycle_in(group, graph)) for group in sorted(groups)]


def _cycle_in(group: list[str], graph: dict[str, list[str]]) -> list[str]:
    """One cycle through the group's first module, found breadth-first, so the shortest."""
    members = set(group)
    start = group[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in graph[node]:
            if nxt == start:
                return [*paths[node], start]
            if nxt in members and nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle in the strongly connected group {group}")


def library_ui_imports(modules: dict[str, Module], cli: str = CLI) -> Iterator[str]:
    for module in modules.values():
        if module.name == cli or module.name.startswith(cli + ".") or module.name.endswith(".__main__"):
            continue  # the CLI, and `python -m statestore_cli`, which runs it
        for name, line in module.external.items():
            if name in UI_LIBRARIES:
                yield f"{module.name} line {line}: imports {name}"
        for target, line in module.imports.items():
            if target == cli or target.startswith(cli + "."):
                yield f"{module.name} line {line}: imports {target}"


def _describe(cycle: list[str], modules: dict[str, Module]) -> str:
    steps = [f"{a} (line {modules[a].imports[b]}) -> {b}" for a, b in itertools.pairwise(cycle)]
    return "\n  ".join(steps)


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return load_modules()


def test_no_module_imports_another_in_a_circle(modules):
    found = [
        f"{len(group)} modules in a circle ({', '.join(group)}), for one:\n  {_describe(cycle, modules)}"
        for group, cycle in import_cycles(modules)
    ]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_module_uses_another_modules_private_names(modules):
    found = [f"{m.name} line {line}: {use}" for m in modules.values() for line, _col, use in m.private_uses]
    assert not found, "private names used across modules (make them public where they are shared):\n" + "\n".join(found)


def test_the_library_never_imports_the_cli_or_its_libraries(modules):
    found = list(library_ui_imports(modules))
    assert not found, "\n".join(found)


# -- layers -------------------------------------------------------------------------------------------------
# Each layer of the library imports only the layers before it (docs/architecture.md says what each holds).
LAYERS = ("shared", "model", "config", "db", "backends", "ops", "cli")
SHARED = ("errors", "masking")  # the shared layer is two modules at the root, not a package
ARCHITECTURE = REPO / "docs" / "architecture.md"


def layer_of(module: str, package: str = PACKAGE) -> str | None:
    """The layer a module of the package belongs to: the first name under the package (None: the root
    package itself and ``__main__``, which start the CLI)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] == "__main__":
        return None
    if parts[1] in SHARED:
        return "shared"
    return parts[1] if parts[1] in LAYERS else f"? {parts[1]}"


def layer_breaches(modules: dict[str, Module], package: str = PACKAGE) -> Iterator[str]:
    for module in modules.values():
        own = layer_of(module.name, package)
        if own is None:
            continue
        if own not in LAYERS:
            yield f"{module.name}: not in a layer ({', '.join(LAYERS)}); move it into one"
            continue
        for target, line in module.imports.items():
            theirs = layer_of(target, package)
            if theirs in LAYERS and LAYERS.index(theirs) > LAYERS.index(own):
                yield f"{module.name} line {line}: imports {target}, a later layer ({theirs} after {own})"


def test_each_layer_imports_only_the_layers_before_it(modules):
    found = list(layer_breaches(modules))
    assert not found, "\n".join(found)


def test_a_lower_layer_importing_a_higher_one_is_found(tmp_path):
    found = _package(
        tmp_path,
        {
            "__init__.py": "",
            "db/__init__.py": "",
            "db/engine.py": "def run():\n    from pkg.ops import commands\n",
            "ops/__init__.py": "",
            "ops/commands.py": "from pkg.db import engine\n",
            "stray.py": "",
        },
    )
    assert sorted(layer_breaches(found, "pkg")) == [
        "pkg.db.engine line 2: imports pkg.ops.commands, a later layer (ops after db)",
        "pkg.stray: not in a layer (shared, model, config, db, backends, ops, cli); move it into one",
    ]


def test_the_architecture_page_names_every_module(modules):
    page = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [
        name
        for name, module in modules.items()
        if not module.is_package and f"`{module.path.name}`" not in page and f"`{module.path.stem}." not in page
    ]
    assert not missing, f"docs/architecture.md does not name: {', '.join(sorted(missing))}"


def outside_private_uses(modules: dict[str, Module], folder: Path) -> Iterator[str]:
    """The package's private names that the scripts in ``folder`` (tests, benchmarks) use."""
    for path in sorted(folder.rglob("*.py")):
        name = f"{folder.name}.{path.relative_to(folder).with_suffix('').as_posix().replace('/', '.')}"
        script = Module(name, path, False, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        _read_imports(script, modules, PACKAGE)
        for line, _col, used in script.private_uses:
            yield f"{path.relative_to(folder.parent)} line {line}: {used}"


def string_constants(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


@pytest.mark.parametrize("folder", ["tests", "bench"])
def test_tests_and_benchmarks_use_no_private_names_of_the_package(modules, folder):
    found = list(outside_private_uses(modules, REPO / folder))
    assert not found, "\n".join(found)


def test_only_the_schema_spells_the_asset_stores_writer_columns():
    """``last_updated_by_*`` is written once, in the table's definition; everything else (statements, the
    export, the benchmarks' stores and floors) takes the names from ``schema.ASSET_WRITER_COLUMNS``."""
    from statestore_cli.db.schema import ASSET_WRITER_COLUMNS, ASSET_WRITER_FIELDS, asset_state_store

    assert ASSET_WRITER_FIELDS == ("kind", "dag_id", "run_id", "task_id", "map_index")
    assert tuple(f"last_updated_by_{f}" for f in ASSET_WRITER_FIELDS) == ASSET_WRITER_COLUMNS
    assert set(ASSET_WRITER_COLUMNS) < set(asset_state_store.c.keys())
    spelled = [
        f"{path.relative_to(REPO)} line {line}"
        for folder in (ROOT, REPO / "bench")
        for path in sorted(folder.rglob("*.py"))
        if path != ROOT / "db" / "schema.py"
        for line, text in string_constants(path)
        if "last_updated_by_" in text
    ]
    assert not spelled, "\n".join(spelled)


# -- the checks themselves, on small packages written for them -------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    root = tmp_path / "pkg"
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return load_modules(root, "pkg")


def test_a_cycle_through_a_function_level_and_a_relative_import_is_found(tmp_path):
    modules = _package(
        tmp_path,
        {
            "__init__.py": "",
            "cli/__init__.py": "",
            "cli/app.py": "from pkg.cli import commands\n",
            "cli/commands.py": "def run():\n    from .app import APP\n",
            "plain.py": "from pkg import errors\n",
            "errors.py": "",
        },
    )
    assert import_cycles(modules) == [
        (["pkg.cli.app", "pkg.cli.commands"], ["pkg.cli.app", "pkg.cli.commands", "pkg.cli.app"])
    ]
    assert modules["pkg.cli.commands"].imports == {"pkg.cli.app": 2}
    assert modules["pkg.plain"].imports == {"pkg.errors": 1}


def test_a_longer_cycle_is_printed_in_import_order(tmp_path):
    modules = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "import pkg.b\n",
            "b.py": "from pkg.c import thing\n",
            "c.py": "if True:\n    from pkg import a\n",
        },
    )
    ((group, cycle),) = import_cycles(modules)
    assert group == ["pkg.a", "pkg.b", "pkg.c"]
    assert cycle == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert _describe(cycle, modules) == "pkg.a (line 1) -> pkg.b\n  pkg.b (line 1) -> pkg.c\n  pkg.c (line 2) -> pkg.a"


def test_private_names_are_found_imported_and_as_attributes(tmp_path):
    modules = _package(
        tmp_path,
        {
            "__init__.py": "__version__ = '1'\n",
            "shared.py": "_LIMIT = 3\ndef _helper(): ...\nPUBLIC = _LIMIT\nclass Store:\n    _table = 1\n",
            "user.py": (
                "import pkg.shared\n"
                "from pkg import shared as s, __version__\n"
                "from pkg.shared import PUBLIC, _LIMIT, Store\n"
                "def f(obj):\n"
                "    return s._helper(), pkg.shared._LIMIT, obj._private, s.PUBLIC, Store._table, Store.__name__\n"
            ),
        },
    )
    assert [(line, used) for line, _col, used in modules["pkg.user"].private_uses] == [
        (3, "from pkg.shared import _LIMIT"),
        (5, "pkg.shared._helper"),
        (5, "pkg.shared._LIMIT"),
        (5, "pkg.shared.Store._table"),
    ]
    assert modules["pkg.shared"].private_uses == []


def test_a_library_module_importing_the_cli_or_rich_is_found(tmp_path):
    modules = _package(
        tmp_path,
        {
            "__init__.py": "",
            "cli/__init__.py": "",
            "cli/app.py": "import typer\nimport rich.console\n",
            "store.py": "import json\n\ndef show():\n    from rich.console import Console\n"
            "    from pkg.cli import app\n",
        },
    )
    found = list(library_ui_imports(modules, "pkg.cli"))
    assert found == ["pkg.store line 4: imports rich", "pkg.store line 5: imports pkg.cli.app"]
