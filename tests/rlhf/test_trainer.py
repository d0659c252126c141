"""The PPO/GRPO/RLOO trainer: learning on a synthetic task, outputs, checkpoints and exact resume."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from fastppo.rlhf import trainer
from fastppo.rlhf.checkpoint import latest_checkpoint
from fastppo.rlhf.config import PPOConfig
from fastppo.rlhf.models import Models, Precision
from fastppo.rlhf.tokens import TokenOutputs
from fastppo.rlhf.trainer import ppo_update, train
from tests.support.tiny_lm import PROMPTS, deterministic, early_letters, synthetic_rollout, tiny_config


def _window_mean(history, key, window=5):
    return sum(h[key] for h in history[:window]) / window, sum(h[key] for h in history[-window:]) / window


def _learn(tiny_model, tmp_path, **ppo):
    cfg = tiny_config(tiny_model, tmp_path, steps=30, mini_batch_size=8, ppo_epochs=4, learning_rate=3e-3, **ppo)
    return train(cfg, early_letters, PROMPTS)


def test_ppo_raises_the_reward_while_kl_stays_bounded(tiny_model, tmp_path) -> None:
    history = _learn(tiny_model, tmp_path, prompts_per_step=8, num_generations=1)
    start, end = _window_mean(history, "rlhf/reward_mean")
    assert end > start + 0.2, f"reward {start:.3f} -> {end:.3f}"
    assert max(h["rlhf/kl_ref"] for h in history) < 10.0
    assert history[0]["rlhf/kl_ref"] == 0.0, "the first rollout is sampled from the reference itself"


@pytest.mark.slow
# GRPO's KL is a loss term: at the same kl_coef it holds the policy more loosely than the
# reward-side penalty (max KL 14.6 vs 7.5 nats on this run, for a reward of 0.95 vs 0.79).
@pytest.mark.parametrize("estimator, max_kl", [("grpo", 20.0), ("rloo", 10.0)])
def test_critic_free_estimators_raise_the_reward(tiny_model, tmp_path, estimator, max_kl) -> None:
    history = _learn(tiny_model, tmp_path, prompts_per_step=2, num_generations=4, estimator=estimator)
    start, end = _window_mean(history, "rlhf/reward_mean")
    assert end > start + 0.08, f"reward {start:.3f} -> {end:.3f}"
    assert max(h["rlhf/kl_ref"] for h in history) < max_kl


def test_every_estimator_samples_the_same_first_rollout_at_the_same_seed(tiny_model, tmp_path) -> None:
    """Building a critic draws no sample from the policy's stream: GAE (either critic), GRPO and
    RLOO runs of one seed start from the same responses, so their curves differ by the estimator only."""
    first = {}
    for estimator, critic in [("gae", "shared"), ("gae", "separate"), ("grpo", "shared"), ("rloo", "shared")]:
        cfg = tiny_config(tiny_model, tmp_path / f"{estimator}-{critic}", steps=1, estimator=estimator, critic=critic)
        row = train(cfg, early_letters, PROMPTS)[0]
        first[estimator, critic] = (row["rlhf/reward_mean"], row["rlhf/response_length"], row["rlhf/reward_std"])
    assert len(set(first.values())) == 1, first


@pytest.mark.parametrize("estimator,critic", [("gae", "separate"), ("grpo", "shared"), ("rloo", "shared")])
def test_every_estimator_runs_and_logs(tiny_model, tmp_path, estimator, critic) -> None:
    cfg = tiny_config(
        tiny_model, tmp_path, estimator=estimator, critic=critic, gradient_accumulation_steps=2, kl_target=1.0
    )
    history = train(cfg, early_letters, PROMPTS)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["global_step"] for line in lines] == [1, 2]
    for key in (
        "rlhf/reward_mean",
        "rlhf/kl_ref",
        "rlhf/kl_coef",
        "rlhf/response_length",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/entropy",
    ):
        assert key in lines[-1], key
    assert ("losses/value_loss" in lines[-1]) == (estimator == "gae")
    assert ("losses/ref_kl" in lines[-1]) == (estimator == "grpo"), (
        "GRPO's KL is a loss term, the others' a reward term"
    )
    assert history[1]["rlhf/kl_coef"] != history[0]["rlhf/kl_coef"], "the adaptive controller moved the coefficient"
    assert list(tmp_path.glob("events.out.tfevents.*"))
    checkpoint = latest_checkpoint(tmp_path)
    assert checkpoint is not None and (checkpoint / "policy" / "config.json").is_file()
    assert (checkpoint / "critic" / "config.json").is_file() == (critic == "separate" and estimator == "gae")


def test_resume_continues_exactly_where_the_run_stopped(tiny_model, tmp_path) -> None:
    full = train(tiny_config(tiny_model, tmp_path / "full", steps=3, kl_target=1.0), early_letters, PROMPTS)
    interrupted = tiny_config(tiny_model, tmp_path / "resumed", steps=2, kl_target=1.0)
    train(interrupted, early_letters, PROMPTS)
    resumed_cfg = replace(
        interrupted,
        ppo=replace(interrupted.ppo, steps=3),
        run=replace(interrupted.run, resume=True, keep_checkpoints=1),
    )
    resumed = train(resumed_cfg, early_letters, PROMPTS)
    assert len(resumed) == 1
    assert deterministic(resumed[0]) == pytest.approx(deterministic(full[-1]), rel=1e-5, abs=1e-6)
    assert [p.name for p in (tmp_path / "resumed").glob("checkpoint-*")] == ["checkpoint-000003"]
    steps = [
        json.loads(line)["global_step"] for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [1, 2, 3]


def test_first_ppo_epoch_starts_at_ratio_one(tiny_model, tmp_path) -> None:
    """One epoch with a minibatch equal to the batch: one optimizer step after the only forward,
    so the logged ratio and approx_kl are those of the untouched policy."""
    cfg = tiny_config(tiny_model, tmp_path, steps=1, mini_batch_size=8, gradient_accumulation_steps=4)
    history = train(cfg, early_letters, PROMPTS)
    assert history[0]["losses/ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert history[0]["losses/approx_kl"] == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize(
    ("settings", "skips"),
    [
        ({"estimator": "grpo"}, True),  # KL in the loss
        ({"estimator": "rloo", "kl_coef": 0.0}, True),
        ({"estimator": "rloo"}, False),  # KL in the return: advantages need the old log-probs
        ({"estimator": "rloo", "kl_coef": 0.0, "kl_target": 1.0}, False),  # the controller may make it non-zero
        ({"estimator": "gae", "kl_in": "loss"}, False),  # GAE needs the values of that pass
        ({"estimator": "grpo", "ppo_epochs": 2}, False),
        ({"estimator": "grpo", "mini_batch_size": 4}, False),  # the second minibatch is scored after a step
    ],
)
def test_which_settings_take_the_old_logprobs_from_the_update(settings, skips) -> None:
    ppo = PPOConfig(**{"prompts_per_step": 4, "num_generations": 2, "mini_batch_size": 8, "ppo_epochs": 1, **settings})
    assert ppo.old_logprobs_from_update is skips


@pytest.mark.parametrize("settings", [{"estimator": "grpo", "kl_target": 1.0}, {"estimator": "rloo", "kl_coef": 0.0}])
def test_one_pass_over_one_minibatch_scores_the_rollout_once(tiny_model, tmp_path, monkeypatch, settings) -> None:
    """With one epoch over one minibatch the rollout skips its policy pass and the update's supplies
    the old log-probs: one policy pass per step fewer, and the same run (metrics, KL to the
    reference, the adaptive coefficient, final weights) as with the rollout's own pass."""
    from fastppo.rlhf import rollout as rollout_module

    def run(name: str) -> tuple[list[dict[str, float]], int, dict[str, torch.Tensor]]:
        passes = []

        def counted(forward):
            def forward_tokens(model, *args):
                passes.append(any(p.requires_grad for p in model.parameters()))  # the policy, not the frozen reference
                return forward(model, *args)

            return forward_tokens

        for module in (trainer, rollout_module):
            monkeypatch.setattr(module, "forward_tokens", counted(module.forward_tokens))
        cfg = tiny_config(tiny_model, tmp_path / name, steps=3, mini_batch_size=8, learning_rate=1e-2, **settings)
        history = [
            {k: v for k, v in h.items() if not k.startswith(("time/", "perf/"))}
            for h in train(cfg, early_letters, PROMPTS)
        ]
        monkeypatch.undo()
        weights = load_file(str(latest_checkpoint(tmp_path / name) / "policy" / "model.safetensors"))
        return history, sum(passes), weights

    skipped, skipped_passes, skipped_weights = run("skip")
    monkeypatch.setattr(PPOConfig, "old_logprobs_from_update", property(lambda self: False))
    kept, kept_passes, kept_weights = run("keep")
    assert (skipped_passes, kept_passes) == (3, 6), "one policy pass per step instead of two"
    assert all(h["losses/approx_kl"] == 0.0 for h in skipped), "the ratio is 1 exactly"
    assert [h.keys() for h in skipped] == [h.keys() for h in kept]
    for a, b in zip(skipped, kept):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    assert skipped[-1]["rlhf/kl_ref"] > 0.01, "the policy moved: the comparison covers a real KL"
    torch.testing.assert_close(skipped_weights, kept_weights, rtol=1e-5, atol=1e-6)


