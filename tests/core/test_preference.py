"""Preference losses (DPO, cDPO, IPO, Bradley-Terry) against hand-computed values."""

import math

import pytest
import torch

from fastppo.core.preference import bradley_terry_loss, dpo_loss

# Two pairs, beta = 0.5. h = (log pi_w - log ref_w) - (log pi_l - log ref_l)
#   = [(-1+2) - (-3+2), (-2+2) - (-1+2)] = [2, -1], so the margins beta * h are [1.0, -0.5].
POLICY_CHOSEN, POLICY_REJECTED = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
REF = torch.tensor([-2.0, -2.0])


def losses(**kwargs):
    return dpo_loss(POLICY_CHOSEN, POLICY_REJECTED, REF, REF, beta=0.5, **kwargs)


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def test_sigmoid_dpo_loss() -> None:
    loss, metrics = losses(loss="sigmoid")
    assert float(loss) == pytest.approx((softplus(-1.0) + softplus(0.5)) / 2)  # -log sigmoid(m) = softplus(-m)
    assert float(loss) == pytest.approx(0.6436693, abs=1e-7)
    assert float(metrics["margin"]) == pytest.approx(0.25)
    assert float(metrics["accuracy"]) == 0.5
    assert float(metrics["rewards_chosen"]) == pytest.approx(0.5 * (1.0 + 0.0) / 2)
    assert float(metrics["rewards_rejected"]) == pytest.approx(0.5 * (-1.0 + 1.0) / 2)


def test_conservative_dpo_loss() -> None:
    loss, _ = losses(loss="cdpo", label_smoothing=0.1)
    by_hand = [0.9 * softplus(-1.0) + 0.1 * softplus(1.0), 0.9 * softplus(0.5) + 0.1 * softplus(-0.5)]
    assert float(loss) == pytest.approx(sum(by_hand) / 2)
    # softplus(-m) - softplus(m) = -m, so cDPO = DPO + eps * mean margin = 0.6436693 + 0.1 * 0.25
    assert float(loss) == pytest.approx(0.6686693, abs=1e-7)
    assert float(losses(loss="cdpo", label_smoothing=0.0)[0]) == pytest.approx(float(losses(loss="sigmoid")[0]))


def test_ipo_loss() -> None:
    loss, _ = losses(loss="ipo")
    # (h - 1 / (2 beta))^2 with 1 / (2 * 0.5) = 1: (2 - 1)^2 = 1 and (-1 - 1)^2 = 4
    assert float(loss) == pytest.approx(2.5)


def test_ipo_gradient_vanishes_at_its_target_margin() -> None:
    """IPO's optimum is h = 1 / (2 beta), where DPO's gradient would still push the margin up."""
    chosen = torch.tensor([0.5], requires_grad=True)
    loss, _ = dpo_loss(chosen, torch.tensor([-0.5]), torch.tensor([0.0]), torch.tensor([0.0]), beta=0.5, loss="ipo")
    loss.backward()
    assert loss.item() == 0.0 and chosen.grad.item() == 0.0


def test_bradley_terry_loss() -> None:
    loss, metrics = bradley_terry_loss(torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1.0, 0.0, 3.0]))
    # margins [1, 0, -2]: softplus(-1) + log 2 + softplus(2)
    assert float(loss) == pytest.approx((softplus(-1.0) + math.log(2.0) + softplus(2.0)) / 3)
    assert float(loss) == pytest.approx(1.0444456, abs=1e-7)
    assert float(metrics["accuracy"]) == pytest.approx(1 / 3), "a tie is not a correct ordering"
    assert float(metrics["margin"]) == pytest.approx(-1 / 3)


def test_ipo_regresses_per_token_means_but_logs_margins_on_sums_like_dpo() -> None:
    """Summed log-ratios [2, 0] of 2-token chosen and [-1, 1] of 1-token rejected completions: IPO's
    per-token h = [2/2 + 1, 0/2 - 1] = [2, -1], loss ((2 - 1)^2 + (-1 - 1)^2) / 2. The logged rewards
    and margin stay on the sums, as DPO's; the per-token margin is logged apart."""
    chosen, rejected = torch.tensor([2.0, 0.0]), torch.tensor([-1.0, 1.0])  # log-ratios summed, reference 0
    zeros = torch.zeros(2)
    loss, metrics = dpo_loss(
        chosen,
        rejected,
        zeros,
        zeros,
        beta=0.5,
        loss="ipo",
        lengths=(torch.tensor([2.0, 2.0]), torch.tensor([1.0, 1.0])),
    )
    assert float(loss) == pytest.approx((1.0 + 4.0) / 2)
    assert float(metrics["margin"]) == pytest.approx(0.5 * ((2 + 1) + (0 - 1)) / 2)  # beta * summed h: 1.0
    assert float(metrics["margin_per_token"]) == pytest.approx(0.5 * (2 - 1) / 2)  # beta * per-token h: 0.25
    _, dpo_metrics = dpo_loss(chosen, rejected, zeros, zeros, beta=0.5)
    assert float(dpo_metrics["margin"]) == float(metrics["margin"]) and "margin_per_token" not in dpo_metrics
