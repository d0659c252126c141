"""ARCHITECTURE.md is the map of the code, and the pages of docs/how-it-works tell how it works: what
they name must be there. Every module path, every ``fastppo.x.y`` and every class or function they
name exists in src/fastppo; and every package and module of src/fastppo is on the map."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "src" / "fastppo"
MAP = ROOT / "ARCHITECTURE.md"
PAGES = sorted((ROOT / "docs" / "how-it-works").glob("*.md"))

PATH = re.compile(r"(?:[\w.*-]+/)*[\w*-]+\.py|(?:[\w.*-]+/)+(?:[\w*-]+\.yaml)?")
"""A module, folder or data file path, as the documents write them: from ``src/fastppo/`` (``core/gae.py``), from
``src/`` or from the repository's root (``tests/test_trainer.py``). (A bare ``config.yaml`` is a run folder's file.)"""
DOTTED = re.compile(r"fastppo(?:\.\w+)+")
"""A module or a name in one, by its import path: ``fastppo.core.compute_gae``."""
CODE_NAME = re.compile(r"[A-Z]\w*[a-z]\w*(?:\.\w+)?|[a-z]\w*_\w+")
"""A class (``StackedActorCritic``, ``Config.validate``: CamelCase, not an ALL_CAPS word) or a function
(``train_loop``: lower case with an underscore) named without its module."""


def inline_code(text: str) -> list[str]:
    """The `code` spans of a Markdown text, its fenced blocks (pictures, pseudocode) left out."""
    return re.findall(r"`([^`\n]+)`", re.sub(r"(?ms)^\s*```.*?^\s*```", "", text))


def named(pattern: re.Pattern[str], text: str) -> list[str]:
    return sorted({span for span in inline_code(text) if pattern.fullmatch(span)})


def path_exists(path: str) -> bool:
    return any(
        any(base.glob(path)) if "*" in path else (base / path).exists() for base in (PACKAGE, PACKAGE.parent, ROOT)
    )


def map_entries() -> set[str]:
    """What the map must name: every package (``envs/tensor/``) and every module (``envs/tensor/base.py``; a
    sub-package's ``__init__.py`` is its package's entry, the top-level ``__init__.py`` a module of its own)."""
    entries = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if path.name != "__init__.py" or path.parent == PACKAGE:
            entries.add(relative.as_posix())
        if path.name == "__init__.py" and path.parent != PACKAGE:
            entries.add(relative.parent.as_posix() + "/")
    return entries


@cache
def module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def body_names(body: list[ast.stmt]) -> set[str]:
    """What a module or class body defines: functions, classes, assigned names, imported names, ``__all__``."""
    found: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {target.id for target in node.targets if isinstance(target, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) and isinstance(
                node.value, ast.List
            ):
                found |= {
                    item.value
                    for item in node.value.elts
                    if isinstance(item, ast.Constant) and isinstance(item.value, str)
                }
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return found


def module_file(dotted: str) -> Path | None:
    path = PACKAGE.parent / dotted.replace(".", "/")
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def resolves(dotted: str) -> bool:
    """``fastppo.a.b`` is a module, or a name its longest module prefix defines (``Class.member`` too)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest, body = parts[cut:], module_tree(path).body
        for name in rest:
            if name not in body_names(body):
                return False
            classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == name]
            body = classes[0].body if classes else []
        return True
    return False


@cache
def defined_names() -> frozenset[str]:
    """Every function, class and class member defined anywhere in src/fastppo, and ``Class.member`` for members."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = module_tree(path)
        found |= body_names(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.add(node.name)
            elif isinstance(node, ast.ClassDef):
                found.add(node.name)
                found |= {f"{node.name}.{member}" for member in body_names(node.body)}
    return frozenset(found)


DOCUMENTS = [MAP, *PAGES]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_path_named_exists(document: Path) -> None:
    assert [path for path in named(PATH, document.read_text()) if not path_exists(path)] == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_fastppo_name_resolves(document: Path) -> None:
    assert [name for name in named(DOTTED, document.read_text()) if not resolves(name)] == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_class_and_function_named_is_defined(document: Path) -> None:
    assert [name for name in named(CODE_NAME, document.read_text()) if name not in defined_names()] == []


def test_every_package_and_module_is_on_the_map() -> None:
    on_the_map = set(named(PATH, MAP.read_text()))
    assert sorted(map_entries() - on_the_map) == []
