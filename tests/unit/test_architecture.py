"""The house rules that the code itself must keep (issue: one place for each kind of
knowledge): no import circle between the package's modules, no module reaching for
another module's private names, and the research tooling reached only from the command
line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_socialbias"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(modules: dict[str, Path]):
    """(importer, imported module, names) for every import of a package module, at any depth
    (function-level imports included: a lazy import is still an arrow)."""
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("pytest_socialbias"):
                        yield module, alias.name, []
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, node, is_package)
                if not target.startswith("pytest_socialbias"):
                    continue
                names = [a.name for a in node.names]
                for name in names:
                    if f"{target}.{name}" in modules:  # `from . import prompts`: a module
                        yield module, f"{target}.{name}", []
                        names = [n for n in names if n != name]
                if target in modules:
                    yield module, target, names


def test_no_import_circle():
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for importer, imported, _ in _imports(modules):
        if imported in modules and imported != importer:
            graph[importer].add(imported)
    # A package's __init__ that only hands names on is not a room of its own: drop the
    # edges from a package to its own submodules (``models`` -> ``models.client``) and
    # fold imports of the package into its modules' edges.
    for m in list(graph):
        graph[m] = {t for t in graph[m] if not t.startswith(m + ".")}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_a_private_name_of_another():
    modules = _modules()
    found = [
        f"{importer} imports {name} from {imported}"
        for importer, imported, names in _imports(modules)
        for name in names
        if name.startswith("_") and not name.startswith("__") and imported != importer
    ]
    assert not found, "\n".join(found)


def test_only_the_command_line_reaches_the_research_tooling():
    """pytest_socialbias.research (data set generation and description, training of the
    learned readings) is imported by the ``python -m pytest_socialbias`` subcommands and by
    itself, never by the plugin's modules (test_research_apart.py runs a suite and
    checks the same at run time)."""
    modules = _modules()
    found = [
        f"{importer} imports {imported}"
        for importer, imported, _ in _imports(modules)
        if imported.split(".")[:2] == ["pytest_socialbias", "research"]
        and importer.split(".")[:2] != ["pytest_socialbias", "research"]
        and importer != "pytest_socialbias.__main__"
    ]
    assert not found, "\n".join(found)
