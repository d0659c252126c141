"""Masked statistics, advantage normalisation and explained variance."""

import math

import numpy as np
import pytest
import torch

from fastppo.core import (
    aggregate_loss,
    explained_variance,
    masked_mean,
    masked_var,
    normalize_advantages,
    policy_loss,
    reference_kl_penalty,
)
from fastppo.core.masked import mean_std

F64 = torch.float64


def make(seed=0, shape=(6, 7), p_valid=0.6):
    g = torch.Generator().manual_seed(seed)
    x = 3.0 + 2.0 * torch.randn(*shape, generator=g, dtype=F64)
    mask = torch.rand(*shape, generator=g) < p_valid
    return x, mask


def test_masked_mean_and_var_equal_plain_ones_on_the_valid_subset():
    x, mask = make()
    valid = x[mask].tolist()
    mean = sum(valid) / len(valid)
    var = sum((v - mean) ** 2 for v in valid) / (len(valid) - 1)
    assert masked_mean(x, mask).item() == pytest.approx(mean)
    assert masked_var(x, mask).item() == pytest.approx(var)
    torch.testing.assert_close(masked_var(x, mask), torch.var(x[mask]))
    torch.testing.assert_close(masked_mean(x, mask), x[mask].mean())


def test_no_mask_is_plain_mean_and_unbiased_var():
    x, _ = make(1)
    assert masked_mean(x).item() == pytest.approx(np.mean(x.numpy()))
    assert masked_var(x).item() == pytest.approx(np.var(x.numpy(), ddof=1))


def test_float_mask_works_like_bool():
    x, mask = make(2)
    torch.testing.assert_close(masked_var(x, mask.to(F64)), masked_var(x, mask))
    torch.testing.assert_close(masked_mean(x, mask.float()), masked_mean(x, mask))


def test_normalize_advantages_mean_zero_std_one_on_valid_entries():
    x, mask = make(3)
    x = torch.where(mask, x, torch.full_like(x, 1e6))  # wild values where invalid
    out = normalize_advantages(x, mask)
    valid = out[mask]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-10)
    assert valid.std().item() == pytest.approx(1.0, rel=1e-6)
    # the valid outputs are an affine map of the inputs, independent of the invalid ones
    ref = (x[mask] - x[mask].mean()) / x[mask].std()
    torch.testing.assert_close(valid, ref, rtol=1e-6, atol=1e-8)


def test_normalize_advantages_without_mask():
    g = torch.Generator().manual_seed(4)
    x = 5.0 + 10.0 * torch.randn(257, generator=g)
    out = normalize_advantages(x)
    assert out.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert out.std().item() == pytest.approx(1.0, rel=1e-5)
    # constant advantages do not divide by zero
    assert torch.isfinite(normalize_advantages(torch.ones(8))).all()


def test_explained_variance_by_hand():
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(returns.clone(), returns) == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), returns) == pytest.approx(0.0)  # constant mean
    assert explained_variance(torch.full((4,), -7.0), returns) == pytest.approx(0.0)  # any constant
    # values [1, 3, 3, 5] -> R - V = [0, -1, 0, -1]
    # Var[R] = 5/3, Var[R - V] = 1/3 -> 1 - (1/3)/(5/3) = 0.8
    assert explained_variance(torch.tensor([1.0, 3.0, 3.0, 5.0]), returns) == pytest.approx(0.8)
    # worse than a constant is negative: V = -R -> Var[2R] = 4 Var[R] -> -3
    assert explained_variance(-returns, returns) == pytest.approx(-3.0)


def test_explained_variance_masked_and_degenerate():
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, -100.0])
    mask = torch.tensor([True, True, True, True, False])
    assert explained_variance(values, returns, mask) == pytest.approx(1.0)
    assert math.isnan(explained_variance(torch.zeros(3), torch.ones(3)))


