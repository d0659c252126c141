"""Loading the policy, its frozen reference, the critic and a reward model with transformers.

Every model is loaded with dropout set to zero: PPO's ratio compares two forward passes of the
same weights, and dropout would make the first ratio differ from 1 by noise alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, cast

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from fastppo.devices import resolve_device
from fastppo.errors import FastPPOError
from fastppo.rlhf.config import ModelConfig, RunConfig, check_model_path

PAD_TOKEN = "<|pad|>"
POLICY_DIR = "policy"
CRITIC_DIR = "critic"
VALUE_HEAD_FILE = "value_head.safetensors"

if TYPE_CHECKING:
    from peft import PeftModel

CausalLM: TypeAlias = "PreTrainedModel | PeftModel"
"""A policy: a transformers model, or with LoRA peft's wrapper of one."""

ModuleT = TypeVar("ModuleT", bound=nn.Module)


class Critic(nn.Module):
    """V per token: a linear head on the policy's last hidden state (``trunk=None``, shared
    trunk) or on a trunk of its own (a separate model initialised from the policy or a reward model)."""

    def __init__(self, hidden_size: int, trunk: PreTrainedModel | None = None) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(hidden_size, 1)
        # Values start at 0 so the first advantages are the rewards themselves, not head noise.
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)


@dataclass
class Models:
    """The models of a run. ``reference is None`` means LoRA: the reference is the policy with its
    adapters disabled (see :func:`reference_model`), so the base weights exist once in memory."""

    tokenizer: PreTrainedTokenizerBase
    policy: CausalLM
    reference: PreTrainedModel | None
    critic: Critic | None

    def trainable_parameters(self) -> list[nn.Parameter]:
        modules: list[nn.Module] = [self.policy] + ([self.critic] if self.critic is not None else [])
        return [p for m in modules for p in m.parameters() if p.requires_grad]


@contextmanager
def _loading(path: str) -> Iterator[None]:
    """A model that cannot be loaded as one FastPPOError line."""
    try:
        yield
    except (OSError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FastPPOError(
            f"cannot load {path!r} ({first_line}): pass a folder written by save_pretrained or a reachable hub id"
        ) from exc
    except Exception as exc:
        # torch.load(weights_only=True) refusing a .bin that holds more than tensors raises
        # pickle.UnpicklingError, told by its name: no module here imports pickle.
        if type(exc).__name__ != "UnpicklingError":
            raise
        raise FastPPOError(
            f"cannot load {path!r}: its weights are a pickle that holds more than tensors, and unpickling it "
            "could run code: save the model as safetensors (save_pretrained's default) or pass another model"
        ) from None


class _Pretrained(Protocol):
    """A transformers Auto class: what ``from_pretrained`` returns depends on the class and its arguments."""

    def from_pretrained(self, *args: Any, **kwargs: Any) -> Any: ...


def _load(loader: _Pretrained, path: str, **kwargs: Any) -> Any:
    check_model_path(path, "model path")
    with _loading(path):
        return loader.from_pretrained(path, **kwargs)


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer, padding and truncating on the left (prompts end where generation starts).

    A tokenizer without a pad token, or one that pads with EOS, gets a dedicated pad token, so a
    real EOS is never mistaken for padding; the models' embeddings grow to match (see _fit_embeddings)."""
    tokenizer = _load(AutoTokenizer, path)
    if tokenizer.eos_token_id is None:
        raise FastPPOError(f"the tokenizer of {path!r} has no EOS token: set eos_token in its tokenizer_config.json")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        _add_pad_token(tokenizer, path, "distinct from EOS")
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    return tokenizer


def _add_pad_token(tokenizer: PreTrainedTokenizerBase, path: str, why: str) -> None:
    warnings.warn(
        f"the tokenizer of {path!r} has no pad token {why}: added {PAD_TOKEN!r} as pad token "
        "(the models' embeddings grow by one row); save a tokenizer with its own pad token to silence this",
        stacklevel=3,
    )
    tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})


def _config_without_dropout(path: str) -> PretrainedConfig:
    config = _load(AutoConfig, path)
    for name, value in vars(config).items():
        if isinstance(value, float) and ("dropout" in name or "pdrop" in name):
            setattr(config, name, 0.0)
    return config


