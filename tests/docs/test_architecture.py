"""The package's layers (ARCHITECTURE.md): each module imports only from its own folder or from
the layers below it, and no modules import each other in a circle. Imports inside functions count:
a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "src" / "fastppo"

LAYERS: list[set[str]] = [
    {"errors", "core"},
    {"devices", "env_ids", "profiling"},
    {"config"},
    {"files"},
    {"envs"},
    {"policies"},
    {"agents"},
    {"games"},
    {"training"},
    {"experiments", "rlhf"},
    {"api"},
    {"cli", "__init__"},
    {"__main__"},
]
"""Lowest first: a module of ``fastppo/<part>`` (a folder or a top-level module) is in the layer
that names ``<part>``."""


def part_of(module: str) -> str:
    """``fastppo.training.update`` -> ``training``; ``fastppo.config`` -> ``config``."""
    return module.split(".")[1] if "." in module else "__init__"


def layer_of(module: str) -> int:
    part = part_of(module)
    for rank, parts in enumerate(LAYERS):
        if part in parts:
            return rank
    raise AssertionError(f"{module} is in no layer of ARCHITECTURE.md: add its folder to LAYERS")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The fastppo modules ``path`` imports (``from fastppo.x import y`` counts ``fastppo.x.y``
    when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("fastppo.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fastppo") and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    # A package's own __init__ is imported by every module below it: only explicit imports count.
    return {name: imports_of(path, modules) - {name} for name, path in paths.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, imported in graph.items():
        for other in imported:
            same_part = part_of(other) == part_of(module)
            if not same_part and layer_of(other) >= layer_of(module):
                wrong.append(f"{module} imports {other} (layer {layer_of(other)} >= its own {layer_of(module)})")
    return sorted(wrong)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_imports_only_its_folder_and_the_layers_below() -> None:
    assert upward_imports(import_graph()) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(import_graph()) == []


def test_the_checks_see_a_broken_rule() -> None:
    graph = import_graph()
    graph["fastppo.core.gae"] = graph["fastppo.core.gae"] | {"fastppo.training.trainer"}
    assert upward_imports(graph) == ["fastppo.core.gae imports fastppo.training.trainer (layer 8 >= its own 0)"]
    graph = import_graph()
    graph["fastppo.envs.vector"] = graph["fastppo.envs.vector"] | {"fastppo.envs.make"}
    assert any({"fastppo.envs.make", "fastppo.envs.vector"} <= set(circle) for circle in circles(graph))


@pytest.mark.parametrize("part", sorted(set().union(*LAYERS) - {"__main__", "__init__"}))
def test_every_layer_exists(part: str) -> None:
    assert (PACKAGE / part).is_dir() or (PACKAGE / f"{part}.py").is_file()
