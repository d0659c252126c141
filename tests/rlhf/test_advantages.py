"""Rewards, KL and advantages for language models, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from fastppo.core import adaptive_kl_beta, kl_estimate, proportional_kl_beta
from fastppo.rlhf.config import PPOConfig
from fastppo.rlhf.rewards import (
    gae_advantages,
    grpo_advantages,
    last_token_index,
    rloo_advantages,
    sequence_advantages,
    shape_scores,
    token_kl,
    token_rewards,
    whiten_advantages,
)
from fastppo.rlhf.tokens import mask_after_eos
from fastppo.rlhf.trainer import compute_advantages
from tests.support.tiny_lm import synthetic_rollout

EOS = 1


def test_mask_keeps_the_first_eos_and_drops_everything_after() -> None:
    response = torch.tensor([[5, 6, EOS, 7, EOS], [5, 6, 7, 8, 9], [EOS, 4, 4, 4, 4]])
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(mask_after_eos(response, EOS), expected)
    assert last_token_index(expected).tolist() == [2, 4, 0]


def test_score_lands_on_the_last_real_token_and_kl_penalises_every_token() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    logprobs = torch.tensor([[-1.0, -2.0, -9.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-1.0, -1.0, -2.0]])
    rewards, kl = token_rewards(torch.tensor([10.0, 20.0]), logprobs, ref, mask, kl_coef=0.1, estimator="k1")
    assert torch.allclose(kl, torch.tensor([[0.5, -1.0, 0.0], [0.0, 0.0, 1.0]]))
    assert torch.allclose(rewards, torch.tensor([[-0.05, 0.1 + 10.0, 0.0], [0.0, 0.0, -0.1 + 20.0]]))


def test_gae_over_tokens_terminates_at_the_last_real_token() -> None:
    # one completion of 2 real tokens then padding; gamma=1, lambda=1: A_t = sum of later rewards - V_t
    rewards = torch.tensor([[1.0, 2.0, 100.0]])
    values = torch.tensor([[0.5, 0.25, 100.0]])
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    advantages, returns = gae_advantages(rewards * mask, values, mask, gamma=1.0, gae_lambda=1.0)
    assert torch.allclose(advantages, torch.tensor([[3.0 - 0.5, 2.0 - 0.25, 0.0]]))
    assert torch.allclose(returns, torch.tensor([[3.0, 2.0, 0.0]]))
    # lambda=0: one-step TD errors, bootstrapping from the next token's value only inside the completion
    advantages, _ = gae_advantages(rewards * mask, values, mask, gamma=0.9, gae_lambda=0.0)
    assert torch.allclose(advantages, torch.tensor([[1.0 + 0.9 * 0.25 - 0.5, 2.0 - 0.25, 0.0]]))


def test_grpo_normalises_within_each_prompt_group() -> None:
    returns = torch.tensor([1.0, 3.0, 0.0, 0.0, 10.0, 20.0])  # 3 prompts x 2 samples
    std = torch.tensor([1.0, 3.0]).std()  # unbiased std of a pair {a, b} = |a - b| / sqrt(2)
    expected = torch.tensor(
        [-1.0 / (std + 1e-4), 1.0 / (std + 1e-4), 0.0, 0.0, -5.0 / (5 * std + 1e-4), 5.0 / (5 * std + 1e-4)]
    )
    assert torch.allclose(grpo_advantages(returns, 2), expected)


def test_rloo_subtracts_the_mean_of_the_other_samples() -> None:
    returns = torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 3.0])  # 2 prompts x 3 samples
    expected = torch.tensor([1 - 4.0, 2 - 3.5, 6 - 1.5, 0 - 1.5, 0 - 1.5, 3 - 0.0])
    assert torch.allclose(rloo_advantages(returns, 3), expected)


def test_critic_free_advantage_is_broadcast_to_valid_tokens_with_the_kl_in_the_return() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    kl = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    adv = sequence_advantages("rloo", torch.tensor([1.0, 1.0]), kl, kl_coef=0.5, mask=mask, group_size=2)
    # returns: 1 - 0.5 * 2 = 0 and 1 - 0 = 1 -> RLOO advantages -1 and +1
    assert torch.allclose(adv, torch.tensor([[-1.0, -1.0, 0.0], [1.0, 0.0, 0.0]]))


def _rollout_with_kl(batch: int = 4, length: int = 5):
    """Sampled tokens whose policy and reference log-probs differ: a non-zero per-token KL."""
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[1, 3:] = False
    logprobs = torch.where(mask, -torch.rand(batch, length, generator=g), 0.0)
    ref_logprobs = torch.where(mask, -torch.rand(batch, length, generator=g), 0.0)
    return synthetic_rollout(logprobs, ref_logprobs, mask)


def test_grpo_group_with_equal_scores_gets_zero_advantages() -> None:
    """GRPO's KL is a loss term (DeepSeekMath, TRL): in the return, the KL noise of a group whose
    scores are all equal would be blown up by 1/std into advantages of order 1."""
    rollout = _rollout_with_kl()
    scores = torch.full((4,), 0.7)
    ppo = PPOConfig(estimator="grpo", num_generations=4)
    advantages, _ = compute_advantages(rollout, scores, kl_coef=0.1, ppo=ppo)
    assert token_kl(rollout.logprobs, rollout.ref_logprobs, rollout.response_mask, "k1").abs().sum() > 0.1
    assert torch.equal(advantages, torch.zeros_like(advantages))
    # the reward-side form, kept as an explicit option, normalises score - kl_coef * KL
    advantages, _ = compute_advantages(
        rollout, scores, kl_coef=0.1, ppo=PPOConfig(estimator="grpo", num_generations=4, kl_in="reward")
    )
    assert advantages[rollout.response_mask].abs().min() > 0.1


def test_advantage_whitening_ignores_masked_tokens() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    adv = torch.tensor([[1.0, 2.0, 1e6], [3.0, 4.0, 5.0]])
    white = whiten_advantages(adv, mask)
    valid = white[mask]
    assert valid.mean().abs() < 1e-6 and (valid.std() - 1).abs() < 1e-5
    assert white[0, 2] == 0


def test_score_shaping() -> None:
    scores, has_eos = torch.tensor([1.0, 5.0, -5.0]), torch.tensor([True, False, True])
    assert torch.allclose(shape_scores(scores, has_eos, 2.0, None, False), torch.tensor([1.0, 3.0, -5.0]))
    assert torch.allclose(shape_scores(scores, has_eos, None, 2.0, False), torch.tensor([1.0, 2.0, -2.0]))
    white = shape_scores(scores, has_eos, None, None, True)
    # std 1 with the mean kept (TRL's whiten_rewards): (s - 1/3) / std + 1/3
    assert torch.allclose(white, (scores - scores.mean()) / scores.std() + scores.mean(), atol=1e-6)
    assert white.mean() == pytest.approx(1 / 3) and (white.std() - 1).abs() < 1e-5


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_approach_exact_kl_on_small_categoricals(estimator: str) -> None:
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, generator=g), 0)
    q = torch.softmax(torch.randn(6, generator=g) * 0.3, 0)
    exact = float((p * (p / q).log()).sum())
    samples = torch.multinomial(p, 200_000, replacement=True, generator=g)
    estimate = float(kl_estimate(p.log()[samples], q.log()[samples], estimator).mean())
    # k1 and k3 are unbiased; k2 is biased but close when p and q are near (Schulman 2020)
    assert estimate == pytest.approx(exact, rel=0.03 if estimator != "k2" else 0.25)


def test_kl_controllers_move_beta_toward_the_target() -> None:
    assert adaptive_kl_beta(0.1, kl=1.0, target=0.1) > 0.1
    assert adaptive_kl_beta(0.1, kl=0.01, target=0.1) < 0.1
    assert proportional_kl_beta(0.1, kl=12.0, target=6.0, n_steps=64, horizon=10000) > 0.1
    assert proportional_kl_beta(0.1, kl=1.0, target=6.0, n_steps=64, horizon=10000) < 0.1


def test_rloo_keeps_a_short_good_answer_positive_by_default() -> None:
    """Two prompts, two answers each. Prompt 0: a 1-token answer scores 0.55, a 10-token one 0.45
    (advantages +-0.1). Prompt 1: a 20-token answer scores 1, a 1-token one 0 (+-1). Whitened over
    tokens, the mean is (0.1 - 1 + 20 - 1) / 32 = 0.57 and the short good answer's +0.1 would turn
    negative; by default RLOO's advantages are the leave-one-out differences as they are."""
    lengths = [1, 10, 20, 1]
    mask = torch.tensor([[t < n for t in range(20)] for n in lengths])
    logprobs = torch.where(mask, -1.0, 0.0)
    rollout = synthetic_rollout(logprobs, logprobs.clone(), mask)  # no KL
    scores = torch.tensor([0.55, 0.45, 1.0, 0.0])
    advantages, _ = compute_advantages(rollout, scores, kl_coef=0.1, ppo=PPOConfig(estimator="rloo", num_generations=2))
    assert torch.allclose(advantages[:, 0], torch.tensor([0.1, -0.1, 1.0, -1.0]))
    whitened, _ = compute_advantages(
        rollout, scores, kl_coef=0.1, ppo=PPOConfig(estimator="rloo", num_generations=2, whiten_advantages=True)
    )
    assert whitened[0, 0] < 0, "the opt-in token whitening still does what it says"
