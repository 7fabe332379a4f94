"""The package's house rules that a reviewer would otherwise count by hand: module size and unique module names.

A module over ``MAX_LINES`` holds more than one idea: split it by idea. Two modules with one base name
(``storage/history.py`` beside ``history.py``) make tracebacks, ``-k`` filters and conversations ambiguous:
name each after what it holds.
"""

from __future__ import annotations

from collections import defaultdict
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
