"""Fixtures for the RLHF tests; skipped as a whole without the rlhf extra (transformers, peft)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.support.tiny_lm import build_model_folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return build_model_folder(tmp_path_factory.mktemp("tiny-gpt2"))
