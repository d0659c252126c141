"""Every ``from fastppo... import name`` in benchmarks/ (lazy ones inside functions too) names
something that exists: the scripts run on a GPU machine seldom, so a moved name must fail here."""

import ast
import importlib
from pathlib import Path

import pytest

from tests.support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"


def fastppo_imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fastppo"
        for alias in node.names
    ]


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_benchmark_imports_name_what_exists(script):
    missing = []
    for module, name in fastppo_imports(script):
        try:
            found = importlib.import_module(module)
        except ImportError as exc:  # an optional extra (vllm, ...) is not a moved name
            if exc.name and exc.name.split(".")[0] == "fastppo":
                missing.append(f"{module} (no such module)")
            continue
        if not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{script.name} imports names that do not exist: {missing}"
