"""The package's modules import each other without cycles: each one only what sits below it.

The graph is read from the source with ``ast``, so it includes the imports
inside functions (the lazy ones that keep TensorFlow and pynvml off the
plugin's import path) and those under ``TYPE_CHECKING``: a cycle through a
lazy import still means two modules that each need the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_tfperf

PACKAGE = "pytest_tfperf"
ROOT = Path(pytest_tfperf.__file__).resolve().parent


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root`` (``__init__`` names the package)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every dotted name an import statement (or ``importlib.import_module("literal")``) could load."""
    here = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from a import b`` loads ``a``, and ``a.b`` when b is a submodule.
            names += [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.append(node.args[0].value)
    return names


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its source."""
    files = module_files(root, package)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = _imported_names(tree, module, path.name == "__init__.py")
        graph[module] = {name for name in names if name in files and name != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_a_cycle_through(graph, component) for component in components]


def _a_cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path that starts and ends at the component's first module, for the failure message."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth-first, so the cycle shown is a shortest one
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph(ROOT, PACKAGE))
    assert not found, "import cycles (each module should import only what sits below it):\n" + "\n".join(
        " -> ".join(cycle) for cycle in found)


def test_the_graph_holds_every_module_of_every_subpackage() -> None:
    graph = import_graph(ROOT, PACKAGE)
    folders = {p.parent for p in ROOT.rglob("*.py")}
    assert len(graph) == sum(1 for _ in ROOT.rglob("*.py"))
    assert {"pytest_tfperf", "pytest_tfperf.gates", "pytest_tfperf.gates.stored", "pytest_tfperf.plugin"} <= set(graph)
    assert all((folder / "__init__.py").exists() for folder in folders)  # each folder a package, named in the graph


def test_the_graph_sees_top_level_function_level_and_relative_imports() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert "pytest_tfperf.probes.memory_probes" in graph["pytest_tfperf.measuring.runner"]  # top level
    assert "pytest_tfperf.probes.nvml" in graph["pytest_tfperf.probes.memory_probes"]  # inside default_probes()
    assert "pytest_tfperf.catalog.worker" in graph["pytest_tfperf.catalog.scenarios.oversized_batch"]


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from pkg.sub import high\n")
    (pkg / "sub" / "high.py").write_text("from .. import low\n")
    (pkg / "other.py").write_text("import pkg.low\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.sub.high"] == {"pkg", "pkg.low"}
    assert cycles(graph) == [["pkg.low", "pkg.sub.high", "pkg.low"]]