def test_target_kl_stops_on_the_mean_kl_of_the_epoch(monkeypatch) -> None:
    """Four one-completion micro-batches per epoch; the policy has moved on completion 0 only, so
    its micro-batch's approx_kl is 1.135 and the others' 0: the epoch's mean, 0.28, is over the
    target 0.1 whichever micro-batch comes last, and the update stops after the first epoch."""
    mask = torch.ones(4, 3, dtype=torch.bool)
    old = torch.full((4, 3), -1.0)
    rollout = synthetic_rollout(old, old, mask)
    shift = torch.tensor([-2.0, 0.0, 0.0, 0.0]).unsqueeze(1)  # k3 of log-ratio -2: e^-2 - 1 + 2 = 1.135
    policy = torch.nn.Linear(1, 1)
    calls = []

    def forward_tokens(model, critic, query, query_mask, response, response_mask, temperature):
        rows = query[:, 0]
        calls.append(rows.tolist())
        return TokenOutputs(old[rows] + shift[rows] + 0.0 * model.weight.sum(), torch.zeros(len(rows), 3), None)

    monkeypatch.setattr(trainer, "forward_tokens", forward_tokens)
    ppo = PPOConfig(prompts_per_step=4, mini_batch_size=1, ppo_epochs=4, target_kl=0.1)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
    torch.manual_seed(0)  # an order in which completion 0 is not the epoch's last micro-batch
    metrics = ppo_update(
        Models(None, policy, None, None),
        optimizer,
        rollout,
        torch.zeros(4, 3),
        None,
        ppo,
        0.0,
        1.0,
        Precision("fp32", torch.device("cpu")),
    )
    assert calls[3] != [0]
    assert len(calls) == 4 and metrics["losses/epochs"] == 1.0, f"stopped after {len(calls) / 4} epochs"
    assert metrics["losses/approx_kl"] == pytest.approx((2.0 + torch.tensor(-2.0).exp().item() - 1.0) / 4)


