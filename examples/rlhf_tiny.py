"""An offline RLHF example: a tiny GPT-2 learns to write with the letters a-e.

    python examples/rlhf_tiny.py runs/tiny-gpt2          # builds the model, tokenizer and prompts
    fastppo rlhf --model runs/tiny-gpt2 --reward examples.rlhf_tiny:reward \\
        --prompts runs/tiny-gpt2/prompts.jsonl --steps 60 --prompts-per-step 8 \\
        --mini-batch-size 8 --max-new-tokens 8 --learning-rate 3e-3 --output-dir runs/rlhf-tiny

The model is random (built from a GPT2Config, nothing is downloaded); for a real checkpoint pass
its folder or hub id to --model and your own module:function to --reward.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LETTERS = "abcdefghijklmnopqrstuvwxyz "
PROMPTS = ["hello", "the cat sat", "once upon a time", "why", "good morning", "a b c", "the end", "ok so"]


def reward(prompts: list[str], completions: list[str]) -> list[float]:
    """Share of a completion's characters among 'abcde': about 0.15 for the random model."""
    return [sum(ch in "abcde" for ch in c) / max(len(c), 1) for c in completions]


def build(folder: Path) -> None:
    """A character-level tokenizer and a 2-layer GPT-2, saved with save_pretrained, plus prompts.jsonl."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<unk>", "<eos>", "<pad>", *LETTERS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_layer=2, n_head=4, n_embd=64, n_positions=128, bos_token_id=1, eos_token_id=1)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/tiny-gpt2")
    build(target)
    print(f"wrote {target}; now run: fastppo rlhf --model {target} --reward examples.rlhf_tiny:reward --prompts {target}/prompts.jsonl")
