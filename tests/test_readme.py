"""The README is a first page that stays true to the repository, and the documentation site is
built from the code: every hyperparameter in the generated CLI reference, every link resolving."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fastppo.config import Config, sections

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def cli_reference() -> str:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks.cli_reference()


def test_the_readme_is_a_first_page():
    assert len(README.splitlines()) <= 250, "the README is the first page: move details to docs/"
    assert "make train" in README and "make test" in README


def test_the_readmes_links_lead_somewhere():
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", README) if "://" not in t]
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert targets and not missing, missing


def test_every_hyperparameter_is_in_the_generated_cli_reference():
    """Generated from the parsers, so this holds by construction unless the generator drops flags."""
    page = cli_reference()
    flags = [f"--{name.replace('_', '-')}.{f.name.replace('_', '-')}" for name, section in sections(Config()).items() for f in dataclasses.fields(section)]
    missing = [flag for flag in flags if flag != "--env.env-id" and f"`{flag}`" not in page]
    assert not missing, missing
    assert "## fastppo rlhf" in page and "`--estimator`" in page and "`ENV_ID`" in page


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="the [docs] extra is not installed")
def test_the_site_builds_strict(tmp_path):
    """`make docs`: no broken link, anchor or reference, offline."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING" not in result.stderr, result.stderr
    assert "fonts.googleapis" not in (tmp_path / "site" / "index.html").read_text()
