"""--dtype: autocast compute on fp32 master weights and fp32 AdamW state; --gradient-checkpointing."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from fastppo.core import ppo_loss
from fastppo.rlhf.config import DPOConfig, DPOTrainerConfig, ModelConfig, RunConfig
from fastppo.rlhf.data import PreferencePair
from fastppo.rlhf.dpo import train_dpo
from fastppo.rlhf.models import Precision, load_models
from fastppo.rlhf.rewards import sequence_advantages
from fastppo.rlhf.tokens import encode_completions, encode_prompts, forward_tokens
from fastppo.rlhf.trainer import train
from tests.support.tiny_lm import PROMPTS, deterministic, early_letters, tiny_config

CPU = torch.device("cpu")


def _adamw_step(model: torch.nn.Module, grads: list[torch.Tensor], lr: float) -> None:
    for p, g in zip(model.parameters(), grads):
        p.grad = g.to(p.dtype)
    torch.optim.AdamW(model.parameters(), lr=lr).step()


def test_bf16_step_is_the_fp32_adamw_step_on_fp32_master_weights() -> None:
    """Under bf16 autocast the gradients are the fp32 ones to bf16 rounding, they land in fp32 on
    the fp32 weights, and the step equals fp32 AdamW's on the same gradients. The same step applied
    in place to bf16 weights leaves most of them unchanged: lr 1e-5 is below half a bf16 ulp."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    initial, fp32_model = copy.deepcopy(model), copy.deepcopy(model)
    x, y = torch.randn(128, 16), torch.randn(128, 1)
    precision = Precision("bf16", CPU)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    with precision.autocast():
        out = model(x)
        assert out.dtype == torch.bfloat16, "the forward computes in bf16"
        precision.backward((out.float() - y).square().mean())
    grads = [p.grad.clone() for p in model.parameters()]
    assert all(g.dtype == torch.float32 for g in grads)
    (fp32_model(x) - y).square().mean().backward()
    for g, g32 in zip(grads, (p.grad for p in fp32_model.parameters())):
        assert (g - g32).norm() < 0.03 * g32.norm(), "bf16 compute: relative error of a few 2^-8 roundings"

    precision.step(optimizer, list(model.parameters()), max_grad_norm=1e9)
    assert all(s.dtype == torch.float32 for state in optimizer.state.values() for s in state.values() if s.dim())
    expected = copy.deepcopy(initial)
    _adamw_step(expected, grads, lr=1e-5)
    for p, q, p0 in zip(model.parameters(), expected.parameters(), initial.parameters()):
        assert torch.equal(p, q)
        assert (p != p0).all(), "every master weight moved"

    pure_bf16 = copy.deepcopy(initial).to(torch.bfloat16)
    _adamw_step(pure_bf16, grads, lr=1e-5)
    moved = sum(int((p != p0.to(torch.bfloat16)).sum()) for p, p0 in zip(pure_bf16.parameters(), initial.parameters()))
    assert moved < 0.2 * sum(p.numel() for p in initial.parameters()), "in-place bf16 updates are mostly rounded away"


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory, tiny_model):
    """The tiny GPT-2 saved as a bf16 checkpoint (config dtype bfloat16), as released LLMs are."""
    folder = tmp_path_factory.mktemp("tiny-bf16")
    AutoModelForCausalLM.from_pretrained(tiny_model).to(torch.bfloat16).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_model / name).is_file():
            (folder / name).write_bytes((tiny_model / name).read_bytes())
    return folder


def test_bf16_ppo_on_cpu_moves_every_parameter_and_resumes(bf16_model, tmp_path) -> None:
    """The default PPO path (GAE, shared value head) from a bf16 checkpoint on CPU, at lr 1e-5:
    every weight of the policy and value head moves, checkpoints hold the fp32 masters, and a
    resumed run repeats the uninterrupted one."""
    full_cfg = tiny_config(bf16_model, tmp_path / "full", steps=2, learning_rate=1e-5)
    full_cfg = replace(full_cfg, model=replace(full_cfg.model, dtype="bf16"))
    full = train(full_cfg, early_letters, PROMPTS)
    trained = load_file(tmp_path / "full" / "checkpoint-000002" / "policy" / "model.safetensors")
    initial = load_file(bf16_model / "model.safetensors")
    for name, weight in trained.items():
        assert weight.dtype == torch.float32, name
        assert (weight != initial[name].float()).float().mean() > 0.99, f"{name} did not move"
    assert (load_file(tmp_path / "full" / "checkpoint-000002" / "value_head.safetensors")["weight"] != 0).all()

    interrupted = replace(
        full_cfg, ppo=replace(full_cfg.ppo, steps=1), run=replace(full_cfg.run, output_dir=str(tmp_path / "resumed"))
    )
    train(interrupted, early_letters, PROMPTS)
    resumed = train(
        replace(interrupted, ppo=full_cfg.ppo, run=replace(interrupted.run, resume=True)), early_letters, PROMPTS
    )
    assert deterministic(resumed[0]) == pytest.approx(deterministic(full[-1]), rel=1e-5, abs=1e-6)


def test_fp16_dpo_scales_the_loss_and_saves_the_scale(tiny_model, tmp_path) -> None:
    pairs = [PreferencePair("hi", "aaa", "zzz"), PreferencePair("ok", "bab", "xyx")]
    cfg = DPOTrainerConfig(
        model=ModelConfig(model=str(tiny_model), dtype="fp16"),
        dpo=DPOConfig(epochs=2, batch_size=2, learning_rate=1e-3),
        run=RunConfig(output_dir=str(tmp_path), progress=False, save_every=0),
    )
    history = train_dpo(cfg, pairs)
    assert history[-1]["dpo/margin"] > 0
    assert '"scale": 65536.0' in (tmp_path / "checkpoint-000002" / "trainer_state.json").read_text()


def _loss_and_grads(model_path, lora: bool, checkpointing: bool):
    torch.manual_seed(0)
    models = load_models(
        ModelConfig(model=str(model_path), lora=lora, gradient_checkpointing=checkpointing), critic="shared"
    )
    assert any(getattr(m, "gradient_checkpointing", False) for m in models.policy.modules()) == checkpointing
    with torch.no_grad():
        models.critic.head.weight.normal_()  # a zero head would give the trunk no value gradient
    query, query_mask = encode_prompts(models.tokenizer, PROMPTS[:4], 16, CPU)
    response, response_mask = encode_completions(models.tokenizer, ["abc", "de", "a", "bcd"], 8, CPU)
    new = forward_tokens(models.policy, models.critic, query, query_mask, response, response_mask)
    advantages = sequence_advantages(
        "rloo", torch.tensor([1.0, 0.0, 0.5, 0.2]), torch.zeros_like(new.logprobs), 0.0, response_mask, 2
    )
    old = new.logprobs.detach() - 0.1
    loss, _ = ppo_loss(
        new.logprobs,
        old,
        advantages,
        new.entropy,
        new.values,
        new.values.detach() + 0.3,
        advantages,
        clip_coef=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
        mask=response_mask,
    )
    loss.backward()
    return loss.detach(), {
        n: p.grad for n, p in [*models.policy.named_parameters(), *models.critic.named_parameters()] if p.requires_grad
    }


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_model, lora) -> None:
    loss, grads = _loss_and_grads(tiny_model, lora, checkpointing=False)
    loss_ckpt, grads_ckpt = _loss_and_grads(tiny_model, lora, checkpointing=True)
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys() and all(g is not None for g in grads_ckpt.values())
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=1e-5, atol=1e-7, msg=name)
