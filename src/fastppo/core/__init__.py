"""Pure PPO math on tensors: no I/O, no environments. Used by the gymnasium and the RLHF trainers."""

from fastppo.core.categorical import categorical_logprob_entropy
from fastppo.core.gae import compute_decision_gae, compute_gae, open_decisions, shift_values
from fastppo.core.kl import adaptive_kl_beta, categorical_kl, kl_estimate, proportional_kl_beta
from fastppo.core.losses import policy_loss, ppo_loss, reference_kl_penalty, value_loss
from fastppo.core.masked import (
    LossAggregation,
    aggregate_loss,
    explained_variance,
    masked_mean,
    masked_var,
    normalize_advantages,
)
from fastppo.core.normalize import RewardScaler, RunningMeanStd
from fastppo.core.preference import bradley_terry_loss, dpo_loss
from fastppo.core.schedules import schedule_progress, scheduled, warmup_scheduled

__all__ = [
    "adaptive_kl_beta",
    "aggregate_loss",
    "bradley_terry_loss",
    "categorical_kl",
    "categorical_logprob_entropy",
    "compute_decision_gae",
    "compute_gae",
    "dpo_loss",
    "explained_variance",
    "kl_estimate",
    "LossAggregation",
    "masked_mean",
    "masked_var",
    "normalize_advantages",
    "open_decisions",
    "policy_loss",
    "ppo_loss",
    "proportional_kl_beta",
    "reference_kl_penalty",
    "RewardScaler",
    "RunningMeanStd",
    "schedule_progress",
    "scheduled",
    "shift_values",
    "value_loss",
    "warmup_scheduled",
]
