"""Lower layers never import higher ones: the order docs/architecture.md draws, checked over every import.

``LAYERS`` is the one declaration of that order, lowest first. A module may
import its own layer and those below it. Every import counts, the lazy ones
inside functions (which keep TensorFlow, pandas and pynvml off the plugin's
import path) and those under ``TYPE_CHECKING`` included: the graph is the one
``test_import_graph`` reads. Every module must sit in a layer, so a new module
or folder is placed deliberately.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_import_graph import PACKAGE, ROOT, import_graph

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The model, the statistics and the settings: what every layer speaks.
    ("foundation", ("pytest_tfperf", "pytest_tfperf.model", "pytest_tfperf.stats", "pytest_tfperf.rank_tests",
                    "pytest_tfperf.config")),
    # TensorFlow profiles read and regressions attributed (issue 19): model and stats only; gates and reports read it.
    ("profiling", ("pytest_tfperf.profiling",)),
    ("storage", ("pytest_tfperf.storage",)),
    ("probes", ("pytest_tfperf.probes",)),
    # input_bound/ is one feature over three layers: its split measurement here (and the package: the measuring
    # layer imports it), its diagnosis and stages in diagnoses, its profiled pass in session.
    ("measuring", ("pytest_tfperf.measuring", "pytest_tfperf.input_bound", "pytest_tfperf.input_bound.split")),
    ("diagnoses", ("pytest_tfperf.diagnoses", "pytest_tfperf.input_bound.diagnosis", "pytest_tfperf.input_bound.stages",
                   "pytest_tfperf.input_bound.pipeline_shape")),
    # bisect/ is one feature across layers: the package and its pure search here, each other module by name.
    ("gates", ("pytest_tfperf.gates", "pytest_tfperf.bisect", "pytest_tfperf.bisect.search")),
    ("reports", ("pytest_tfperf.reports", "pytest_tfperf.bisect.report_text")),
    # explain/ is the session's --tfperf-explain step (profiling/ is its lower layer); against/ (the --tfperf-against
    # gate) is the session's too, all of it.
    ("session", ("pytest_tfperf.session", "pytest_tfperf.explain", "pytest_tfperf.against",
                 "pytest_tfperf.bisect.steps", "pytest_tfperf.bisect.select_plugin",
                 "pytest_tfperf.input_bound.profiled_pass")),
    # No library module imports a command-line one.
    ("cli", ("pytest_tfperf.cli", "pytest_tfperf.bisect.cli")),
    # Where users come in: the pytest plugin, and the documented paths kept at the top.
    ("entry points", ("pytest_tfperf.plugin", "pytest_tfperf.gpu_check", "pytest_tfperf.history")),
    # Workloads that use the plugin as a user would.
    ("catalog", ("pytest_tfperf.catalog",)),
)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index of the layer holding ``module``: the longest prefix that names it or a package above it."""
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def upward_imports(graph: dict[str, set[str]],
                   layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """Every import of a higher layer's module, as 'a (layer) imports b (higher layer)'."""
    found = []
    for module in sorted(graph):
        own = layer_of(module, layers)
        for target in sorted(graph[module]):
            theirs = layer_of(target, layers)
            if own is not None and theirs is not None and theirs > own:
                found.append(f"{module} ({layers[own][0]}) imports {target} ({layers[theirs][0]})")
    return found


def test_every_module_sits_in_a_layer() -> None:
    unplaced = sorted(m for m in import_graph(ROOT, PACKAGE) if layer_of(m) is None)
    assert not unplaced, f"modules in no layer of LAYERS (tests/unit/test_layers.py): {unplaced}"


def test_no_module_imports_a_higher_layer() -> None:
    found = upward_imports(import_graph(ROOT, PACKAGE))
    assert not found, "imports of a higher layer (move the code down, or the import up):\n" + "\n".join(found)


def test_the_plugin_and_the_foundation_sit_at_either_end() -> None:
    assert layer_of("pytest_tfperf.plugin") == len(LAYERS) - 2
    assert layer_of("pytest_tfperf.model") == layer_of("pytest_tfperf") == 0
    assert layer_of("pytest_tfperf.gates.stored") == [name for name, _ in LAYERS].index("gates")


def test_the_architecture_page_has_one_line_per_module() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
    rows = re.findall(r"^\| `([\w/]+\.py)` \|", page.read_text(encoding="utf-8"), re.M)
    modules = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")]
    # The catalog has one line of its own; a folder's __init__ says what it holds in its docstring.
    expected = [m for m in modules if not m.startswith("catalog/") and not m.endswith("/__init__.py")]
    assert sorted(rows) == sorted(expected)


def test_a_lazy_import_of_a_higher_layer_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from pkg.high import b\n")
    (pkg / "high" / "b.py").write_text("from pkg.low import a\n")
    layers = (("low", ("pkg", "pkg.low")), ("high", ("pkg.high",)))
    # ``from pkg.high import b`` loads the package pkg.high, then its module b: both are above pkg.low.
    assert upward_imports(import_graph(pkg, "pkg"), layers) == [
        "pkg.low.a (low) imports pkg.high (high)", "pkg.low.a (low) imports pkg.high.b (high)"]
