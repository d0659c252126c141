"""PPO for causal language models (Ziegler et al. 2019; Ouyang et al. 2022), CleanRL-shaped:
``collect_rollout`` -> scores and advantages -> ``ppo_update`` -> log -> checkpoint.

The losses and GAE are the ones in :mod:`fastppo.core` that the Gymnasium trainer uses; tokens
are the time steps and ``response_mask`` is the validity mask.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fastppo.core import (
    explained_variance,
    masked_mean,
    policy_loss,
    ppo_loss,
    proportional_kl_beta,
    reference_kl_penalty,
    warmup_scheduled,
)
from fastppo.devices import resolve_device
from fastppo.errors import FastPPOError
from fastppo.rlhf.checkpoint import due, last_checkpoint_named, load_training_state, resume_point, save_checkpoint
from fastppo.rlhf.config import PPOConfig, RLHFConfig, validate_ppo, validate_run
from fastppo.rlhf.data import batch_indices
from fastppo.rlhf.evaluation import evaluate, sample_rows
from fastppo.rlhf.generation import make_generator
from fastppo.rlhf.health import HealthMonitor, check_finite
from fastppo.rlhf.models import Models, Precision, load_models, start_run
from fastppo.rlhf.parallel import ONE_PROCESS, Ranks
from fastppo.rlhf.rewards import (
    RewardFn,
    compute_scores,
    gae_advantages,
    sequence_advantages,
    sequence_kl,
    shape_scores,
    token_kl,
    token_rewards,
    whiten_advantages,
)
from fastppo.rlhf.rollout import Rollout, collect_rollout
from fastppo.rlhf.tokens import forward_tokens
from fastppo.training.distributed import joined, rank_device
from fastppo.training.logger import RunLogger
from fastppo.training.update import set_learning_rate

# core's metric names -> the logged names CleanRL uses
LOSS_METRIC_NAMES = {"pg_loss": "losses/policy_loss", "v_loss": "losses/value_loss"}


def compute_advantages(
    rollout: Rollout, scores: Tensor, kl_coef: float, ppo: PPOConfig, ranks: Ranks = ONE_PROCESS
) -> tuple[Tensor, Tensor | None]:
    """Advantages [B, R] (and returns for the critic) from scores and, unless it goes in the loss, the
    KL penalty. Whitened over every rank's tokens."""
    mask = rollout.response_mask
    reward_kl_coef = 0.0 if ppo.kl_in_loss else kl_coef
    if ppo.estimator == "gae":
        # GAE's rollout has both: its advantages need the values, so its own pass scored the old log-probs
        assert rollout.logprobs is not None and rollout.values is not None
        rewards, _ = token_rewards(
            scores, rollout.logprobs, rollout.ref_logprobs, mask, reward_kl_coef, ppo.kl_estimator
        )
        advantages, returns = gae_advantages(rewards, rollout.values, mask, ppo.gamma, ppo.gae_lambda)
    else:
        # A return without KL needs no old log-probs: the rollout may not have them yet
        # (PPOConfig.old_logprobs_from_update); one with KL has them.
        kl = None
        if reward_kl_coef:
            assert rollout.logprobs is not None
            kl = token_kl(rollout.logprobs, rollout.ref_logprobs, mask, ppo.kl_estimator)
        advantages, returns = (
            sequence_advantages(ppo.estimator, scores, kl, reward_kl_coef, mask, ppo.num_generations),
            None,
        )
    # Critic-free advantages are one number per completion: whitening them over tokens weighs long
    # completions more and, when length goes with score, flips the sign of short good answers.
    whiten = ppo.whiten_advantages if ppo.whiten_advantages is not None else ppo.estimator == "gae"
    if whiten:
        advantages = whiten_advantages(advantages, mask, ranks.advantage_moments(advantages, mask))
    return advantages, returns


