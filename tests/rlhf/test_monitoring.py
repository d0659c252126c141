"""What a run shows and how it is steered over time: sample tables, eval prompts, the learning-rate
schedule (with exact resume), W&B logging, and the vLLM generator's errors (issue 18)."""

from __future__ import annotations

import json
import shutil
import sys
from contextlib import nullcontext
from dataclasses import fields, replace
from types import ModuleType, SimpleNamespace

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fastppo.core import warmup_scheduled
from fastppo.errors import FastPPOError
from fastppo.rlhf.config import (
    LRScheduleConfig,
    ModelConfig,
    MonitorConfig,
    PPOConfig,
    RunConfig,
    SamplingConfig,
    validate_ppo,
    validate_run,
)
from fastppo.rlhf.trainer import train
from tests.support.paths import ROOT
from tests.support.tiny_lm import PROMPTS, deterministic, early_letters, run_cli, tiny_config

EVAL_PROMPTS = ["abc", "hello world", "ok"]


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _monitored(tiny_model, output_dir, steps=5, **monitor):
    cfg = tiny_config(tiny_model, output_dir, steps=steps)
    return replace(cfg, monitor=MonitorConfig(**monitor))


def test_sample_tables_every_k_steps_and_at_the_end(tiny_model, tmp_path) -> None:
    train(_monitored(tiny_model, tmp_path, steps=5, sample_every=2, num_samples=3), early_letters, PROMPTS)
    rows = _jsonl(tmp_path / "samples.jsonl")
    assert [r["global_step"] for r in rows] == [2, 2, 2, 4, 4, 4, 5, 5, 5]
    assert all(
        set(r) == {"global_step", "table", "prompt", "completion", "reward"} and r["table"] == "rollout" for r in rows
    )
    assert all(r["prompt"] in PROMPTS for r in rows)
    # Each row's reward is the reward function's score of that very completion.
    assert [r["reward"] for r in rows] == pytest.approx(
        early_letters([r["prompt"] for r in rows], [r["completion"] for r in rows])
    )
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    text = events.Tensors("samples/rollout/text_summary")
    assert [e.step for e in text] == [2, 4, 5]
    table = text[-1].tensor_proto.string_val[0].decode()
    assert table.splitlines()[0] == "|prompt|completion|reward|" and len(table.splitlines()) == 2 + 3


def test_eval_prompts_are_scored_greedily_at_the_right_steps(tiny_model, tmp_path) -> None:
    history = train(
        _monitored(tiny_model, tmp_path, steps=5, eval_every=2, num_samples=len(EVAL_PROMPTS)),
        early_letters,
        PROMPTS,
        EVAL_PROMPTS,
    )
    logged = {r["global_step"]: r for r in _jsonl(tmp_path / "metrics.jsonl")}
    assert [step for step, r in logged.items() if "eval/reward_mean" in r] == [2, 4, 5]
    assert "eval/reward_mean" not in history[0]
    tables = [r for r in _jsonl(tmp_path / "samples.jsonl") if r["table"] == "eval"]
    for step in (2, 4, 5):
        rows = [r for r in tables if r["global_step"] == step]
        assert [r["prompt"] for r in rows] == EVAL_PROMPTS
        assert logged[step]["eval/reward_mean"] == pytest.approx(
            sum(early_letters([], [r["completion"] for r in rows])) / len(rows)
        )
        assert {"eval/reward_std", "eval/response_length", "eval/eos_fraction"} <= set(logged[step])


def test_eval_is_greedy_hence_reproducible(tiny_model, tmp_path) -> None:
    # Same weights, two different sampling seeds: greedy completions must not depend on the RNG.
    from fastppo.rlhf.evaluation import evaluate
    from fastppo.rlhf.generation import HFGenerator
    from fastppo.rlhf.models import load_models

    models = load_models(ModelConfig(model=str(tiny_model)), critic=None)
    generator = HFGenerator(models, SamplingConfig(max_new_tokens=8), nullcontext)
    results = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        results.append(
            evaluate(models, generator, EVAL_PROMPTS, early_letters, SamplingConfig(max_new_tokens=8), batch_size=2)
        )
    assert results[0] == results[1]


