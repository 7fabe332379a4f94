"""The package's house rules that a reviewer would otherwise count by hand: module size, unique module names,
and no package code that only tests or benchmarks use.

A module over ``MAX_LINES`` holds more than one idea: split it by idea. Two modules with one base name
(``storage/history.py`` beside ``history.py``) make tracebacks, ``-k`` filters and conversations ambiguous:
name each after what it holds. A definition nothing in the package names is shipped to users for the
project's own validation, or is dead: it belongs in benchmarks/ or tests/, or nowhere.
"""

from __future__ import annotations

import ast
import re
from collections import Counter, defaultdict
from pathlib import Path

from tests.unit.test_import_graph import ROOT

MAX_LINES = 500

# Modules allowed past the limit (none).
ALLOWED_LONG: frozenset[str] = frozenset()

# Modules allowed to share a base name with another (none). A name ending in "/" stands for a whole folder.
ALLOWED_SHARED_NAMES: frozenset[str] = frozenset()


def modules(root: Path = ROOT) -> list[str]:
    """Every module of the package, as its path inside it; a folder's ``__init__.py`` is no module of its own."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.name != "__init__.py")


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def too_long(root: Path = ROOT, limit: int = MAX_LINES, allowed: frozenset[str] = ALLOWED_LONG) -> list[str]:
    """The modules over ``limit`` lines and not allowed, as 'path (n lines)'."""
    return [f"{m} ({n} lines)" for m in modules(root) if m not in allowed and (n := line_count(root / m)) > limit]


def is_allowed(module: str, allowed: frozenset[str]) -> bool:
    return module in allowed or any(a.endswith("/") and module.startswith(a) for a in allowed)


def shared_names(root: Path = ROOT, allowed: frozenset[str] = ALLOWED_SHARED_NAMES) -> list[str]:
    """The base names that more than one module has, as 'name: path, path', unless one of them is allowed."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for m in modules(root):
        by_name[m.rsplit("/", 1)[-1]].append(m)
    return [f"{name}: {', '.join(paths)}" for name, paths in sorted(by_name.items())
            if len(paths) > 1 and not any(is_allowed(p, allowed) for p in paths)]


def test_no_module_exceeds_the_line_limit() -> None:
    found = too_long()
    assert not found, f"modules over {MAX_LINES} lines (split them by idea):\n" + "\n".join(found)


def test_no_two_modules_share_a_base_name() -> None:
    found = shared_names()
    assert not found, "modules that share a base name (rename one after what it holds):\n" + "\n".join(found)


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "storage").mkdir()
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "storage" / "__init__.py").write_text("")
    (tmp_path / "history.py").write_text("x = 1\n" * 3)
    (tmp_path / "storage" / "history.py").write_text("x = 1\n")
    (tmp_path / "storage" / "big.py").write_text("x = 1\n" * 4)
    assert too_long(tmp_path, limit=3, allowed=frozenset()) == ["storage/big.py (4 lines)"]
    assert too_long(tmp_path, limit=3, allowed=frozenset({"storage/big.py"})) == []
    assert shared_names(tmp_path, allowed=frozenset()) == ["history.py: history.py, storage/history.py"]
    assert shared_names(tmp_path, allowed=frozenset({"storage/"})) == []


# The catalog's shipped tests (collected from benchmarks/test_catalog.py) are the product, named by pytest only.
SHIPPED_TESTS = "catalog/test_catalog.py"


def unused_definitions(root: Path = ROOT) -> list[str]:
    """Top-level functions, classes and constants that no other line of the package names (pytest hooks and
    ``main`` entry points excepted: pytest and the console scripts name them)."""
    texts = {p: p.read_text(encoding="utf-8") for p in root.rglob("*.py")}
    words = Counter(w for t in texts.values() for w in re.findall(r"\w+", t))
    found = []
    for path, text in sorted(texts.items()):
        if path.relative_to(root).as_posix() == SHIPPED_TESTS:
            continue
        for node in ast.parse(text).body:
            names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else
                     [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]
                     if isinstance(node, ast.Assign) else [])
            for name in names:
                if name.startswith(("pytest_", "__")) or name == "main":
                    continue
                if words[name] <= 1:  # its own definition only
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {name}")
    return found


def test_every_definition_is_used_by_the_package_itself() -> None:
    found = unused_definitions()
    assert not found, "defined in the package but named nowhere else in it (move to tests/ or benchmarks/, " \
                      "or delete):\n" + "\n".join(found)


def test_an_unused_definition_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def used():\n    pass\n\ndef only_tests():\n    pass\n\nLIMIT = 3\n")
    (tmp_path / "b.py").write_text("from a import used\n\ndef main():\n    used()\n")
    assert unused_definitions(tmp_path) == ["a.py:4 only_tests", "a.py:7 LIMIT"]
