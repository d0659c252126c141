"""The README is a first page that stays true to the repository, and the documentation's CLI
reference is built from the code: every hyperparameter in it (tests/test_docs_site.py builds and
renders the whole site)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

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
