"""Warning signs in PPO's diagnostics and their likely causes (seed 004's "Warning Signs")."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

STILL_KL = 1e-7
"""approx_kl per update below which a policy that still explores counts as not moving. Healthy runs
go far lower than one might think: the Acrobot preset's documented run (seed 3, 2e5 steps) learns
from -500 to -100 with approx_kl between 2e-7 and 2e-4, below 1e-5 in 2 of 3 updates and in 10 in a
row at some point, but never below 3e-6 in all of 10 in a row. A learning rate 100 times too low
(KL grows with its square) stays below 1e-7."""


@dataclass
class HealthMonitor:
    """Fed each iteration's metrics; returns each kind of warning once, when its sign shows."""

    _kl: deque = field(default_factory=lambda: deque(maxlen=5))
    _still: deque = field(default_factory=lambda: deque(maxlen=10))
    _v_loss: deque = field(default_factory=lambda: deque(maxlen=10))
    _first_entropy: float | None = None
    _warned: set[str] = field(default_factory=set)

    def check(self, metrics: dict[str, float], progress: float) -> list[str]:
        """``metrics`` uses the logged names (losses/approx_kl, ...); ``progress`` is in [0, 1]."""
        self._kl.append(metrics["losses/approx_kl"])
        clipfrac = metrics["losses/clipfrac"]
        self._v_loss.append(metrics["losses/value_loss"])
        entropy = metrics["losses/entropy"]
        if self._first_entropy is None:
            self._first_entropy = entropy
        # "Barely moves" needs more than clip_fraction 0: CleanRL's CartPole settings learn well
        # with clip_fraction 0 and approx_kl ~1e-4 for thousands of steps, Acrobot's with ~1e-6.
        # A policy that still has entropy but whose KL per update stays below STILL_KL is not
        # learning, unless it is late in the run, where an annealed learning rate brings the KL
        # to 0 by design.
        self._still.append(
            progress < 0.5
            and clipfrac == 0.0
            and metrics["losses/approx_kl"] < STILL_KL
            and entropy > 0.1 * abs(self._first_entropy)
        )
        signs = {
            "kl": (
                len(self._kl) == self._kl.maxlen and min(self._kl) > 0.05,
                f"approx_kl has stayed above 0.05 (now {self._kl[-1]:.3f}): learning rate too high or too many epochs; "
                "lower --learning-rate or --update-epochs, or set --target-kl 0.02",
            ),
            "clip_high": (
                clipfrac > 0.5,
                f"clip_fraction {clipfrac:.2f} > 0.5: updates too aggressive; lower --learning-rate or --clip-coef",
            ),
            "clip_zero": (
                len(self._still) == self._still.maxlen and all(self._still),
                f"clip_fraction stuck at 0 and approx_kl below {STILL_KL:g}: the policy barely moves; raise "
                "--learning-rate or lower --clip-coef",
            ),
            "entropy": (
                progress < 0.25
                and self._first_entropy > 0
                and entropy < 0.05 * abs(self._first_entropy)
                and abs(entropy) < 0.05,
                f"entropy collapsed to {entropy:.4f} early in training: no exploration left; raise --ent-coef",
            ),
            "value": (
                # Rising through the whole window, tenfold, and not just noise around a tiny loss.
                len(self._v_loss) == self._v_loss.maxlen
                and all(b > a for a, b in zip(self._v_loss, list(self._v_loss)[1:]))
                and self._v_loss[-1] > max(10 * self._v_loss[0], 1.0),
                f"value loss keeps rising (now {self._v_loss[-1]:.3g}): value network diverging; lower "
                "--learning-rate, set --normalize-reward true or --clip-vloss true",
            ),
        }
        warnings = []
        for name, (triggered, text) in signs.items():
            if triggered and name not in self._warned:
                self._warned.add(name)
                warnings.append(text)
        return warnings
