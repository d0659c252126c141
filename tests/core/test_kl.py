"""KL estimators against exact KL on small categoricals, and the beta controllers."""

import math

import pytest
import torch

from fastppo.core import adaptive_kl_beta, categorical_kl, kl_estimate, proportional_kl_beta

F64 = torch.float64


def test_estimators_by_hand():
    logp = torch.tensor([-1.0, -2.0, -0.3], dtype=F64)
    logq = torch.tensor([-1.5, -1.0, -0.3], dtype=F64)
    # log_ratio = log q - log p = -0.5, 1.0, 0.0
    k1 = [0.5, -1.0, 0.0]
    k2 = [0.125, 0.5, 0.0]
    k3 = [math.exp(-0.5) - 1 + 0.5, math.e - 1 - 1.0, 0.0]
    torch.testing.assert_close(kl_estimate(logp, logq, "k1"), torch.tensor(k1, dtype=F64))
    torch.testing.assert_close(kl_estimate(logp, logq, "k2"), torch.tensor(k2, dtype=F64))
    torch.testing.assert_close(kl_estimate(logp, logq, "k3"), torch.tensor(k3, dtype=F64))
    torch.testing.assert_close(kl_estimate(logp, logq), torch.tensor(k3, dtype=F64))  # default k3


def test_categorical_kl_by_hand():
    # p = (1/2, 1/4, 1/4), q = (1/4, 1/4, 1/2): KL = 1/2 log 2 + 0 + 1/4 log(1/2) = 1/4 log 2
    p = torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]], dtype=F64)
    q = torch.tensor([[0.25, 0.25, 0.5], [0.25, 0.25, 0.5]], dtype=F64)
    torch.testing.assert_close(categorical_kl(p.log(), q.log()), torch.tensor([0.25 * math.log(2), 0.0], dtype=F64))
    # the other way round: 1/4 log(1/2) + 1/2 log 2 = 1/4 log 2 as well; KL(q || p) of a different pair differs
    r = torch.tensor([[0.8, 0.1, 0.1]], dtype=F64)
    expected = 0.8 * math.log(0.8 / 0.5) + 2 * 0.1 * math.log(0.1 / 0.25)
    torch.testing.assert_close(categorical_kl(r.log(), p[:1].log()), torch.tensor([expected], dtype=F64))


def test_categorical_kl_leaves_out_masked_actions():
    # the last action is illegal: p puts 0 on it (log -inf), q a masked garbage value; over the
    # legal two, p = (0.75, 0.25), q = (0.5, 0.5)
    logp = torch.tensor([[math.log(0.75), math.log(0.25), -math.inf]], dtype=F64)
    logq = torch.tensor([[math.log(0.5), math.log(0.5), torch.finfo(F64).min]], dtype=F64)
    mask = torch.tensor([[True, True, False]])
    expected = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    torch.testing.assert_close(categorical_kl(logp, logq, mask), torch.tensor([expected], dtype=F64))


def test_k2_and_k3_are_nonnegative_k1_can_be_negative():
    g = torch.Generator().manual_seed(0)
    logp, logq = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    assert (kl_estimate(logp, logq, "k2") >= 0).all()
    assert (kl_estimate(logp, logq, "k3") >= 0).all()
    assert (kl_estimate(logp, logq, "k1") < 0).any()


def test_unknown_estimator_raises():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(x, x, "k4")


@pytest.mark.parametrize(
    "p, q",
    [([0.5, 0.3, 0.2], [0.4, 0.35, 0.25]), ([0.7, 0.2, 0.05, 0.05], [0.25, 0.25, 0.25, 0.25])],
)
def test_monte_carlo_matches_exact_kl(p, q):
    p_t, q_t = torch.tensor(p, dtype=F64), torch.tensor(q, dtype=F64)
    exact = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    g = torch.Generator().manual_seed(1)
    n = 200_000
    x = torch.multinomial(p_t, n, replacement=True, generator=g)
    logp, logq = p_t.log()[x], q_t.log()[x]
    for estimator in ("k1", "k3"):
        k = kl_estimate(logp, logq, estimator)
        stderr = k.std().item() / math.sqrt(n)
        # unbiased: within 4 standard errors of the exact value
        assert abs(k.mean().item() - exact) < 4 * stderr + 1e-12, (estimator, k.mean().item(), exact)
    # k2 is biased, but close on these pairs (its expectation is 1.4% / 1.9% off the exact KL)
    k2 = kl_estimate(logp, logq, "k2").mean().item()
    assert k2 == pytest.approx(exact, rel=0.05)
    # k3 has lower variance than k1 (Schulman 2020)
    assert kl_estimate(logp, logq, "k3").var() < kl_estimate(logp, logq, "k1").var()


def test_adaptive_kl_beta_moves_the_right_way():
    target = 0.01
    assert adaptive_kl_beta(1.0, kl=0.001, target=target) == 0.5  # too small: relax the penalty
    assert adaptive_kl_beta(1.0, kl=0.1, target=target) == 2.0  # too large: tighten
    assert adaptive_kl_beta(1.0, kl=0.01, target=target) == 1.0
    assert adaptive_kl_beta(1.0, kl=0.0145, target=target) == 1.0  # within [target/1.5, 1.5 target]
    assert adaptive_kl_beta(1.0, kl=0.0070, target=target) == 1.0
    assert adaptive_kl_beta(3.0, kl=0.0155, target=target) == 6.0
    assert adaptive_kl_beta(3.0, kl=0.0066, target=target) == 1.5


def test_proportional_kl_beta_direction_and_cap():
    beta, target = 0.2, 6.0
    # error = KL/target - 1 clipped to [-0.2, 0.2]; beta *= 1 + error * n_steps / horizon
    assert proportional_kl_beta(beta, kl=6.6, target=target, n_steps=100, horizon=100) == pytest.approx(0.2 * 1.1)
    assert proportional_kl_beta(beta, kl=5.4, target=target, n_steps=100, horizon=100) == pytest.approx(0.2 * 0.9)
    assert proportional_kl_beta(beta, kl=6.0, target=target, n_steps=100, horizon=100) == pytest.approx(beta)
    # capped at +-20% of the error
    assert proportional_kl_beta(beta, kl=600.0, target=target, n_steps=100, horizon=100) == pytest.approx(0.2 * 1.2)
    assert proportional_kl_beta(beta, kl=0.0, target=target, n_steps=100, horizon=100) == pytest.approx(0.2 * 0.8)
    # the step scales with the number of samples over the horizon
    assert proportional_kl_beta(beta, kl=600.0, target=target, n_steps=256, horizon=10_000) == pytest.approx(
        0.2 * (1 + 0.2 * 256 / 10_000)
    )
