"""Tokens per second of `fastppo rlhf`: generation and training, for two random models built from
a GPT2Config (nothing is downloaded), on the CPU or (``--device cuda``) a GPU:

- tiny: 2 layers x 64 wide, 4 heads, a 30-token character vocabulary (the offline example's shape);
- gpt2-small: GPT-2 small's shape, 12 layers x 768 wide, 12 heads, 50257-token vocabulary, 124M
  parameters (the character tokenizer padded with filler tokens to 50257, so every id decodes).

    cd benchmarks && python rlhf_throughput.py       # ~6 min on 2 busy cores
    python rlhf_throughput.py --models tiny          # ~1 min
    python rlhf_throughput.py --device cuda --vllm   # on a GPU with fastppo[vllm]: HF generate vs vLLM

Per model, in the same process:

1. generate: `HFGenerator.generate` (transformers' generate with the KV cache, sampling at
   temperature 1) on 8 prompts x 32 new tokens, median of 3 timed calls after a warm-up; new
   tokens up to and including EOS per second. With ``--vllm`` the same prompts also through
   ``--generator vllm``'s engine (``VLLMGenerator``, after its first weight sync), and the ratio
   vLLM / HF is printed; where vLLM cannot run (no CUDA GPU, not installed) its one-line error.
2. `train()` for --steps PPO steps (GAE, shared value head, 8 prompts x 1 completion, 32 new
   tokens, 2 epochs of one minibatch of 8, fp32), the first step dropped as warm-up, medians of the
   trainer's own figures: perf/tokens_generated_per_s (completion tokens over the whole rollout:
   generation plus the policy, reference and value forward passes that rescore it) and
   perf/tokens_trained_per_s (prompt + completion tokens x epochs over the update: forward,
   backward and AdamW).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import nullcontext
from datetime import date
from pathlib import Path

import torch

from common import check_device, footer, header, positive

CHARS = "abcdefghijklmnopqrstuvwxyz "
PROMPTS = [
    "the quick brown fox",
    "hello there",
    "a long time ago",
    "once upon a time",
    "good morning sir",
    "what is this",
    "banana bread",
    "jazz music",
]
SHAPES = {
    "tiny": dict(n_layer=2, n_head=4, n_embd=64, n_positions=128, vocab_size=None),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257),
}
NEW_TOKENS = 32


def build(folder: Path, shape: dict) -> int:
    """A character tokenizer (padded with filler tokens to the shape's vocabulary) and a random
    GPT-2 of ``shape``, saved with save_pretrained; returns the parameter count."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tokens = ["<unk>", "<eos>", "<pad>", *CHARS]
    tokens += [f"<t{i}>" for i in range((shape["vocab_size"] or len(tokens)) - len(tokens))]
    backend = Tokenizer(models.WordLevel({token: i for i, token in enumerate(tokens)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>"
    )
    torch.manual_seed(0)
    config = GPT2Config(**{**shape, "vocab_size": len(tokenizer)}, bos_token_id=1, eos_token_id=1)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def length_reward(prompts: list[str], completions: list[str]) -> list[float]:
    return [len(c) / NEW_TOKENS for c in completions]


def generate_tokens_per_s(
    folder: Path, device: str, generator_kind: str = "hf", batch: int = len(PROMPTS), repeats: int = 3
) -> float:
    """Median new tokens (up to and including EOS) per second of ``batch`` prompts through the
    ``generator_kind`` generator fastppo rlhf would build."""
    from fastppo.rlhf.config import ModelConfig, SamplingConfig, require_vllm
    from fastppo.rlhf.generation import make_generator
    from fastppo.rlhf.models import load_models
    from fastppo.rlhf.tokens import encode_prompts, mask_after_eos

    model_cfg = ModelConfig(model=str(folder), device=device)
    if generator_kind == "vllm":
        require_vllm(model_cfg)
    models = load_models(model_cfg, critic=None)
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, max_prompt_length=64, generator=generator_kind)
    generator = make_generator(models, model_cfg, sampling, seed=0, autocast=nullcontext)
    prompts = (PROMPTS * (batch // len(PROMPTS) + 1))[:batch]
    query, query_mask = encode_prompts(models.tokenizer, prompts, 64, models.policy.device)
    rates = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        response = generator.generate(query, query_mask)
        seconds = time.perf_counter() - start
        if i:  # the first call is a warm-up
            rates.append(int(mask_after_eos(response, models.tokenizer.eos_token_id).sum()) / seconds)
    return statistics.median(rates)


def training_figures(folder: Path, steps: int, device: str) -> dict[str, float]:
    from fastppo.rlhf.config import ModelConfig, MonitorConfig, PPOConfig, RLHFConfig, RunConfig, SamplingConfig
    from fastppo.rlhf.trainer import train

    with tempfile.TemporaryDirectory() as output_dir:
        cfg = RLHFConfig(
            model=ModelConfig(model=str(folder), device=device),
            sampling=SamplingConfig(max_new_tokens=NEW_TOKENS, max_prompt_length=64),
            ppo=PPOConfig(
                steps=steps,
                prompts_per_step=8,
                num_generations=1,
                mini_batch_size=8,
                ppo_epochs=2,
                learning_rate=1e-5,
                kl_warn=1e9,
            ),
            run=RunConfig(output_dir=output_dir, progress=False, save_every=0),
            monitor=MonitorConfig(sample_every=0),
        )
        history = train(cfg, length_reward, PROMPTS)[1:]  # the first step warms up
    keys = (
        "perf/tokens_generated_per_s",
        "perf/tokens_trained_per_s",
        "time/rollout_s",
        "time/update_s",
        "rlhf/response_length",
    )
    return {key: statistics.median(h[key] for h in history) for key in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--steps", type=positive, default=4, help="PPO steps per model (the first is dropped)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--vllm",
        action="store_true",
        help="also generate with --generator vllm's engine (a CUDA GPU and fastppo[vllm]) and print the ratio",
    )
    parser.add_argument(
        "--batch",
        type=positive,
        default=len(PROMPTS),
        help="prompts per generate call in the generate columns (the prompts repeated)",
    )
    args = parser.parse_args()
    if args.steps < 2:
        parser.error(f"--steps must be at least 2 (the first is dropped as warm-up), got {args.steps}")
    check_device(parser, args.device)
    from transformers.utils import logging as hf_logging

    from fastppo.errors import FastPPOError

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    where = (
        "the CPU"
        if args.device == "cpu"
        else torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else "cuda (none found)"
    )
    header(
        f"fastppo rlhf tokens/s on {where}, {torch.get_num_threads()} CPU threads, {args.batch} prompts per "
        f"generate call, {date.today()}"
    )
    vllm_columns = " vLLM generate tok/s | vLLM / HF |" if args.vllm else ""
    print(
        f"| model | parameters | generate tok/s |{vllm_columns} rollout tok/s | train tok/s | rollout s/step | "
        "update s/step | completion tokens |"
    )
    print("|---|---|---|" + "---|---|" * args.vllm + "---|---|---|---|---|")
    for name in args.models:
        with tempfile.TemporaryDirectory() as folder:
            params = build(Path(folder), SHAPES[name])
            generated = generate_tokens_per_s(Path(folder), args.device, batch=args.batch)
            vllm_cells = ""
            if args.vllm:
                try:
                    fast = generate_tokens_per_s(Path(folder), args.device, "vllm", batch=args.batch)
                    vllm_cells = f" {fast:.0f} | {fast / generated:.2f}x |"
                except FastPPOError as exc:
                    vllm_cells = f" {exc} | — |"
            figures = training_figures(Path(folder), args.steps, args.device)
        print(
            f"| {name} | {params / 1e6:.2f}M | {generated:.0f} |{vllm_cells} "
            f"{figures['perf/tokens_generated_per_s']:.0f} | {figures['perf/tokens_trained_per_s']:.0f} | "
            f"{figures['time/rollout_s']:.2f} | {figures['time/update_s']:.2f} | "
            f"{figures['rlhf/response_length']:.1f} |",
            flush=True,
        )
    footer()


if __name__ == "__main__":
    main()