def ppo_update(
    models: Models,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    advantages: Tensor,
    returns: Tensor | None,
    ppo: PPOConfig,
    kl_coef: float,
    temperature: float,
    precision: Precision,
    ranks: Ranks = ONE_PROCESS,
    max_new_tokens: int | None = None,
) -> dict[str, float]:
    """PPO epochs over shuffled minibatches of completions, each accumulated over micro-batches,
    with the KL to the reference in the loss when ``ppo.kl_in_loss``; stops early after an epoch
    whose mean approx_kl exceeds ``ppo.target_kl``. Returns the mean of the loss metrics over all
    micro-batches and the number of epochs run. Under torchrun minibatch i of the step is every
    rank's minibatch i: the gradients and the early-stop KL are averaged over the ranks.
    ``max_new_tokens``: the normaliser of ``--loss-aggregation constant``. A rollout collected
    without old log-probs (``PPOConfig.old_logprobs_from_update``: one pass, under the weights that
    sampled it) gets this pass's, detached, in ``rollout.logprobs``."""
    batch_size = rollout.response.shape[0]
    micro_batch_size = ppo.mini_batch_size // ppo.gradient_accumulation_steps
    # The optimizer's own: with FSDP a model's parameters are swapped for unsharded ones between a
    # forward and its reshard, and trainable_parameters() could list those.
    params = [p for group in optimizer.param_groups for p in group["params"]]
    totals: dict[str, Tensor] = {}
    grad_norms: list[Tensor] = []
    count = epochs = 0
    fill_old_logprobs = rollout.logprobs is None
    old_logprobs = rollout.logprobs = (
        torch.zeros_like(rollout.ref_logprobs) if rollout.logprobs is None else rollout.logprobs
    )
    for _ in range(ppo.ppo_epochs):
        epochs += 1
        kl_before, count_before = totals.get("approx_kl", 0.0), count
        order = torch.randperm(batch_size, device=rollout.response.device)
        for start in range(0, batch_size, ppo.mini_batch_size):
            for mb in order[start : start + ppo.mini_batch_size].split(micro_batch_size):
                mask = rollout.response_mask[mb]
                with precision.autocast():
                    new = forward_tokens(
                        models.policy,
                        models.critic,
                        rollout.query[mb],
                        rollout.query_mask[mb],
                        rollout.response[mb],
                        mask,
                        temperature,
                    )
                if fill_old_logprobs:
                    old_logprobs[mb] = new.logprobs.detach().masked_fill(~mask, 0.0)
                if new.values is None:  # critic-free (GRPO/RLOO): surrogate and entropy only
                    loss, metrics = policy_loss(
                        new.logprobs,
                        old_logprobs[mb],
                        advantages[mb],
                        ppo.clip_coef,
                        mask,
                        aggregation=ppo.loss_aggregation,
                        max_length=max_new_tokens,
                    )
                    entropy = masked_mean(new.entropy, mask)
                    loss = loss - ppo.ent_coef * entropy
                    metrics["entropy"] = entropy.detach()
                else:
                    # a critic's rollout has values and returns
                    assert rollout.values is not None and returns is not None
                    loss, metrics = ppo_loss(
                        new.logprobs,
                        old_logprobs[mb],
                        advantages[mb],
                        new.entropy,
                        new.values,
                        rollout.values[mb],
                        returns[mb],
                        clip_coef=ppo.clip_coef,
                        ent_coef=ppo.ent_coef,
                        vf_coef=ppo.vf_coef,
                        clip_vloss=ppo.clip_vloss,
                        mask=mask,
                        aggregation=ppo.loss_aggregation,
                        max_length=max_new_tokens,
                    )
                if ppo.kl_in_loss:
                    kl_loss, kl_metrics = reference_kl_penalty(
                        new.logprobs,
                        rollout.ref_logprobs[mb],
                        kl_coef,
                        mask,
                        aggregation=ppo.loss_aggregation,
                        max_length=max_new_tokens,
                    )
                    loss = loss + kl_loss
                    metrics.update(kl_metrics, loss=loss.detach())
                precision.backward(loss / ppo.gradient_accumulation_steps)
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value
                count += 1
            ranks.average_gradients(params)
            grad_norms.append(precision.step(optimizer, params, ppo.max_grad_norm))
        # The epoch's mean KL, not its last micro-batch's: a few completions' KL is mostly noise.
        if (
            ppo.target_kl is not None
            and ranks.mean_metrics({"kl": (totals["approx_kl"] - kl_before) / (count - count_before)})["kl"].item()
            > ppo.target_kl
        ):
            break
    means = ranks.mean_metrics({key: value / count for key, value in totals.items()})
    logged = {LOSS_METRIC_NAMES.get(key, f"losses/{key}"): float(value) for key, value in means.items()}
    logged["losses/grad_norm"] = float(torch.stack(grad_norms).mean())
    logged["losses/epochs"] = float(epochs)
    return logged