def test_lr_schedule_is_applied_and_logged(tiny_model, tmp_path) -> None:
    cfg = replace(
        tiny_config(tiny_model, tmp_path, steps=5, learning_rate=1e-3), schedule=LRScheduleConfig("cosine", 2)
    )
    history = train(cfg, early_letters, PROMPTS)
    assert [h["charts/learning_rate"] for h in history] == pytest.approx(
        [warmup_scheduled("cosine", 1e-3, s, 5, 2) for s in range(1, 6)]
    )
    assert [h["charts/learning_rate"] for h in history] == pytest.approx(
        [5e-4, 1e-3, 1e-3, 1e-3 * 0.5 * (1 + 0.5), 1e-3 * 0.5 * (1 - 0.5)]
    )


def test_resume_mid_schedule_continues_exactly(tiny_model, tmp_path) -> None:
    """Stopped after step 2 of 4 (in the middle of a linear decay after warm-up), the resumed run
    repeats the uninterrupted run's steps 3 and 4: same learning rates, same losses and rewards."""
    cfg = tiny_config(tiny_model, tmp_path / "full", steps=4, learning_rate=1e-3)
    cfg = replace(cfg, schedule=LRScheduleConfig("linear", 1), run=replace(cfg.run, save_every=2))
    full = train(cfg, early_letters, PROMPTS)
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-000002", interrupted / "checkpoint-000002")
    (interrupted / "latest").write_text("checkpoint-000002")
    resumed = train(
        replace(cfg, run=replace(cfg.run, output_dir=str(interrupted), resume=True)), early_letters, PROMPTS
    )
    assert [h["charts/learning_rate"] for h in resumed] == pytest.approx([1e-3 * 2 / 3, 1e-3 / 3])
    assert [deterministic(h) for h in resumed] == [
        pytest.approx(deterministic(h), rel=1e-5, abs=1e-6) for h in full[2:]
    ]


def test_dpo_follows_the_lr_schedule(tiny_model, tmp_path) -> None:
    from fastppo.rlhf.config import DPOConfig, DPOTrainerConfig
    from fastppo.rlhf.data import PreferencePair
    from fastppo.rlhf.dpo import train_dpo

    pairs = [PreferencePair("hello", "abc", "xyz")] * 4
    cfg = DPOTrainerConfig(
        ModelConfig(model=str(tiny_model)),
        DPOConfig(batch_size=1, learning_rate=1e-3),
        RunConfig(output_dir=str(tmp_path), progress=False),
        LRScheduleConfig("linear", 1),
    )
    history = train_dpo(cfg, pairs)
    assert [h["charts/learning_rate"] for h in history] == pytest.approx([1e-3, 1e-3, 1e-3 * 2 / 3, 1e-3 / 3])


def test_wandb_offline_run_holds_the_metrics_and_samples(tiny_model, tmp_path, monkeypatch) -> None:
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # no network, no account: the run is written locally
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = _monitored(tiny_model, tmp_path / "my-run", steps=2, sample_every=1, num_samples=2)
    history = train(
        replace(cfg, run=replace(cfg.run, report_to="wandb", wandb_project="fastppo-test")), early_letters, PROMPTS
    )
    # W&B's service process writes the run's log: finish() can return before it is on disk (CI once
    # read only its 8-byte header). Ending the service, as a process exit does, flushes it.
    wandb.teardown()
    run_id = (tmp_path / "my-run" / "wandb-run-id").read_text()
    [folder] = (tmp_path / "my-run" / "wandb").glob(f"offline-run-*-{run_id}")
    records = (folder / f"run-{run_id}.wandb").read_bytes()
    assert b"my-run" in records and b"fastppo-test" in records  # run name = output folder, project
    for h in history:
        assert json.dumps(h["rlhf/reward_mean"]).encode() in records
    tables = sorted((folder / "files" / "media" / "table" / "samples").glob("rollout_*.table.json"))
    assert len(tables) == 2
    samples = [r for r in _jsonl(tmp_path / "my-run" / "samples.jsonl") if r["global_step"] == 2]
    assert json.loads(tables[-1].read_text())["data"] == [[r["prompt"], r["completion"], r["reward"]] for r in samples]


