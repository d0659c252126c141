"""Action heads against torch.distributions, sampling frequencies and invalid-action masking."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import distributions as D

from fastppo.errors import FastPPOError
from fastppo.policies.distributions import (
    BernoulliHead,
    CategoricalHead,
    GaussianHead,
    MultiCategoricalHead,
    make_action_head,
)

F64 = torch.float64
# chi-square critical values at p = 1e-3 by degrees of freedom
CHI2_CRIT = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}


def chi_square(counts, probs):
    n = sum(counts)
    return sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs) if p > 0)


def test_categorical_logprob_entropy_match_torch():
    torch.manual_seed(0)
    head = CategoricalHead(8, 5)
    logits = 2.0 * torch.randn(64, 5, dtype=F64)
    action = torch.randint(0, 5, (64,))
    logprob, entropy = head.logprob_entropy(logits, action)
    ref = D.Categorical(logits=logits)
    torch.testing.assert_close(logprob, ref.log_prob(action))
    torch.testing.assert_close(entropy, ref.entropy())


def test_multicategorical_logprob_entropy_match_torch():
    torch.manual_seed(1)
    nvec = [3, 2, 4]
    head = MultiCategoricalHead(8, nvec)
    params = torch.randn(32, sum(nvec), dtype=F64)
    action = torch.stack([torch.randint(0, n, (32,)) for n in nvec], dim=-1)
    logprob, entropy = head.logprob_entropy(params, action)
    dists = [D.Categorical(logits=lg) for lg in torch.split(params, nvec, dim=-1)]
    torch.testing.assert_close(logprob, sum(d.log_prob(action[:, i]) for i, d in enumerate(dists)))
    torch.testing.assert_close(entropy, sum(d.entropy() for d in dists))


def test_bernoulli_logprob_entropy_match_torch():
    torch.manual_seed(2)
    head = BernoulliHead(8, 6)
    params = 3.0 * torch.randn(32, 6, dtype=F64)
    action = (torch.rand(32, 6) < 0.5).to(F64)
    logprob, entropy = head.logprob_entropy(params, action)
    ref = D.Bernoulli(logits=params)
    torch.testing.assert_close(logprob, ref.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, ref.entropy().sum(-1))


def test_gaussian_logprob_entropy_match_torch():
    torch.manual_seed(3)
    head = GaussianHead(8, 3).double()
    with torch.no_grad():
        head.log_std.copy_(torch.tensor([-0.5, 0.0, 0.7]))
    mean = torch.randn(32, 3, dtype=F64)
    action = mean + 2.0 * torch.randn(32, 3, dtype=F64)
    logprob, entropy = head.logprob_entropy(mean, action)
    ref = D.Normal(mean, head.log_std.exp().expand_as(mean))
    torch.testing.assert_close(logprob, ref.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, ref.entropy().sum(-1))
    # log_std receives gradient through both terms (it is learned)
    (logprob.mean() + entropy.mean()).backward()
    assert head.log_std.grad is not None and head.log_std.grad.abs().sum() > 0


def test_sample_returns_the_logprob_of_the_sampled_action():
    torch.manual_seed(4)
    cases = [
        (CategoricalHead(4, 5), torch.randn(16, 5)),
        (MultiCategoricalHead(4, [3, 4]), torch.randn(16, 7)),
        (BernoulliHead(4, 3), torch.randn(16, 3)),
        (GaussianHead(4, 2), torch.randn(16, 2)),
    ]
    for head, params in cases:
        action, logprob = head.sample(params)
        expected, _ = head.logprob_entropy(params, action)
        torch.testing.assert_close(logprob, expected)


def test_categorical_sampling_frequencies():
    torch.manual_seed(5)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    n = 20_000
    logits = probs.log().expand(n, 4)
    actions = CategoricalHead(1, 4).sample(logits)[0]
    counts = torch.bincount(actions, minlength=4).tolist()
    assert chi_square(counts, probs.tolist()) < CHI2_CRIT[3]
    # and the test has power: a shifted distribution is rejected
    assert chi_square(counts, [0.15, 0.2, 0.3, 0.35]) > CHI2_CRIT[3]


def test_multicategorical_sampling_frequencies():
    torch.manual_seed(6)
    p0, p1 = [0.6, 0.3, 0.1], [0.25, 0.75]
    n = 20_000
    params = torch.cat([torch.tensor(p0).log(), torch.tensor(p1).log()]).expand(n, 5)
    actions = MultiCategoricalHead(1, [3, 2]).sample(params)[0]
    assert actions.shape == (n, 2)
    assert chi_square(torch.bincount(actions[:, 0], minlength=3).tolist(), p0) < CHI2_CRIT[2]
    assert chi_square(torch.bincount(actions[:, 1], minlength=2).tolist(), p1) < CHI2_CRIT[1]


def test_bernoulli_sampling_frequencies():
    torch.manual_seed(7)
    p = torch.tensor([0.05, 0.5, 0.8])
    n = 20_000
    actions = BernoulliHead(1, 3).sample(torch.logit(p).expand(n, 3))[0]
    assert set(actions.unique().tolist()) <= {0.0, 1.0}
    freq = actions.mean(0)
    sigma = (p * (1 - p) / n).sqrt()
    assert ((freq - p).abs() < 4 * sigma).all(), (freq, p)


def test_gaussian_sampling_moments():
    torch.manual_seed(8)
    head = GaussianHead(1, 2, init_log_std=math.log(0.5))
    mean = torch.tensor([1.0, -3.0])
    n = 20_000
    actions = head.sample(mean.expand(n, 2))[0].detach()
    # standard errors: 0.5/sqrt(n) = 0.0035 for the mean, about 0.0025 for the std
    torch.testing.assert_close(actions.mean(0), mean, atol=0.015, rtol=0)
    torch.testing.assert_close(actions.std(0), torch.tensor([0.5, 0.5]), atol=0.012, rtol=0)
    # samples are raw (unbounded), not clipped to any action bounds
    assert actions.min() < mean.min() - 1.0


def test_modes():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    torch.testing.assert_close(CategoricalHead(1, 3).mode(logits), torch.tensor([1, 0]))
    params = torch.tensor([[0.1, 2.0, -1.0, 0.5, -0.5]])
    torch.testing.assert_close(MultiCategoricalHead(1, [3, 2]).mode(params), torch.tensor([[1, 0]]))
    torch.testing.assert_close(
        BernoulliHead(1, 3).mode(torch.tensor([[0.3, -0.2, 5.0]])), torch.tensor([[1.0, 0.0, 1.0]])
    )
    mean = torch.tensor([[0.3, -0.2]])
    torch.testing.assert_close(GaussianHead(1, 2).mode(mean), mean)


# ---------------------------------------------------------------- invalid-action masking


def test_masked_actions_are_never_sampled_and_allowed_ones_keep_their_ratios():
    torch.manual_seed(9)
    probs = torch.tensor([0.4, 0.1, 0.3, 0.2])
    mask = torch.tensor([True, True, False, True])
    n = 20_000
    head = CategoricalHead(1, 4)
    actions, _ = head.sample(probs.log().expand(n, 4), mask.expand(n, 4))
    counts = torch.bincount(actions, minlength=4).tolist()
    assert counts[2] == 0
    renorm = [0.4 / 0.7, 0.1 / 0.7, 0.0, 0.2 / 0.7]
    assert chi_square(counts, renorm) < CHI2_CRIT[2]


def test_masked_logprob_is_renormalised_and_entropy_finite():
    logits = torch.tensor([[1.0, 0.5, 3.0, -0.2], [0.0, 0.0, 0.0, 0.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False, True, True, False]])
    head = CategoricalHead(1, 4)
    action = torch.tensor([0, 2])
    logprob, entropy = head.logprob_entropy(logits, action, mask)

    l0 = [1.0, 0.5, -0.2]  # row 0's allowed logits
    z0 = sum(math.exp(v) for v in l0)
    p0 = [math.exp(v) / z0 for v in l0]
    assert logprob[0].item() == pytest.approx(1.0 - math.log(z0))
    assert entropy[0].item() == pytest.approx(-sum(p * math.log(p) for p in p0))
    # row 1: uniform over two allowed actions
    assert logprob[1].item() == pytest.approx(math.log(0.5))
    assert entropy[1].item() == pytest.approx(math.log(2))

    (logprob.sum() + entropy.sum()).backward()
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad[~mask] == 0).all()


def test_mask_equals_dropping_the_invalid_actions():
    torch.manual_seed(10)
    logits = torch.randn(50, 6, dtype=F64)
    mask = torch.rand(50, 6) < 0.6
    mask[:, 0] = True
    head = CategoricalHead(1, 6)
    action = torch.multinomial(mask.double(), 1).squeeze(-1)  # an allowed action per row
    logprob, entropy = head.logprob_entropy(logits, action, mask)
    for i in range(50):
        ref = D.Categorical(logits=logits[i][mask[i]])
        allowed = mask[i].nonzero().squeeze(-1).tolist()
        assert logprob[i].item() == pytest.approx(ref.log_prob(torch.tensor(allowed.index(action[i].item()))).item())
        assert entropy[i].item() == pytest.approx(ref.entropy().item())


def test_mode_respects_the_mask():
    logits = torch.tensor([[5.0, 1.0, 2.0], [0.0, 9.0, 8.0]])
    mask = torch.tensor([[False, True, True], [True, False, True]])
    torch.testing.assert_close(CategoricalHead(1, 3).mode(logits, mask), torch.tensor([2, 2]))
    params = torch.tensor([[5.0, 1.0, 2.0, 7.0, 0.0]])
    mc_mask = torch.tensor([[False, True, True, False, True]])
    torch.testing.assert_close(MultiCategoricalHead(1, [3, 2]).mode(params, mc_mask), torch.tensor([[2, 1]]))


def test_multicategorical_mask_per_dimension():
    torch.manual_seed(11)
    n = 5_000
    head = MultiCategoricalHead(1, [3, 2])
    params = torch.zeros(n, 5)
    mask = torch.tensor([True, False, True, False, True]).expand(n, 5)
    actions, logprob = head.sample(params, mask)
    assert (actions[:, 0] != 1).all() and (actions[:, 1] == 1).all()
    assert set(actions[:, 0].unique().tolist()) == {0, 2}
    torch.testing.assert_close(logprob, torch.full((n,), math.log(0.5)))
    _, entropy = head.logprob_entropy(params, actions, mask)
    torch.testing.assert_close(entropy, torch.full((n,), math.log(2.0)))


# ---------------------------------------------------------------- spaces


@pytest.mark.parametrize(
    "space, head_type, param_dim",
    [
        (gym.spaces.Discrete(4), CategoricalHead, 4),
        (gym.spaces.MultiDiscrete([3, 5]), MultiCategoricalHead, 8),
        (gym.spaces.MultiBinary(3), BernoulliHead, 3),
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), GaussianHead, 2),
    ],
)
def test_make_action_head(space, head_type, param_dim):
    head = make_action_head(space, 7)
    assert isinstance(head, head_type)
    assert head(torch.zeros(3, 7)).shape == (3, param_dim)


@pytest.mark.parametrize(
    "space, named",
    [
        (gym.spaces.Text(8), "Text"),
        (gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32), "Box"),
        (gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), "Dict"),
        (gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))), "Tuple"),
        (gym.spaces.MultiDiscrete([[2, 3], [4, 5]]), "MultiDiscrete"),
    ],
)
def test_unsupported_action_spaces_raise_naming_the_space(space, named):
    with pytest.raises(FastPPOError, match=named):
        make_action_head(space, 4)
