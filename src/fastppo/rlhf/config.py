"""Typed settings for the RLHF and DPO trainers, one dataclass per concern.

Each field's ``help`` metadata is its documentation and the text of its CLI flag (see
:mod:`fastppo.cli.rlhf`); :func:`validate` checks the values once, with messages that say how to fix them.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from fastppo.config import check_seed
from fastppo.core.kl import KLEstimator
from fastppo.core.masked import LossAggregation
from fastppo.core.preference import PreferenceLoss
from fastppo.core.schedules import ScheduleKind
from fastppo.errors import FastPPOError, install_extra

AdvantageEstimator = Literal["gae", "grpo", "rloo"]
CriticKind = Literal["shared", "separate"]
KLPlacement = Literal["reward", "loss"]
ComputeDType = Literal["auto", "bf16", "fp16", "fp32"]
GeneratorKind = Literal["hf", "vllm"]
ReportTo = Literal["none", "wandb"]
T = TypeVar("T")


def _f(default: T, help: str) -> T:  # noqa: A002 - "help" mirrors argparse
    return field(default=default, metadata={"help": help})


@dataclass
class ModelConfig:
    """Which weights to load and how to adapt them."""

    model: str = _f("", "policy: local folder or hub id loaded with AutoModelForCausalLM.from_pretrained")
    lora: bool = _f(False, "train LoRA adapters (peft); the reference is the base with adapters disabled")
    lora_r: int = _f(16, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA scaling numerator (scale = alpha / r)")
    lora_target_modules: str | None = _f(
        None, "comma-separated module names for LoRA; default: peft's choice per architecture"
    )
    device: str = _f("auto", "torch device: auto picks cuda when available, else cpu")
    dtype: ComputeDType = _f(
        "auto",
        "compute dtype of forward and backward passes (autocast); weights and AdamW state stay fp32 (master weights), "
        "fp16 adds loss scaling; auto: bf16 on GPU, fp32 on CPU",
    )
    gradient_checkpointing: bool = _f(
        False, "recompute each layer's activations in the backward pass: less memory, about a third more compute"
    )
    fsdp: bool = _f(
        False,
        "under torchrun: shard the policy, reference and critic over the processes (FSDP FULL_SHARD) instead of "
        "a whole copy on each, for a model that does not fit one device",
    )


@dataclass
class SamplingConfig:
    """How completions are generated during the rollout."""

    max_prompt_length: int = _f(256, "prompts longer than this many tokens keep their last tokens")
    max_new_tokens: int = _f(32, "generation length cap; completions without EOS by then are truncated")
    temperature: float = _f(1.0, "sampling temperature; log-probs for PPO use the same tempered logits")
    top_k: int = _f(
        0,
        "sample among the k most likely tokens (0: all); log-probs are still scored under the full distribution "
        "(warns)",
    )
    top_p: float = _f(
        1.0, "nucleus sampling mass (1.0: off); log-probs are still scored under the full distribution (warns)"
    )
    missing_eos_penalty: float | None = _f(None, "subtracted from the score of completions that never emit EOS")
    stop: tuple[str, ...] = _f(
        (),
        "stop strings (repeat the flag or separate them by commas): a completion also ends at the token that "
        "completes one, as at EOS, and its text is cut before it; a special token such as <|im_end|> stops as a "
        "token id",
    )
    generator: GeneratorKind = _f(
        "hf",
        "hf: transformers' generate on the policy; vllm: a vLLM engine (GPU, fastppo[vllm]) given the weights "
        "after every update",
    )
    vllm_gpu_memory: float = _f(
        0.3, "vllm: share of the GPU's memory the engine reserves (weights and KV cache); the rest is the trainer's"
    )


@dataclass
class PPOConfig:
    """Rewards, advantages and the PPO update for language models."""

    steps: int = _f(100, "number of rollout + update iterations")
    prompts_per_step: int = _f(16, "prompts drawn per rollout")
    num_generations: int = _f(1, "completions sampled per prompt (GRPO/RLOO need at least 2)")
    mini_batch_size: int = _f(16, "completions per optimizer step")
    gradient_accumulation_steps: int = _f(1, "micro-batches per optimizer step (micro-batch = mini_batch_size / this)")
    ppo_epochs: int = _f(4, "passes over each rollout")
    learning_rate: float = _f(1e-5, "AdamW learning rate")
    estimator: AdvantageEstimator = _f(
        "gae", "advantages: gae (critic), grpo (group-normalised) or rloo (leave-one-out)"
    )
    critic: CriticKind = _f(
        "shared", "gae only: value head on the policy trunk (shared) or a separate trunk (separate)"
    )
    critic_model: str | None = _f(
        None, "separate critic: weights for its trunk (policy or reward model folder; default: the policy)"
    )
    gamma: float = _f(1.0, "discount over response tokens")
    gae_lambda: float = _f(0.95, "GAE lambda")
    clip_coef: float = _f(0.2, "PPO clip range for the ratio and the value")
    vf_coef: float = _f(0.1, "value loss coefficient")
    ent_coef: float = _f(0.0, "entropy bonus coefficient")
    clip_vloss: bool = _f(True, "clip the value loss around the rollout values")
    max_grad_norm: float = _f(1.0, "gradient norm clip")
    target_kl: float | None = _f(
        None, "stop the epochs of a step early after an epoch whose mean approx_kl exceeds this"
    )
    kl_coef: float = _f(
        0.05, "coefficient of the per-token KL penalty against the reference (initial value if adaptive)"
    )
    kl_in: KLPlacement | None = _f(
        None,
        "where the KL penalty goes: reward (kl_coef * KL subtracted from the return, Ziegler et al. 2019) or loss "
        "(kl_coef * per-token k3 KL added to the loss, DeepSeekMath GRPO); default: loss for grpo, reward for gae/rloo",
    )
    kl_estimator: KLEstimator = _f(
        "k1", "per-token KL estimator of the reward-side penalty and of the logged KL: k1, k2 or k3 (Schulman 2020)"
    )
    kl_target: float | None = _f(
        None, "adaptive KL: move kl_coef so the per-sequence KL approaches this (Ziegler et al. 2019)"
    )
    kl_horizon: int = _f(10000, "adaptive KL: samples over which the controller corrects 20% of the error")
    reward_clip: float | None = _f(None, "clip scores to [-c, c]")
    whiten_rewards: bool = _f(
        False, "scale the scores to std 1 over each rollout batch, keeping their mean (as TRL's whiten_rewards)"
    )
    whiten_advantages: bool | None = _f(
        None,
        "standardise advantages over valid tokens (default: on for gae, off for grpo/rloo, whose advantage is "
        "one number per completion)",
    )
    kl_warn: float = _f(10.0, "warn when the mean per-sequence KL to the reference exceeds this (nats)")
    loss_aggregation: LossAggregation = _f(
        "token",
        "how the policy loss (and the loss-side KL) averages a minibatch's tokens: token (every token of the "
        "batch alike, as TRL's GRPO and DAPO), sequence (each completion's mean, then their mean, as "
        "DeepSeekMath's GRPO) or constant (sum over tokens / (completions * max_new_tokens), Dr. GRPO)",
    )

    @property
    def kl_in_loss(self) -> bool:
        # GRPO normalises returns by the group's std: a KL in the return would be amplified by it.
        return (self.kl_in or ("loss" if self.estimator == "grpo" else "reward")) == "loss"

    @property
    def old_logprobs_from_update(self) -> bool:
        """One epoch over one minibatch: the update's only forward pass scores the rollout under the
        weights that sampled it, so its log-probs (detached) are the old ones (ratio 1 exactly) and
        the rollout skips its own policy pass, as TRL does. Only where nothing before the update
        needs that pass: a critic-free estimator (GAE's advantages need its values) whose return
        holds no KL (KL in the loss, or in the reward with kl_coef 0 and no kl_target)."""
        one_pass = self.ppo_epochs == 1 and self.mini_batch_size == self.prompts_per_step * self.num_generations
        kl_free_return = self.kl_in_loss or (self.kl_coef == 0 and self.kl_target is None)
        return one_pass and self.estimator != "gae" and kl_free_return


@dataclass
class RunConfig:
    """Where and how long a run writes, and its reproducibility."""

    output_dir: str = _f(
        "runs/rlhf", "folder for metrics.jsonl, TensorBoard events and checkpoints: a new or empty one, unless --resume"
    )
    seed: int = _f(1, "seed for prompt order, sampling and initialisation")
    save_every: int = _f(50, "checkpoint every this many steps (and at the end); 0: only at the end")
    keep_checkpoints: int = _f(2, "checkpoints kept on disk (older ones are deleted)")
    resume: bool = _f(False, "continue from the latest checkpoint in output_dir (an error when it holds none)")
    progress: bool = _f(True, "show a live progress bar")
    torch_threads: int = _f(
        0,
        "CPU threads torch computes with (0: torch's default, one per core); 1 keeps a run fast when other jobs "
        "share the cores",
    )
    report_to: ReportTo = _f(
        "none", "also log to Weights & Biases (wandb; WANDB_MODE=offline writes the run locally for a later wandb sync)"
    )
    wandb_project: str = _f("fastppo", "W&B project; the run is named after output_dir and a resumed run continues it")

    @property
    def wandb_project_or_none(self) -> str | None:
        return self.wandb_project if self.report_to == "wandb" else None


@dataclass
class LRScheduleConfig:
    """Learning-rate warm-up and decay over the optimizer steps."""

    lr_schedule: ScheduleKind = _f(
        "constant", "after the warm-up: constant, or linear / cosine decay towards 0 over the remaining steps"
    )
    lr_warmup_steps: int = _f(
        0, "steps over which the learning rate rises linearly from learning_rate / lr_warmup_steps to learning_rate"
    )


@dataclass
class MonitorConfig:
    """What the run shows of its completions: samples of the rollouts and a held-out prompt set."""

    sample_every: int = _f(
        10,
        "every this many steps (and at the last), log num_samples completions of the rollout with their rewards "
        "to samples.jsonl and TensorBoard; 0: at the last step only",
    )
    num_samples: int = _f(4, "completions per logged sample table")
    eval_every: int = _f(
        10,
        "with --eval-prompts: every this many steps (and at the last), generate greedily for the eval prompts "
        "and log eval/reward_mean etc.",
    )


@dataclass
class DPOConfig:
    """Direct Preference Optimization (Rafailov et al. 2023) on (prompt, chosen, rejected) data."""

    beta: float = _f(0.1, "DPO temperature: strength of the implicit KL to the reference")
    epochs: int = _f(1, "passes over the preference data")
    batch_size: int = _f(8, "pairs per optimizer step")
    gradient_accumulation_steps: int = _f(1, "micro-batches per optimizer step")
    learning_rate: float = _f(5e-6, "AdamW learning rate")
    max_grad_norm: float = _f(1.0, "gradient norm clip")
    max_prompt_length: int = _f(256, "prompts longer than this keep their last tokens")
    max_completion_length: int = _f(256, "completions longer than this are cut")
    loss: PreferenceLoss = _f(
        "sigmoid",
        "sigmoid: DPO; cdpo: conservative DPO, robust to a share --label-smoothing of flipped labels (Mitchell 2023); "
        "ipo: IPO (Azar et al. 2023), the margin of per-token mean log-probs regressed to 1 / (2 beta)",
    )
    label_smoothing: float = _f(0.0, "cdpo: the assumed probability that a preference label is wrong, in (0, 0.5)")
    precompute_ref_logps: bool = _f(
        True, "score every pair under the frozen reference once before training rather than at every step (same values)"
    )


@dataclass
class RewardModelConfig:
    """Reward-model training: a sequence classifier's score fitted to preference pairs with the Bradley-Terry loss."""

    epochs: int = _f(1, "passes over the training pairs")
    batch_size: int = _f(8, "pairs per optimizer step")
    gradient_accumulation_steps: int = _f(1, "micro-batches per optimizer step")
    learning_rate: float = _f(1e-5, "AdamW learning rate")
    max_grad_norm: float = _f(1.0, "gradient norm clip")
    max_length: int = _f(
        512,
        "tokens of prompt + completion kept (the last ones); saved as the tokenizer's limit, which --reward then "
        "applies too",
    )
    eval_split: float = _f(0.1, "share of the pairs held out to measure accuracy (0: none)")
    eval_every: int = _f(
        50, "evaluate on the held-out pairs every this many steps (and before the first and after the last)"
    )


@dataclass
class DataConfig:
    """Which split and column of the prompts are read, and how (--prompts: a .jsonl/.json/.parquet/.csv
    file, a folder, or a hub dataset)."""

    split: str = _f("train", "split of a dataset folder or hub dataset (a single file is read whole)")
    prompt_column: str = _f(
        "prompt", "column of the prompts: text, or chat messages [{role, content}, ...] with --chat-template"
    )
    chat_template: bool = _f(
        False,
        "render prompts (and completions) with the tokenizer's chat template; a text prompt becomes one user message",
    )


@dataclass
class PreferenceDataConfig(DataConfig):
    """Which split and columns of the preference pairs are read, and how (--data: a
    .jsonl/.json/.parquet/.csv file, a folder, or a hub dataset)."""

    chosen_column: str = _f(
        "chosen", "column of the preferred completions: text, or assistant messages with --chat-template"
    )
    rejected_column: str = _f("rejected", "column of the dispreferred completions")


def validate_reward_model(model: ModelConfig, reward_model: RewardModelConfig) -> None:
    if not model.model:
        raise FastPPOError(
            "no model given: pass --model PATH (a causal LM, encoder or reward-model folder, or a hub id)"
        )
    for name in (
        "epochs",
        "batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "max_grad_norm",
        "max_length",
        "eval_every",
    ):
        _positive(name, getattr(reward_model, name))
    if reward_model.batch_size % reward_model.gradient_accumulation_steps:
        raise FastPPOError(
            f"--gradient-accumulation-steps {reward_model.gradient_accumulation_steps} must divide --batch-size "
            f"{reward_model.batch_size}"
        )
    if not 0.0 <= reward_model.eval_split < 1.0:
        raise FastPPOError(f"--eval-split must be in [0, 1), got {reward_model.eval_split}")
    if model.lora or model.gradient_checkpointing:
        raise FastPPOError(
            "fastppo reward-model trains every weight without activation checkpointing: drop --lora and "
            "--gradient-checkpointing"
        )
    from fastppo.training.distributed import launched_world_size  # imports torch: not at config import time

    if model.fsdp or launched_world_size() > 1:
        raise FastPPOError("fastppo reward-model trains in one process: drop --fsdp and run it without torchrun")
    check_model_path(model.model, "--model")


def looks_like_path(path: str) -> bool:
    """``./x``, ``../x``, ``/x``, ``~/x`` or ``a/b/c``: a local path, never a hub id (``name`` or ``org/name``)."""
    return os.path.isabs(path) or path.startswith((".", "~")) or path.count("/") > 1


def check_model_path(path: str, what: str) -> None:
    """A model argument that looks like a local path must be a folder: transformers would take a
    missing one for a hub id and retry the hub for about a minute before failing."""
    if looks_like_path(path) and not Path(path).expanduser().is_dir():
        raise FastPPOError(
            f"{what} {path!r} does not exist: pass a folder written by save_pretrained (with config.json) or a hub id"
        )


def _positive(name: str, value: float) -> None:
    if not 0 < value < math.inf:  # NaN too
        raise FastPPOError(f"--{name.replace('_', '-')} must be positive, got {value}")


def validate_ppo(model: ModelConfig, sampling: SamplingConfig, ppo: PPOConfig) -> None:
    """Check the RLHF settings together; derived sizes must divide evenly."""
    if not model.model:
        raise FastPPOError("no policy model given: pass --model PATH (a local folder or a hub id)")
    for name in (
        "steps",
        "prompts_per_step",
        "num_generations",
        "mini_batch_size",
        "gradient_accumulation_steps",
        "ppo_epochs",
        "learning_rate",
        "clip_coef",
        "max_grad_norm",
        "kl_horizon",
    ):
        _positive(name, getattr(ppo, name))
    _positive("kl_warn", ppo.kl_warn)
    if sampling.missing_eos_penalty is not None and not math.isfinite(sampling.missing_eos_penalty):
        raise FastPPOError(f"--missing-eos-penalty must be a finite number, got {sampling.missing_eos_penalty}")
    for name in ("target_kl", "kl_target", "reward_clip"):
        if getattr(ppo, name) is not None:
            _positive(name, getattr(ppo, name))
    for name in ("vf_coef", "ent_coef", "kl_coef"):
        if not 0 <= getattr(ppo, name) < math.inf:
            raise FastPPOError(f"--{name.replace('_', '-')} must be 0 or positive, got {getattr(ppo, name)}")
    for name in ("gamma", "gae_lambda"):
        if not 0 <= getattr(ppo, name) <= 1:
            raise FastPPOError(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(ppo, name)}")
    for name in ("max_prompt_length", "max_new_tokens", "temperature"):
        _positive(name, getattr(sampling, name))
    batch = ppo.prompts_per_step * ppo.num_generations
    if batch % ppo.mini_batch_size:
        raise FastPPOError(
            f"--mini-batch-size {ppo.mini_batch_size} must divide the rollout size prompts_per_step * "
            f"num_generations = {batch}"
        )
    if ppo.mini_batch_size % ppo.gradient_accumulation_steps:
        raise FastPPOError(
            f"--gradient-accumulation-steps {ppo.gradient_accumulation_steps} must divide --mini-batch-size "
            f"{ppo.mini_batch_size}"
        )
    if ppo.estimator in ("grpo", "rloo") and ppo.num_generations < 2:
        raise FastPPOError(
            f"--estimator {ppo.estimator} compares samples of the same prompt: set --num-generations 2 or more"
        )
    if not 0.0 < sampling.top_p <= 1.0:
        raise FastPPOError(f"--top-p must be in (0, 1], got {sampling.top_p}")
    if sampling.top_k < 0:
        raise FastPPOError(f"--top-k must be 0 (off) or positive, got {sampling.top_k}")
    if sampling.top_k or sampling.top_p < 1.0:
        # Scoring under the truncated distribution is no cure: a sampled token outside the
        # reference's own top-k/top-p set has probability 0 there, an infinite KL (TRL's PPO
        # docs likewise ask for top_k=0, top_p=1).
        warnings.warn(
            "--top-k/--top-p draw tokens from a truncated distribution, but the old, new and reference log-probs are "
            "scored under the full tempered distribution: the PPO ratio and the KL ignore the truncation; "
            "leave both off (--top-k 0 --top-p 1) to train on the distribution you sample from",
            stacklevel=2,
        )
    if not 0.0 < sampling.vllm_gpu_memory <= 1.0:
        raise FastPPOError(f"--vllm-gpu-memory must be in (0, 1], got {sampling.vllm_gpu_memory}")
    if sampling.generator == "vllm":
        require_vllm(model)
    check_model_path(model.model, "--model")  # before any loading, as the flags above
    if ppo.critic_model is not None:
        check_model_path(ppo.critic_model, "--critic-model")
    _validate_parallel(model, sampling.generator)


def validate_run(
    run: RunConfig, schedule: LRScheduleConfig, monitor: MonitorConfig | None = None, total_steps: int | None = None
) -> None:
    """Check what a PPO, DPO or reward-model run logs and saves, and its learning-rate schedule over
    ``total_steps`` optimizer steps when known (``monitor``: PPO only)."""
    if schedule.lr_warmup_steps < 0:
        raise FastPPOError(f"--lr-warmup-steps must be 0 or positive, got {schedule.lr_warmup_steps}")
    if total_steps is not None and schedule.lr_warmup_steps > total_steps:
        raise FastPPOError(
            f"--lr-warmup-steps {schedule.lr_warmup_steps} is more than the run's {total_steps} optimizer steps: "
            "the learning rate would never reach --learning-rate; warm up over fewer steps"
        )
    check_seed(run.seed, "--seed")
    if run.save_every < 0:
        raise FastPPOError(f"--save-every must be 0 (at the end only) or positive, got {run.save_every}")
    if run.keep_checkpoints < 1:
        raise FastPPOError(f"--keep-checkpoints must be 1 or more, got {run.keep_checkpoints}")
    if run.torch_threads < 0:
        raise FastPPOError(f"--torch-threads must be 0 (torch's default) or positive, got {run.torch_threads}")
    if monitor is not None:
        if monitor.sample_every < 0:
            raise FastPPOError(f"--sample-every must be 0 (last step only) or positive, got {monitor.sample_every}")
        _positive("num_samples", monitor.num_samples)
        _positive("eval_every", monitor.eval_every)
    if run.report_to == "wandb":
        from fastppo.training.logger import import_wandb

        import_wandb()


def validate_dpo(model: ModelConfig, dpo: DPOConfig) -> None:
    if not model.model:
        raise FastPPOError("no policy model given: pass --model PATH (a local folder or a hub id)")
    for name in (
        "beta",
        "epochs",
        "batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "max_grad_norm",
        "max_prompt_length",
        "max_completion_length",
    ):
        _positive(name, getattr(dpo, name))
    if dpo.batch_size % dpo.gradient_accumulation_steps:
        raise FastPPOError(
            f"--gradient-accumulation-steps {dpo.gradient_accumulation_steps} must divide --batch-size {dpo.batch_size}"
        )
    if dpo.loss == "cdpo" and not 0.0 < dpo.label_smoothing < 0.5:
        raise FastPPOError(f"--loss cdpo needs --label-smoothing in (0, 0.5), got {dpo.label_smoothing}")
    if dpo.loss != "cdpo" and dpo.label_smoothing:
        raise FastPPOError(f"--label-smoothing is conservative DPO's: pass --loss cdpo (got --loss {dpo.loss})")
    check_model_path(model.model, "--model")
    _validate_parallel(model, "hf")


def _validate_parallel(model: ModelConfig, generator: str) -> None:
    from fastppo.training.distributed import launched_world_size  # imports torch: not at config import time

    validate_parallel(model, launched_world_size(), generator)


@dataclass
class RLHFConfig:
    """Everything ``fastppo rlhf`` needs besides the reward and the prompts."""

    model: ModelConfig
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    run: RunConfig = field(default_factory=RunConfig)
    schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)