def test_wandb_missing_is_a_one_line_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(FastPPOError, match=r'pip install -e "\.\[wandb\]" in the fastppo repository'):
        validate_run(RunConfig(report_to="wandb"), LRScheduleConfig())


def test_wandb_refusing_to_start_is_a_one_line_error(tmp_path, monkeypatch) -> None:
    """No API key (wandb.init's UsageError) or any other W&B error: a FastPPOError, not a traceback."""
    wandb = pytest.importorskip("wandb")
    from fastppo.training.logger import RunLogger

    def refuse(**kwargs):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", refuse)
    with pytest.raises(
        FastPPOError,
        match=(
            r"--report-to wandb: W&B could not start the run \(No API key configured"
            r".*wandb login.*WANDB_MODE=offline"
        ),
    ):
        RunLogger(tmp_path, 1, tensorboard=False, progress=False, wandb_project="p")


def test_cli_eval_prompts_and_schedule(tiny_model, tmp_path) -> None:
    prompts, eval_prompts = tmp_path / "p.jsonl", tmp_path / "eval.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    eval_prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in EVAL_PROMPTS))
    base = [
        "rlhf",
        "--model",
        str(tiny_model),
        "--reward",
        "tests.support.tiny_lm:early_letters",
        "--prompts",
        str(prompts),
        "--steps",
        "2",
        "--prompts-per-step",
        "2",
        "--mini-batch-size",
        "2",
        "--ppo-epochs",
        "1",
        "--max-new-tokens",
        "4",
        "--no-progress",
    ]
    with pytest.raises(FastPPOError, match="--eval-prompts .*missing.jsonl.* does not exist"):
        run_cli([*base, "--output-dir", str(tmp_path / "x"), "--eval-prompts", str(tmp_path / "missing.jsonl")])
    assert (
        run_cli(
            [
                *base,
                "--output-dir",
                str(tmp_path / "run"),
                "--eval-prompts",
                str(eval_prompts),
                "--eval-every",
                "1",
                "--sample-every",
                "1",
                "--num-samples",
                "2",
                "--lr-schedule",
                "linear",
                "--lr-warmup-steps",
                "1",
                "--learning-rate",
                "0.01",
            ]
        )
        == 0
    )
    logged = _jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["charts/learning_rate"] for r in logged] == pytest.approx([0.01, 0.01])
    assert all("eval/reward_mean" in r for r in logged)
    assert [(r["global_step"], r["table"]) for r in _jsonl(tmp_path / "run" / "samples.jsonl")] == [
        (1, "rollout")
    ] * 2 + [(1, "eval")] * 2 + [(2, "rollout")] * 2 + [(2, "eval")] * 2


def test_vllm_generator_needs_a_gpu(tiny_model) -> None:
    with pytest.raises(FastPPOError, match="--generator vllm needs a CUDA GPU"):
        validate_ppo(ModelConfig(model=str(tiny_model), device="cpu"), SamplingConfig(generator="vllm"), PPOConfig())