def _disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def _fit_embeddings(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Grow the embeddings for tokens the tokenizer added (the pad token). New rows are the mean
    of the old ones, not random: policy and reference get the same rows and stay identical."""
    # transformers annotates both as nn.Module: a causal LM's are an embedding and a linear head
    old = cast(nn.Embedding, model.get_input_embeddings()).num_embeddings
    if len(tokenizer) <= old:
        return
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        embeddings = (
            cast(nn.Embedding, model.get_input_embeddings()),
            cast(nn.Linear | None, model.get_output_embeddings()),
        )
        for embedding in embeddings:
            if embedding is not None:
                embedding.weight[old:] = embedding.weight[:old].mean(dim=0)


def _prepared(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, device: torch.device) -> PreTrainedModel:
    _fit_embeddings(model, tokenizer)
    _disable_dropout(model)
    model.config.pad_token_id = tokenizer.pad_token_id
    # fp32 whatever the checkpoint's dtype (transformers loads a bf16 one as bf16): these are the
    # master weights (see Precision), and a bf16 trunk would feed the fp32 value head a bf16 input.
    # transformers' decorator on PreTrainedModel.to hides its signature from mypy
    return model.to(device=device, dtype=torch.float32)  # type: ignore[call-arg]


def load_causal_lm(path: str, tokenizer: PreTrainedTokenizerBase, device: torch.device) -> PreTrainedModel:
    model = _load(AutoModelForCausalLM, path, config=_config_without_dropout(path))
    return _prepared(model, tokenizer, device)


def _frozen(model: ModuleT) -> ModuleT:
    model.requires_grad_(False)
    return model.eval()


def _add_lora(model: PreTrainedModel, cfg: ModelConfig) -> PeftModel:
    from peft import LoraConfig, get_peft_model

    targets = [name.strip() for name in cfg.lora_target_modules.split(",")] if cfg.lora_target_modules else None
    lora = LoraConfig(
        r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM"
    )
    try:
        return get_peft_model(model, lora)
    except ValueError as exc:
        raise FastPPOError(
            f"cannot add LoRA adapters ({exc}): name the layers with --lora-target-modules, e.g. q_proj,v_proj"
        ) from exc


def load_models(
    cfg: ModelConfig, critic: str | None, critic_model: str | None = None, resume_from: Path | None = None
) -> Models:
    """Tokenizer, policy, reference and critic (``critic`` is "shared", "separate" or None).

    With ``resume_from`` (a checkpoint folder) the trained weights come from there; the reference
    always comes from ``cfg.model``, the starting point the KL penalty anchors to."""
    device = resolve_device(cfg.device)
    tokenizer = load_tokenizer(cfg.model)
    policy: CausalLM
    reference: PreTrainedModel | None
    if cfg.lora:
        policy = load_causal_lm(cfg.model, tokenizer, device)
        if resume_from is None:
            policy = _add_lora(policy, cfg)
        else:
            from peft import PeftModel

            with _loading(str(resume_from / POLICY_DIR)):
                policy = PeftModel.from_pretrained(policy, str(resume_from / POLICY_DIR), is_trainable=True)
        reference = None
    else:
        policy = load_causal_lm(str(resume_from / POLICY_DIR) if resume_from else cfg.model, tokenizer, device)
        reference = _frozen(load_causal_lm(cfg.model, tokenizer, device))
    policy.train()  # dropout is off; train mode keeps the numerics of rollout and update identical
    models = Models(
        tokenizer,
        policy,
        reference,
        _load_critic(critic, critic_model or cfg.model, policy, tokenizer, device, resume_from),
    )
    if cfg.gradient_checkpointing:
        # Non-reentrant checkpointing takes gradients through inputs that do not require them, as
        # with LoRA's frozen embeddings (the reentrant kind would need enable_input_require_grads).
        for model in (policy, models.critic.trunk if models.critic is not None else None):
            if model is not None:
                enable = (
                    getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
                )  # renamed in transformers 5
                enable({"use_reentrant": False})
    return models


def _load_critic(
    kind: str | None,
    init_from: str,
    policy: CausalLM,
    tokenizer: PreTrainedTokenizerBase,
    device: torch.device,
    resume_from: Path | None,
) -> Critic | None:
    if kind is None:
        return None
    # Initialised from a copy of torch's RNG: building the critic leaves the sampling stream as it
    # was, so a GAE run samples the same first rollout as a GRPO or RLOO run of the same seed.
    with torch.random.fork_rng(devices=[]):
        if kind == "shared":
            critic = Critic(policy.config.hidden_size)
        else:
            source = str(resume_from / CRITIC_DIR) if resume_from else init_from
            trunk = _load(AutoModel, source, config=_config_without_dropout(source))
            critic = Critic(trunk.config.hidden_size, _prepared(trunk, tokenizer, device))
    if resume_from is not None:
        critic.head.load_state_dict(load_file(resume_from / VALUE_HEAD_FILE))
    return critic.to(device).train()


def save_models(models: Models, folder: Path, full_states: dict[str, dict[str, Tensor] | None] | None = None) -> None:
    """Policy (adapters only with LoRA) and tokenizer via save_pretrained, so ``folder/policy`` is a
    loadable model; the critic's trunk likewise and its head as safetensors. ``full_states``: the
    "policy" and "critic" state dicts to write instead of the modules' own (FSDP's gathered shards)."""
    policy_state, critic_state = (full_states or {}).get("policy"), (full_states or {}).get("critic")
    models.policy.save_pretrained(str(folder / POLICY_DIR), state_dict=policy_state)
    models.tokenizer.save_pretrained(folder / POLICY_DIR)
    if models.critic is not None:
        critic_state = critic_state or models.critic.state_dict()
        if models.critic.trunk is not None:
            models.critic.trunk.save_pretrained(
                folder / CRITIC_DIR,
                state_dict={k.removeprefix("trunk."): v for k, v in critic_state.items() if k.startswith("trunk.")},
            )
        save_file(
            {k.removeprefix("head."): v.contiguous() for k, v in critic_state.items() if k.startswith("head.")},
            folder / VALUE_HEAD_FILE,
        )


@contextmanager
def reference_model(models: Models) -> Iterator[CausalLM]:
    """The frozen reference: the separate copy, or with LoRA the policy with adapters disabled."""
    if models.reference is not None:
        yield models.reference
    else:
        policy = cast("PeftModel", models.policy)  # no separate reference: LoRA's
        with policy.disable_adapter():
            yield policy


def start_run(run: RunConfig) -> None:
    """Seed torch (initialisation, sampling) and set its CPU threads as the run asks."""
    torch.manual_seed(run.seed)
    if run.torch_threads:
        torch.set_num_threads(run.torch_threads)


def load_reward_model(
    path: str, device: torch.device, trainable: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A frozen AutoModelForSequenceClassification whose first logit is the score, with its tokenizer
    as it was saved: the special tokens and padding side the model was trained with (an encoder
    such as BERT has no EOS and pads on the right). Only a missing pad token is added.

    ``trainable``: a model to train (``fastppo reward-model``), from a reward model or from any
    causal LM or encoder checkpoint, whose new score head then has one output."""
    tokenizer = _load(AutoTokenizer, path)
    if tokenizer.pad_token_id is None:
        _add_pad_token(tokenizer, path, "to batch texts with")
    config = _config_without_dropout(path)
    if trainable:
        config.num_labels = 1  # a causal LM's config has the default 2
    model, loading = _load(AutoModelForSequenceClassification, path, config=config, output_loading_info=True)
    untrained = sorted(loading["missing_keys"]) + sorted(
        str(key[0] if isinstance(key, tuple) else key) for key in loading["mismatched_keys"]
    )
    if untrained and not trainable:  # transformers would fill them with random numbers: the scores would be noise
        raise FastPPOError(
            f"the reward model {path!r} has no trained score head (its weights lack {', '.join(untrained[:3])}, "
            f"so its scores would be random noise): train one with fastppo reward-model --model {path}, or pass "
            "a sequence-classification model folder"
        )
    model = _prepared(model, tokenizer, device)
    return (model.train() if trainable else _frozen(model)), tokenizer


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class Precision:
    """The compute dtype of training: torch.autocast on fp32 weights.

    The weights stay fp32 and are the master weights; AdamW's state is fp32 too. Under autocast the
    matmuls of forward and backward run in bf16/fp16 (the weights are cast per op, which is the
    refresh of a low-precision copy), and the gradients land in fp32 on the fp32 leaves, so AdamW
    steps the masters exactly as in fp32 training. This is the fp32-master scheme without a second
    copy of the weights to keep in sync, and the same code on CPU and GPU; updating bf16 weights in
    place instead rounds away every step smaller than half an ulp (2^-9 relative). fp16 adds loss
    scaling (GradScaler) against gradient underflow. ``auto`` is bf16 on GPU and fp32 on CPU."""

    def __init__(self, name: str, device: torch.device) -> None:

        self.dtype = DTYPES[name] if name != "auto" else (torch.bfloat16 if device.type == "cuda" else torch.float32)
        if self.dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise FastPPOError(f"{torch.cuda.get_device_name(device)} has no bf16: use --dtype fp16 or fp32")
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.dtype == torch.float16)

    @property
    def skips_non_finite_steps(self) -> bool:
        """fp16's loss scaling: a step whose gradients overflow is skipped (its gradient norm is inf) and
        the scale lowered."""
        return self.scaler.is_enabled()

    def autocast(self) -> AbstractContextManager:
        return torch.autocast(device_type=self.device_type, dtype=self.dtype, enabled=self.dtype != torch.float32)

    def backward(self, loss: Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params: list[nn.Parameter], max_grad_norm: float) -> Tensor:
        """Unscale, clip, step (the scaler skips steps with inf/NaN gradients), zero the gradients;
        returns the gradient norm before clipping."""
        self.scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        self.scaler.step(optimizer)
        self.scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return grad_norm.detach()

    def state_dict(self) -> dict:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if state:  # empty from a run without loss scaling: an fp16 resume of it starts a fresh scale
            self.scaler.load_state_dict(state)