def train(
    cfg: RLHFConfig, reward_fn: RewardFn, prompts: list[str], eval_prompts: list[str] | None = None
) -> list[dict[str, float]]:
    """Fine-tune ``cfg.model.model`` with PPO (or GRPO/RLOO) to maximise ``reward_fn``; returns the
    metrics of every step, also written to ``output_dir/metrics.jsonl`` and TensorBoard. With
    ``eval_prompts``, their greedy completions are scored every ``cfg.monitor.eval_every`` steps.

    Under torchrun, one rank of a data-parallel run (:mod:`fastppo.rlhf.parallel`): every flag is
    per rank, and a step trains on every rank's prompts."""
    with joined(rank_device(resolve_device(cfg.model.device))) as world:
        return _train(cfg, reward_fn, prompts, eval_prompts, Ranks(world, cfg.model.fsdp))


def _train(
    cfg: RLHFConfig, reward_fn: RewardFn, prompts: list[str], eval_prompts: list[str] | None, ranks: Ranks
) -> list[dict[str, float]]:
    model_cfg, sampling, ppo, run = cfg.model, cfg.sampling, cfg.ppo, cfg.run
    validate_ppo(model_cfg, sampling, ppo)
    validate_run(run, cfg.schedule, cfg.monitor, ppo.steps)
    if not prompts:
        raise FastPPOError("no prompts to train on: give at least one prompt")
    output_dir = Path(run.output_dir)
    resume_from = resume_point(output_dir, run.resume, "rlhf")
    start_run(run)
    models = load_models(
        ranks.load_config(model_cfg), ppo.critic if ppo.estimator == "gae" else None, ppo.critic_model, resume_from
    )
    ranks.prepare(models)
    ranks.reseed(run.seed)
    device = next(models.policy.parameters()).device
    precision = Precision(model_cfg.dtype, device)
    optimizer = torch.optim.AdamW(models.trainable_parameters(), lr=ppo.learning_rate)
    state: dict[str, Any] = (
        load_training_state(resume_from, optimizer, models, ranks)
        if resume_from
        else {"step": 0, "kl_coef": ppo.kl_coef}
    )
    precision.load_state_dict(state.pop("grad_scaler", {}))
    generator = make_generator(models, model_cfg, sampling, run.seed, precision.autocast)
    micro_batch_size = ppo.mini_batch_size // ppo.gradient_accumulation_steps
    monitor = HealthMonitor(ppo.kl_warn)
    history = []
    purge_step = state["step"] + 1 if state["step"] else None  # a resumed run continues its curves
    summary = (("reward", "rlhf/reward_mean", ".3f"), ("kl", "rlhf/kl_ref", ".3f"))
    non_finite_fix = "lower --learning-rate, or check the reward and --missing-eos-penalty/--reward-clip"
    # Explained variance is NaN whenever the returns are constant (every reward 0): a diagnostic, not a failure.
    ignore = ("losses/explained_variance", *(("losses/grad_norm",) if precision.skips_non_finite_steps else ()))
    with (
        last_checkpoint_named(output_dir),
        RunLogger(
            output_dir if ranks.main else None,
            ppo.steps,
            tensorboard=True,
            progress=run.progress and ranks.main,
            config=asdict(cfg),
            purge_step=purge_step,
            summary=summary,
            wandb_project=run.wandb_project_or_none if ranks.main else None,
        ) as logger,
    ):
        for step in range(state["step"] + 1, ppo.steps + 1):
            t_start = time.perf_counter()
            learning_rate = warmup_scheduled(
                cfg.schedule.lr_schedule, ppo.learning_rate, step, ppo.steps, cfg.schedule.lr_warmup_steps
            )
            set_learning_rate(optimizer, learning_rate)
            step_prompts = [
                prompts[i]
                for i in ranks.share(batch_indices(len(prompts), ranks.size * ppo.prompts_per_step, step, run.seed))
            ]
            rollout = collect_rollout(
                models,
                step_prompts,
                ppo.num_generations,
                sampling,
                micro_batch_size,
                precision.autocast,
                generator,
                not ppo.old_logprobs_from_update,
            )
            raw_scores = compute_scores(reward_fn, rollout.prompts, rollout.completions, device)
            # Every rank's scores: the step's statistics (whitening, the log) are over all of them.
            all_scores, all_eos = ranks.gather(raw_scores), ranks.gather(rollout.has_eos.float()).bool()
            shaped = shape_scores(
                all_scores, all_eos, sampling.missing_eos_penalty, ppo.reward_clip, ppo.whiten_rewards
            )
            check_finite(step, {"the shaped scores": shaped}, non_finite_fix)  # before they reach the weights
            scores = ranks.own(shaped)
            advantages, returns = compute_advantages(rollout, scores, state["kl_coef"], ppo, ranks)
            t_rollout = time.perf_counter()
            losses = ppo_update(
                models,
                optimizer,
                rollout,
                advantages,
                returns,
                ppo,
                state["kl_coef"],
                sampling.temperature,
                precision,
                ranks,
                sampling.max_new_tokens,
            )
            generator.sync_weights()
            t_update = time.perf_counter()

            assert rollout.logprobs is not None  # the old log-probs: ppo_update filled them if the rollout had none
            kl = token_kl(rollout.logprobs, rollout.ref_logprobs, rollout.response_mask, ppo.kl_estimator)
            kl_ref = sequence_kl(
                ranks.gather(kl.sum(dim=1, keepdim=True))
            )  # summed per completion first: the ranks' R differ
            response_tokens, query_tokens = ranks.sum(
                torch.stack([rollout.response_mask.sum(), rollout.query_mask.sum()])
            ).tolist()
            completions = all_scores.numel()
            metrics = {
                "rlhf/reward_mean": float(all_scores.mean()),
                "rlhf/reward_std": float(all_scores.std()) if completions > 1 else 0.0,
                "rlhf/kl_ref": kl_ref,
                "rlhf/kl_coef": state["kl_coef"],
                "rlhf/response_length": response_tokens / completions,
                "rlhf/eos_fraction": float(all_eos.float().mean()),
                "charts/learning_rate": learning_rate,
                **losses,
                "perf/tokens_generated_per_s": response_tokens / (t_rollout - t_start),
                "perf/tokens_trained_per_s": (query_tokens + response_tokens)
                * losses["losses/epochs"]
                / (t_update - t_rollout),  # epochs run: target_kl may stop early
                "time/rollout_s": t_rollout - t_start,
                "time/update_s": t_update - t_rollout,
            }
            if not ppo.kl_in_loss:  # the part of the return the KL penalty took
                metrics["rlhf/non_score_reward"] = -state["kl_coef"] * kl_ref
            if returns is not None:
                assert rollout.values is not None  # returns come with a critic's values
                metrics["losses/explained_variance"] = explained_variance(
                    rollout.values, returns, rollout.response_mask
                )
            if ppo.kl_target is not None:
                state["kl_coef"] = proportional_kl_beta(
                    state["kl_coef"], kl_ref, ppo.kl_target, completions, ppo.kl_horizon
                )
            if due(step, cfg.monitor.sample_every, ppo.steps):
                logger.log_samples(
                    step,
                    "rollout",
                    sample_rows(rollout.prompts, rollout.completions, raw_scores, cfg.monitor.num_samples),
                )
            if eval_prompts and due(step, cfg.monitor.eval_every, ppo.steps):
                eval_metrics, eval_rows = evaluate(
                    models, generator, eval_prompts, reward_fn, sampling, rollout.response.shape[0]
                )
                metrics.update(eval_metrics)
                logger.log_samples(step, "eval", eval_rows[: cfg.monitor.num_samples])
            check_finite(step, metrics, non_finite_fix, ignore)
            state["step"] = step
            logger.log(step, metrics)
            history.append(metrics)
            if ranks.main:
                monitor.check(step, metrics["rlhf/reward_mean"], kl_ref)
            if due(step, run.save_every, ppo.steps):
                save_checkpoint(
                    output_dir,
                    step,
                    models,
                    optimizer,
                    {"command": "rlhf", "kl_coef": state["kl_coef"], "grad_scaler": precision.state_dict()},
                    run.keep_checkpoints,
                    ranks,
                )
    return history