@dataclass
class DPOTrainerConfig:
    """Everything ``fastppo dpo`` needs besides the preference data."""

    model: ModelConfig
    dpo: DPOConfig = field(default_factory=DPOConfig)
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/dpo"))
    schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)


@dataclass
class RewardModelTrainerConfig:
    """Everything ``fastppo reward-model`` needs besides the preference data."""

    model: ModelConfig
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/reward-model"))
    schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)


def require_vllm(model: ModelConfig) -> None:
    """The one-line errors of ``--generator vllm`` where it cannot run, before anything is loaded."""
    if model.lora:
        raise FastPPOError(
            "--generator vllm does not support --lora yet (the adapters would have to be merged into the engine "
            "after every update): use --generator hf"
        )
    from fastppo.devices import resolve_device  # imports torch: not at config import time

    if resolve_device(model.device).type != "cuda":
        raise FastPPOError("--generator vllm needs a CUDA GPU and this run is on the CPU: use --generator hf")
    try:
        import vllm  # noqa: F401  # imported, not just found: a broken install fails here too
    except ImportError as exc:
        raise FastPPOError(
            f"--generator vllm needs vLLM, which is not installed: {install_extra('vllm')} (on a GPU machine; it "
            "brings its own CUDA build of torch)"
        ) from exc


def validate_parallel(model: ModelConfig, world_size: int, generator: str = "hf") -> None:
    """What torchrun and ``--fsdp`` cannot do, said before any loading."""
    if model.fsdp and world_size < 2:
        raise FastPPOError(
            "--fsdp shards the model over the processes of a torchrun launch: run under torchrun "
            "--nproc-per-node N (N >= 2), or drop --fsdp"
        )
    if model.fsdp and model.lora:
        raise FastPPOError(
            "--fsdp does not take --lora: LoRA already trains a small share of the weights; drop one of them"
        )
    if model.fsdp and model.dtype == "fp16":
        # GradScaler would see only this rank's shard of the gradients: the ranks could disagree on skipping a step.
        raise FastPPOError(
            "--fsdp does not take --dtype fp16 (its loss scaling is per process): use --dtype bf16 or fp32"
        )
    if world_size > 1 and generator != "hf":
        raise FastPPOError(f"--generator {generator} is not supported under torchrun: use --generator hf")