def test_vllm_generator_needs_vllm(tiny_model, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine: device auto -> cuda
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(
        FastPPOError, match=r'needs vLLM, which is not installed: pip install -e "\.\[vllm\]" in the fastppo repository'
    ):
        validate_ppo(ModelConfig(model=str(tiny_model)), SamplingConfig(generator="vllm"), PPOConfig())
    with pytest.raises(FastPPOError, match="does not support --lora"):
        validate_ppo(ModelConfig(model=str(tiny_model), lora=True), SamplingConfig(generator="vllm"), PPOConfig())


def test_vllm_error_comes_before_any_loading(tiny_model, tmp_path) -> None:
    # The CLI checks the flags before reading prompts or loading the reward: the missing prompts file is never reached.
    with pytest.raises(FastPPOError, match="--generator vllm needs a CUDA GPU"):
        run_cli(
            [
                "rlhf",
                "--model",
                str(tiny_model),
                "--reward",
                "x:y",
                "--prompts",
                str(tmp_path / "none.jsonl"),
                "--generator",
                "vllm",
                "--device",
                "cpu",
            ]
        )


def test_the_rlhf_guide_documents_every_new_flag() -> None:
    guide = (ROOT / "docs" / "guides" / "rlhf.md").read_text()
    flags = ["--eval-prompts", "--report-to", "--wandb-project", "--generator", "--vllm-gpu-memory"]
    flags += [f"--{f.name.replace('_', '-')}" for cls in (LRScheduleConfig, MonitorConfig) for f in fields(cls)]
    assert [flag for flag in flags if f"`{flag}" not in guide] == []


class _FakeLLM:
    """A stand-in for vllm.LLM with the calls VLLMGenerator makes: it records the engine's
    settings and the weights it is given, and "generates" each prompt's own ids followed by EOS."""

    def __init__(self, **settings):
        self.settings, self.loaded, self.requests = settings, {}, []

    def apply_model(self, func):
        return [func(self)]  # one worker, whose model is this object

    def load_weights(self, weights):
        self.loaded = {name: tensor.clone() for name, tensor in weights}

    def reset_prefix_cache(self):
        pass

    def generate(self, prompts, params, use_tqdm):
        self.requests.append((prompts, params))
        eos = params.stop_token_ids[0]
        outputs = [(p["prompt_token_ids"] + [eos])[: params.max_tokens] for p in prompts]
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids)]) for ids in outputs]


def test_vllm_generator_against_a_stand_in_engine(tmp_path, monkeypatch) -> None:
    """The glue of --generator vllm without vLLM: prompts handed over without their left padding,
    completions padded back into a tensor, greedy = temperature 0, and the policy's current weights
    loaded into the engine at start and after a change, trimmed to the checkpoint's vocabulary."""
    from fastppo.rlhf.generation import VLLMGenerator
    from fastppo.rlhf.models import load_models
    from tests.support.tiny_lm import build_model_folder

    vllm, inputs = ModuleType("vllm"), ModuleType("vllm.inputs")
    vllm.LLM, vllm.SamplingParams, inputs.TokensPrompt = _FakeLLM, SimpleNamespace, dict
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    folder = build_model_folder(
        tmp_path / "no-pad", with_pad=False
    )  # load_models adds a pad token: one row more than the checkpoint
    with pytest.warns(UserWarning, match="no pad token distinct from EOS"):
        models = load_models(ModelConfig(model=str(folder)), critic=None)
    sampling = SamplingConfig(max_new_tokens=4, max_prompt_length=16)
    generator = VLLMGenerator(models, ModelConfig(model=str(folder)), sampling, seed=3)
    llm = generator.llm
    assert llm.settings == {
        "model": str(folder),
        "dtype": "auto",
        "seed": 3,
        "gpu_memory_utilization": 0.3,
        "max_model_len": 20,
    }
    embeddings = models.policy.get_input_embeddings().weight
    checkpoint_rows = embeddings.shape[0] - 1
    assert llm.loaded["transformer.wte.weight"].shape[0] == checkpoint_rows
    assert torch.equal(llm.loaded["transformer.wte.weight"], embeddings[:checkpoint_rows])
    assert llm.loaded.keys() == models.policy.state_dict().keys()

    tokenizer = models.tokenizer
    query, query_mask = tokenizer(["ab", "hello"], padding=True, return_tensors="pt").values()
    response = generator.generate(query, query_mask, greedy=True)
    prompts, params = llm.requests[-1]
    assert [p["prompt_token_ids"] for p in prompts] == [tokenizer("ab")["input_ids"], tokenizer("hello")["input_ids"]]
    assert params.temperature == 0.0 and params.max_tokens == 4 and params.stop_token_ids == [tokenizer.eos_token_id]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert response.tolist() == [tokenizer("ab")["input_ids"] + [eos, pad], tokenizer("hell")["input_ids"]]
    generator.generate(query, query_mask)
    assert llm.requests[-1][1].temperature == sampling.temperature

    with torch.no_grad():
        models.policy.transformer.h[0].mlp.c_fc.weight.add_(1.0)
    generator.sync_weights()
    assert torch.equal(llm.loaded["transformer.h.0.mlp.c_fc.weight"], models.policy.transformer.h[0].mlp.c_fc.weight)
