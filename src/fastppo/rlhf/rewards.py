"""From scores to advantages: the reward function, per-token KL penalty, GAE, GRPO and RLOO.

Everything here is a pure function of tensors except :func:`load_reward`, which turns the CLI's
``--reward`` (a reward-model folder or ``module:function``) into a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from fastppo.core import compute_gae, kl_estimate, normalize_advantages
from fastppo.core.kl import KLEstimator
from fastppo.env_ids import named_object, split_spec
from fastppo.errors import FastPPOError
from fastppo.rlhf.config import looks_like_path
from fastppo.rlhf.data import Conversations
from fastppo.rlhf.models import load_reward_model
from fastppo.rlhf.tokens import positions

RewardFn = Callable[[list[str], list[str]], Sequence[float]]


def load_reward(
    spec: str, device: torch.device, batch_size: int = 16, conversations: Conversations | None = None
) -> RewardFn:
    """``spec`` is a reward-model folder (AutoModelForSequenceClassification, first logit = score,
    scoring ``prompt + completion`` re-tokenized with the folder's own tokenizer),
    ``module:function`` or ``path/to/file.py:function`` for ``reward(prompts, completions) -> list[float]``.
    ``conversations`` (``--chat-template``): a reward model whose tokenizer has a chat template
    scores the conversation rendered by it instead, the format it was trained on."""
    if Path(spec).is_dir():
        return _reward_model_fn(spec, device, batch_size, conversations)
    if split_spec(spec) is None:
        if looks_like_path(spec):
            raise FastPPOError(
                f"--reward {spec!r} does not exist: pass a reward-model folder, or module:function (e.g. "
                "mypkg.rewards:score)"
            )
        raise FastPPOError(
            f"--reward {spec!r} is neither a reward-model folder nor module:function (e.g. mypkg.rewards:score)"
        )
    fn = named_object(spec, "the reward function")
    if not callable(fn):
        raise FastPPOError(
            f"{spec!r} names no function: --reward must name reward(prompts, completions) -> list[float]"
        )
    return fn


def _reward_model_fn(path: str, device: torch.device, batch_size: int, conversations: Conversations | None) -> RewardFn:
    model, tokenizer = load_reward_model(path, device)
    chat = conversations if tokenizer.chat_template else None

    @torch.no_grad()
    def reward(prompts: list[str], completions: list[str]) -> list[float]:
        texts = (
            chat.texts(tokenizer, prompts, completions)
            if chat is not None
            else [p + c for p, c in zip(prompts, completions)]
        )
        return torch.cat(
            [score_texts(model, tokenizer, texts[i : i + batch_size], device) for i in range(0, len(texts), batch_size)]
        ).tolist()

    return reward


def score_texts(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: list[str], device: torch.device
) -> Tensor:
    """[N] first logit of a sequence classifier for each text (prompt + completion), encoded with
    the model's own tokenizer, padding side and length limit: how ``fastppo reward-model`` trains
    a reward model and how ``--reward`` scores with it."""
    enc = tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(device)
    if (
        tokenizer.padding_side == "left"
    ):  # right padding leaves positions as they are; not every encoder takes position_ids
        enc["position_ids"] = positions(enc["attention_mask"])
    return model(**enc).logits[:, 0].float()


def compute_scores(reward_fn: RewardFn, prompts: list[str], completions: list[str], device: torch.device) -> Tensor:
    """[B] scores, checked: one finite number per completion."""
    raw = reward_fn(prompts, completions)
    try:
        scores = torch.as_tensor([float(x) for x in raw], dtype=torch.float32, device=device)
    except (TypeError, ValueError) as exc:
        raise FastPPOError(
            f"the reward function must return a list of floats, got {type(raw).__name__} ({exc})"
        ) from exc
    if scores.numel() != len(completions):
        raise FastPPOError(
            f"the reward function returned {scores.numel()} scores for {len(completions)} completions: return "
            "one float per completion"
        )
    if not torch.isfinite(scores).all():
        raise FastPPOError("the reward function returned NaN or infinite scores: return finite floats")
    return scores


def shape_scores(
    scores: Tensor, has_eos: Tensor, missing_eos_penalty: float | None, clip: float | None, whiten: bool
) -> Tensor:
    """Optional penalty for completions that never emitted EOS, clipping, and ``whiten``: scaling to
    std 1 over the batch with the mean kept (TRL's ``whiten_rewards``, ``shift_mean=False``), so a
    batch of good answers still has positive rewards."""
    if missing_eos_penalty is not None:
        scores = scores - missing_eos_penalty * (~has_eos).to(scores.dtype)
    if clip is not None:
        scores = scores.clamp(-clip, clip)
    if whiten and scores.numel() > 1:
        scores = normalize_advantages(scores) + scores.mean()
    return scores


def last_token_index(mask: Tensor) -> Tensor:
    """[B] column of each row's last valid token (its EOS when it has one)."""
    return mask.long().sum(dim=1).clamp_min(1) - 1


def token_kl(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, estimator: KLEstimator) -> Tensor:
    """[B, R] per-token estimate of KL(policy || reference) from the sampled tokens, zero on masked ones."""
    return torch.where(mask, kl_estimate(logprobs, ref_logprobs, estimator), 0.0)  # where, not *: 0 * inf is nan


def token_rewards(
    scores: Tensor, logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, kl_coef: float, estimator: KLEstimator
) -> tuple[Tensor, Tensor]:
    """Per-token rewards r_t = -kl_coef * KL_t, plus the score at the last real token
    (Ziegler et al. 2019). KL_t estimates KL(policy || reference) from the sampled token.
    Returns ``(rewards, kl)``, both [B, R] and zero on masked tokens."""
    kl = token_kl(logprobs, ref_logprobs, mask, estimator)
    rewards = -kl_coef * kl
    rows = torch.arange(scores.shape[0], device=scores.device)
    rewards[rows, last_token_index(mask)] += scores
    return rewards, kl


def gae_advantages(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, gae_lambda: float
) -> tuple[Tensor, Tensor]:
    """GAE over response tokens with the core recursion, which works on [T, N]: rows are
    transposed to [R, B]; each completion terminates at its last real token (no bootstrap),
    and masked tokens carry zero reward and value so nothing leaks into real ones."""
    values = torch.where(mask, values, 0.0)
    last = torch.zeros_like(mask)
    last[torch.arange(mask.shape[0], device=mask.device), last_token_index(mask)] = True
    next_values = torch.cat((values[:, 1:], torch.zeros_like(values[:, :1])), dim=1)
    advantages, returns = compute_gae(
        rewards.T, values.T, next_values.T, last.T, torch.zeros_like(last.T), gamma, gae_lambda
    )
    return torch.where(mask, advantages.T, 0.0), torch.where(mask, returns.T, 0.0)


def grpo_advantages(returns: Tensor, group_size: int, eps: float = 1e-4) -> Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath): (R_i - mean_group) / (std_group + eps), with the
    unbiased std over the ``group_size`` samples of a prompt (consecutive rows). [B] -> [B]."""
    return normalize_advantages(returns.view(-1, group_size), eps=eps, dim=1).flatten()


def rloo_advantages(returns: Tensor, group_size: int) -> Tensor:
    """RLOO (Ahmadian et al. 2024): R_i minus the mean of the other k-1 samples of its prompt. [B] -> [B]."""
    groups = returns.view(-1, group_size)
    baseline = (groups.sum(dim=1, keepdim=True) - groups) / (group_size - 1)
    return (groups - baseline).flatten()


def sequence_advantages(
    estimator: str, scores: Tensor, kl: Tensor | None, kl_coef: float, mask: Tensor, group_size: int
) -> Tensor:
    """Critic-free advantages, one per completion, broadcast to its tokens. The return is the
    score minus the summed KL penalty (``kl`` None: no penalty): the same reward the GAE path
    distributes over tokens."""
    returns = scores if kl is None else scores - kl_coef * kl.sum(dim=1)
    adv = grpo_advantages(returns, group_size) if estimator == "grpo" else rloo_advantages(returns, group_size)
    return adv.unsqueeze(1) * mask


def whiten_advantages(advantages: Tensor, mask: Tensor, moments: Tensor | None = None) -> Tensor:
    """Mean 0 and std 1 over valid tokens only; masked tokens stay 0. ``moments``: the (count, sum,
    sum of squares) of the valid tokens of every rank, when this rank holds part of the batch."""
    return normalize_advantages(advantages, mask, moments=moments) * mask


def sequence_kl(kl: Tensor) -> float:
    """Mean over completions of the summed per-token KL: the quantity the KL target refers to."""
    return float(kl.sum(dim=1).mean())
