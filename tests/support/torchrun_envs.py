"""Envs that go wrong on torchrun's rank 1 only, for the error-reporting tests of tests/training/test_distributed.py
(``tests.support.torchrun_envs:NaNRewardOnRank1Env``)."""

from __future__ import annotations

import os
import time

import numpy as np

from tests.support.nonfinite_envs import _GoesBad

STALL_S = 8.0
"""How long rank 1 stalls in an env step, once: longer than the tests' --collective-timeout."""


class _Rank1Fault(_GoesBad):
    """``nonfinite_envs``'s env, going wrong after its ``BAD_AFTER`` steps on rank 1 only."""

    def __init__(self, render_mode=None):
        super().__init__(render_mode)
        self.faulty = os.environ.get("RANK") == "1"

    def spoil(self, obs: np.ndarray, reward: float) -> float:
        return self.fault(reward) if self.faulty else reward

    def fault(self, reward: float) -> float:
        raise NotImplementedError


class NaNRewardOnRank1Env(_Rank1Fault):
    def fault(self, reward: float) -> float:
        return float("nan")


class StallOnRank1Env(_Rank1Fault):
    stalled = False  # once per process, not once per env

    def fault(self, reward: float) -> float:
        if not StallOnRank1Env.stalled:
            StallOnRank1Env.stalled = True
            time.sleep(STALL_S)
        return reward
