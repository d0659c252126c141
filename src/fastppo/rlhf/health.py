"""Warnings for the two classic ways an RLHF run goes wrong while its reward looks fine, and the
stop for the one that cannot go on: a NaN or infinite loss or reward."""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Mapping

import torch
from torch import Tensor

from fastppo.errors import FastPPOError


class RLHFWarning(UserWarning):
    """A training run shows signs of divergence or reward hacking."""


class HealthMonitor:
    """Watches reward and KL to the reference over a window of steps; warns once per kind.

    - KL blow-up: the policy is far from the reference (per-completion KL above ``kl_warn``).
    - Reward hacking: the reward went up over the window while the KL more than doubled to above
      half of ``kl_warn``; the policy may be exploiting the reward rather than improving.
    """

    def __init__(self, kl_warn: float, window: int = 10):
        self.kl_warn = kl_warn
        self.history: deque[tuple[float, float]] = deque(maxlen=window)
        self.warned: set[str] = set()

    def check(self, step: int, reward: float, kl: float) -> None:
        self.history.append((reward, kl))
        if kl > self.kl_warn:
            self._warn(
                "kl",
                f"step {step}: KL to the reference is {kl:.2f} nats per completion (> {self.kl_warn}): "
                "lower --learning-rate, raise --kl-coef or set --kl-target",
            )
        first_reward, first_kl = self.history[0]
        if (
            len(self.history) == self.history.maxlen
            and reward > first_reward
            and kl > max(2.0 * first_kl, 0.5 * self.kl_warn)
        ):
            self._warn(
                "hacking",
                f"step {step}: reward rose ({first_reward:.3g} -> {reward:.3g}) while KL to the reference grew "
                f"({first_kl:.3g} -> {kl:.3g}): possible reward hacking, read some completions",
            )

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self.warned:
            self.warned.add(kind)
            warnings.warn(message, RLHFWarning, stacklevel=3)


def check_finite(step: int, values: Mapping[str, float | Tensor], fix: str, ignore: tuple[str, ...] = ()) -> None:
    """Stop at the first step whose ``values`` (losses, rewards, gradient norm) hold a NaN or an
    infinity, naming them, before it is checkpointed: training on would only spread the NaN into
    the weights (and then crash in sampling). ``fix``: what to change; ``ignore``: names that may
    be infinite (the gradient norm of a step that loss scaling skips)."""
    bad = [
        name
        for name, value in values.items()
        if name not in ignore and not torch.isfinite(torch.as_tensor(value)).all()
    ]
    if bad:
        raise FastPPOError(f"training stopped at step {step}: {', '.join(bad)} became NaN/Inf; {fix}")
