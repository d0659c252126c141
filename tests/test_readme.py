"""The README stays true to the code: every hyperparameter documented, the set-up commands shown."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fastppo.config import Config, sections

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_hyperparameter_is_in_the_readme_table():
    flags = [f"--{name.replace('_', '-')}.{f.name.replace('_', '-')}" for name, section in sections(Config()).items() for f in dataclasses.fields(section)]
    missing = [flag for flag in flags if f"`{flag}`" not in README]
    assert not missing, f"add these to README's Hyperparameters table: {missing}"


def test_the_two_setup_commands_are_shown():
    assert "make train" in README and "make test" in README
