"""Same surfaces: run folders written by fastppo before issue 35's redesign (tests/support/fixtures/old_runs/,
each stopped at a short budget with its checkpoint) resume with `fastppo train --resume FOLDER
--total-timesteps MORE` to the metrics their fixture pins, and `fastppo eval` plays the resumed agent
as it did then. A copy is resumed: the fixtures stay as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fixtures.pinned.make_pinned import OLD_RUNS, differences, resume_old_run

REL, ABS = 1e-5, 1e-6
FIXTURES = sorted(OLD_RUNS.glob("*.json"))


def test_the_old_folders_are_there():
    # a single run, a --seeds stack, a recurrent run, grouped multi-agent policies
    assert [f.stem for f in FIXTURES] == [
        "cartpole_sync_stopped",
        "cartpole_tensor_seeds2",
        "novelocity_lstm",
        "simple_adversary_groups",
    ]
    assert all((OLD_RUNS / f.stem).is_dir() for f in FIXTURES)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_old_run_folder_resumes_and_evaluates(fixture: Path, tmp_path: Path):
    pinned = json.loads(fixture.read_text())
    resumed = resume_old_run(OLD_RUNS / fixture.stem, pinned["resume_total_timesteps"], tmp_path)
    found = differences(fixture.stem, {"runs": pinned["runs"], "eval": pinned["eval"]}, resumed, REL, ABS)
    assert not found, f"{len(found)} results differ from {fixture.name}:\n" + "\n".join(found[:40])
