"""Generation, token layout and masking: padding and post-EOS tokens change nothing."""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import pytest
import torch

from fastppo.core import ppo_loss
from fastppo.rlhf.config import ModelConfig, PPOConfig, SamplingConfig, validate_ppo
from fastppo.rlhf.models import load_models
from fastppo.rlhf.rewards import gae_advantages, token_rewards
from fastppo.rlhf.rollout import collect_rollout
from fastppo.rlhf.tokens import encode_prompts, forward_tokens

PROMPTS = ["a", "hello there", "abc"]


def _models(tiny_model, critic="shared"):
    torch.manual_seed(0)
    models = load_models(ModelConfig(model=str(tiny_model)), critic=critic)
    # a non-zero value head so values are a real function of the hidden states
    torch.nn.init.normal_(models.critic.head.weight)
    return models


def _rollout(models, seed=0):
    torch.manual_seed(seed)
    return collect_rollout(
        models, PROMPTS, 2, SamplingConfig(max_new_tokens=10), micro_batch_size=2, autocast=nullcontext
    )


def test_rollout_layout(tiny_model) -> None:
    models = _models(tiny_model)
    r = _rollout(models)
    pad, eos = models.tokenizer.pad_token_id, models.tokenizer.eos_token_id
    assert r.query.shape[0] == r.response.shape[0] == 6 and r.prompts == [p for p in PROMPTS for _ in range(2)]
    assert (r.query[:, -1] != pad).all(), "prompts are left-padded: the last column is always a real token"
    assert (r.response[~r.response_mask] == pad).all()
    for row, mask, has_eos in zip(r.response, r.response_mask, r.has_eos):
        valid = row[mask]
        assert bool(has_eos) == bool((valid == eos).any())
        if has_eos:
            assert valid[-1] == eos and (valid[:-1] != eos).all(), "the EOS itself is kept, nothing after it"
    assert torch.equal(r.logprobs, r.ref_logprobs), "before training the reference is the policy"


def test_old_logprobs_equal_the_update_forward_so_the_first_ratio_is_one(tiny_model) -> None:
    models = _models(tiny_model)
    r = _rollout(models)
    idx = torch.tensor([5, 0])  # a micro-batch of another composition, as after shuffling
    new = forward_tokens(
        models.policy, models.critic, r.query[idx], r.query_mask[idx], r.response[idx], r.response_mask[idx]
    )
    m = r.response_mask[idx]
    assert torch.allclose(new.logprobs[m], r.logprobs[idx][m], atol=1e-6)
    assert torch.allclose(new.values[m], r.values[idx][m], atol=1e-6)


def test_left_padding_does_not_change_the_scores_of_real_tokens(tiny_model) -> None:
    models = _models(tiny_model)
    tok = models.tokenizer
    response = torch.tensor([[5, 6, 7]])
    alone_q, alone_m = encode_prompts(tok, ["ab"], 16, torch.device("cpu"))
    batch_q, batch_m = encode_prompts(tok, ["ab", "a much longer prompt"], 16, torch.device("cpu"))
    assert (batch_m[0] == 0).any()
    mask = torch.ones(1, 3, dtype=torch.bool)
    alone = forward_tokens(models.policy, models.critic, alone_q, alone_m, response, mask)
    padded = forward_tokens(models.policy, models.critic, batch_q[:1], batch_m[:1], response, mask)
    assert torch.allclose(alone.logprobs, padded.logprobs, atol=1e-5)
    assert torch.allclose(alone.values, padded.values, atol=1e-5)


def test_padding_and_post_eos_tokens_change_no_loss_or_statistic(tiny_model) -> None:
    models = _models(tiny_model)
    r = _rollout(models)
    g = torch.Generator().manual_seed(1)
    vocab = len(models.tokenizer)
    noisy_query = torch.where(r.query_mask.bool(), r.query, torch.randint(0, vocab, r.query.shape, generator=g))
    noisy_response = torch.where(r.response_mask, r.response, torch.randint(0, vocab, r.response.shape, generator=g))
    assert not torch.equal(noisy_query, r.query) and not torch.equal(noisy_response, r.response)
    mask = r.response_mask

    def stats(query, response, garbage: float):
        # garbage only where the mask is false: in log-probs, ref log-probs and values
        out = forward_tokens(models.policy, models.critic, query, r.query_mask, response, mask)

        def fill(x):
            return torch.where(mask, x, torch.full_like(x, garbage))

        rewards, kl = token_rewards(torch.ones(6), out.logprobs, fill(r.ref_logprobs), mask, 0.1, "k3")
        adv, ret = gae_advantages(rewards, fill(out.values), mask, 1.0, 0.95)
        loss, metrics = ppo_loss(
            out.logprobs,
            fill(r.logprobs),
            adv,
            out.entropy,
            out.values,
            fill(r.values),
            ret,
            clip_coef=0.2,
            ent_coef=0.01,
            vf_coef=0.1,
            mask=mask,
        )
        return {"loss": loss, "kl": kl.sum(), "adv": adv, **metrics}

    clean, noisy = stats(r.query, r.response, 0.0), stats(noisy_query, noisy_response, -7.0)
    for key in clean:
        assert torch.allclose(clean[key], noisy[key], atol=1e-5), key


@pytest.mark.parametrize("top_k, top_p, warns", [(0, 1.0, False), (5, 1.0, True), (0, 0.9, True)])
def test_truncated_sampling_warns_that_log_probs_use_the_full_distribution(top_k, top_p, warns) -> None:
    """Old, new and reference log-probs are scored under the full tempered distribution (a token
    outside the reference's own top-k would have an infinite KL); top-k/top-p sampling is allowed
    but said to differ from what is scored."""
    config = (ModelConfig(model="gpt2"), SamplingConfig(top_k=top_k, top_p=top_p), PPOConfig())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        validate_ppo(*config)
    assert len(caught) == int(warns)
    assert all("full tempered distribution" in str(w.message) for w in caught)
