"""Same results: short runs of `fastppo train` (a fresh process each, as a user runs it) log the
metrics pinned in tests/support/fixtures/pinned/ (written by tests/support/fixtures/pinned/make_pinned.py, whose
--check tells bit-identity on the machine that wrote them). Compared within a float tolerance:
another CPU may round the last bit differently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fixtures.pinned.make_pinned import HERE, differences, train_pinned

REL, ABS = 1e-5, 1e-6
FIXTURES = sorted(HERE.glob("*.json"))


def test_every_issue_35_run_is_pinned():
    assert [f.stem for f in FIXTURES] == sorted(
        [
            "cartpole_sync",
            "cartpole_tensor",
            "cartpole_tensor_stack3",
            "cartpole_novelocity_lstm",
            "pendulum",
            "acrobot_cleanrl_discrete",
            "simple_spread_mappo",
            "halfcheetah",
        ]
    )


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_run_logs_its_pinned_metrics(fixture: Path, tmp_path: Path):
    pinned = json.loads(fixture.read_text())
    found = differences(fixture.stem, pinned["runs"], train_pinned(pinned["argv"], tmp_path), REL, ABS)
    assert not found, f"{len(found)} metrics differ from {fixture.name}:\n" + "\n".join(found[:40])