def test_tokens_trained_per_s_counts_the_epochs_run(tiny_model, tmp_path) -> None:
    """With target_kl stopping the update after its first epoch, the tokens trained are those of one
    pass over the rollout, not ppo_epochs passes."""
    from fastppo.rlhf.data import batch_indices

    cfg = tiny_config(
        tiny_model, tmp_path, steps=1, ppo_epochs=3, mini_batch_size=2, learning_rate=1e-2, target_kl=1e-12
    )
    [h] = train(cfg, early_letters, PROMPTS)
    assert h["losses/epochs"] == 1.0
    prompt_tokens = cfg.ppo.num_generations * sum(
        len(PROMPTS[i]) for i in batch_indices(len(PROMPTS), cfg.ppo.prompts_per_step, 1, cfg.run.seed)
    )  # one token a character
    response_tokens = h["rlhf/response_length"] * cfg.ppo.prompts_per_step * cfg.ppo.num_generations
    assert h["perf/tokens_trained_per_s"] * h["time/update_s"] == pytest.approx(prompt_tokens + response_tokens)


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [("token", -(3 * 1.0 - 3.0) / 4), ("sequence", -(1.0 - 3.0) / 2), ("constant", -(3 * 1.0 - 3.0) / (2 * 5))],
)
def test_loss_aggregation_reaches_the_policy_loss(monkeypatch, aggregation: str, expected: float) -> None:
    """A 3-token completion with advantage 1 and a 1-token one with -3, at ratio 1: the logged policy
    loss is minus the aggregated advantage (constant: over 2 completions x max_new_tokens 5)."""
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    old = torch.full((2, 3), -1.0)
    rollout = synthetic_rollout(old, old, mask)
    policy = torch.nn.Linear(1, 1)

    def forward_tokens(model, critic, query, query_mask, response, response_mask, temperature):
        return TokenOutputs(old[query[:, 0]] + 0.0 * model.weight.sum(), torch.zeros(len(query), 3), None)

    monkeypatch.setattr(trainer, "forward_tokens", forward_tokens)
    ppo = PPOConfig(
        estimator="grpo",
        num_generations=2,
        prompts_per_step=1,
        mini_batch_size=2,
        ppo_epochs=1,
        kl_coef=0.0,
        loss_aggregation=aggregation,
    )
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-3.0, 0.0, 0.0]])
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
    metrics = ppo_update(
        Models(None, policy, None, None),
        optimizer,
        rollout,
        advantages,
        None,
        ppo,
        0.0,
        1.0,
        Precision("fp32", torch.device("cpu")),
        max_new_tokens=5,
    )
    assert metrics["losses/policy_loss"] == pytest.approx(expected)