def test_explained_variance_along_a_dim_is_each_slices_own():
    # A stack of seeds: one value per row, each what the row alone gives (row 2: returns that do not vary).
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 100.0], [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 2.0, 2.0, 2.0, 9.0]])
    values = torch.tensor([[1.0, 3.0, 3.0, 5.0, 0.0], [5.0, 4.0, 3.0, 2.0, 1.0], [0.0, 1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[True, True, True, True, False], [True] * 5, [True, True, True, True, False]])
    along = explained_variance(values, returns, mask, dim=-1)
    assert along[:2] == pytest.approx([0.8, 1.0 - 10.0 / 2.5])  # R - V of row 1: [-4, -2, 0, 2, 4], Var 10 against 2.5
    assert math.isnan(along[2])
    assert along[:2] == pytest.approx(
        [explained_variance(v, r, m) for v, r, m in zip(values[:2], returns[:2], mask[:2])], abs=0
    )


def test_non_finite_values_in_masked_entries_do_not_leak():
    x = torch.tensor([1.0, 3.0, float("inf"), float("nan")])
    mask = torch.tensor([True, True, False, False])
    assert masked_mean(x, mask).item() == 2.0
    assert masked_var(x, mask).item() == 2.0


def test_normalize_advantages_from_moments_summed_over_parts_equals_normalising_the_joined_batch():
    # Two "ranks" hold halves of one minibatch; summing their (count, sum, sum of squares) is what
    # the all-reduce of fastppo.training.update.rank_shares does.
    x, mask = make(5, shape=(40,))
    for valid in (mask, torch.ones_like(mask)):
        halves = [slice(0, 20), slice(20, 40)]
        moments = sum(
            torch.stack([valid[h].sum(), x[h][valid[h]].sum(), x[h][valid[h]].square().sum()]) for h in halves
        )
        split = torch.cat([normalize_advantages(x[h], valid[h], moments=moments) for h in halves])
        torch.testing.assert_close(split[valid], normalize_advantages(x, valid)[valid], rtol=1e-9, atol=1e-9)
    mean, std = mean_std(moments)
    torch.testing.assert_close(torch.stack([mean, std]), torch.stack([x.mean(), x.std()]))


def test_normalize_advantages_along_dim_normalises_each_slice_over_its_valid_entries():
    adv = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, -4.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    out = normalize_advantages(adv, mask, eps=0.0, dim=-1)
    # row 0: mean 2, unbiased std 1; row 1: mean 0, std sqrt(32)
    assert torch.allclose(out[0, :3], torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64))
    assert torch.allclose(out[1, :2], torch.tensor([4.0, -4.0], dtype=torch.float64) / 32**0.5)
    unmasked = normalize_advantages(adv, eps=0.0, dim=-1)
    for s in range(2):
        assert torch.allclose(unmasked[s], normalize_advantages(adv[s], eps=0.0))


def test_loss_aggregation_by_hand() -> None:
    # Two sequences: [1, 2, 3] (3 tokens) and [6] (1 token, then padding holding garbage).
    x = torch.tensor([[1.0, 2.0, 3.0], [6.0, 1e6, -1e6]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    assert aggregate_loss(x, mask, "token").item() == pytest.approx((1 + 2 + 3 + 6) / 4)  # 3.0: the long one weighs 3/4
    assert aggregate_loss(x, mask, "sequence").item() == pytest.approx((2.0 + 6.0) / 2)  # 4.0: each sequence 1/2
    assert aggregate_loss(x, mask, "constant", max_length=4).item() == pytest.approx(12 / (2 * 4))  # 1.5
    with pytest.raises(ValueError, match="max_length"):
        aggregate_loss(x, mask, "constant")


def test_loss_aggregation_without_a_mask_counts_every_token() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [6.0, 4.0, 8.0]])
    assert aggregate_loss(x, None, "token").item() == pytest.approx(24 / 6)
    assert aggregate_loss(x, None, "sequence").item() == pytest.approx((2.0 + 6.0) / 2)
    assert aggregate_loss(x, None, "constant", max_length=4).item() == pytest.approx(24 / (2 * 4))  # 3.0


def test_policy_loss_aggregates_its_mean_per_sequence_on_request() -> None:
    """At ratio 1 the clipped surrogate is -A per token: sequence aggregation gives a 1-token
    completion the weight of a 3-token one; the metrics stay means over tokens."""
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-3.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    zeros = torch.zeros(2, 3)
    by_token, metrics = policy_loss(zeros, zeros, advantages, 0.2, mask)
    by_sequence, _ = policy_loss(zeros, zeros, advantages, 0.2, mask, aggregation="sequence")
    assert by_token.item() == pytest.approx(-(1 + 1 + 1 - 3) / 4) and by_sequence.item() == pytest.approx(-(1 - 3) / 2)
    assert metrics["ratio_mean"].item() == 1.0
    kl, _ = reference_kl_penalty(
        torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.25, 0.1, 0.1]])),
        torch.log(torch.full((2, 3), 0.5)),
        1.0,
        mask,
        aggregation="sequence",
    )
    # k3 per token: r - log r - 1 with r = ref / new: 0 for the first row; 2 - log 2 - 1 for the second's one token
    assert kl.item() == pytest.approx((0.0 + (1 - math.log(2))) / 2)
