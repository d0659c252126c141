"""An offline RLHF example: a tiny GPT-2 learns to answer a word with letters of that word.

    python examples/rlhf_tiny.py runs/tiny-gpt2     # builds the model, tokenizer and prompts
    fastppo rlhf --model runs/tiny-gpt2 --reward examples/rlhf_tiny.py:reward \\
        --prompts runs/tiny-gpt2/prompts.jsonl --eval-prompts runs/tiny-gpt2/eval_prompts.jsonl \\
        --estimator grpo --num-generations 4 --steps 30 \\
        --prompts-per-step 16 --mini-batch-size 16 --max-new-tokens 6 --learning-rate 3e-3 \\
        --kl-warn 30 --output-dir runs/rlhf-tiny

That is the command from the repository root; the script prints it with absolute paths, to run from
any folder. The prompts are sixteen words with few distinct letters ("banana", "kiwi", "fluff"...),
no letter in more than three of them, and the reward is the share of a completion's first six
characters that are letters of its prompt. Eight held-out words (eval_prompts.jsonl, never trained
on) are answered greedily every 10 steps: their reward (eval/reward_mean, printed at the end) shows
whether the policy learnt to read a word or only memorised the sixteen. The best policy is a real
behaviour, reading the word and answering with its letters ("tweet" -> "eeteet"): one letter scores
at most 1/6 and no fixed answer more than 3/16 on average. The model is random (built from a
GPT2Config, nothing is downloaded), so any consistent answer is far from the reference: the KL per
completion passes 10 nats, hence --kl-warn 30. For a real checkpoint pass its folder or hub id to
--model and your own module:function to --reward.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LETTERS = "abcdefghijklmnopqrstuvwxyz "
PROMPTS = [
    "banana",
    "deed",
    "kiwi",
    "moon",
    "puppy",
    "fluff",
    "jazz",
    "tweet",
    "gig",
    "yoyo",
    "civic",
    "sass",
    "hush",
    "xerox",
    "shh",
    "brr",
]
EVAL_PROMPTS = ["noon", "lull", "mama", "papa", "bib", "tutu", "wow", "eke"]  # held out: never trained on
SCORED_CHARS = 6
# GRPO: four answers per prompt, each judged against the others for the same word. A critic
# (--estimator gae) has to learn a per-word baseline first: over 3 seeds it reached a reward of 0.7
# at step 115 where GRPO did at step 28 (benchmarks/rlhf_estimator_curves.py).
TRAIN_FLAGS = (
    "--estimator grpo --num-generations 4 --steps 30 --prompts-per-step 16 --mini-batch-size 16 "
    "--max-new-tokens 6 --learning-rate 3e-3 --kl-warn 30"
)


def reward(prompts: list[str], completions: list[str]) -> list[float]:
    """1/6 for each of a completion's first six characters that is a letter of its prompt: 1.0 for
    six of the prompt's letters, about 0.1 for the random model, at most 1/6 for one letter."""
    return [
        sum(ch in prompt for ch in completion[:SCORED_CHARS]) / SCORED_CHARS
        for prompt, completion in zip(prompts, completions)
    ]


def build(folder: Path) -> None:
    """A character-level tokenizer and a 2-layer GPT-2, saved with save_pretrained, plus prompts.jsonl."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<unk>", "<eos>", "<pad>", *LETTERS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()  # decode "abc" as "abc", not WordLevel's default "a b c"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>"
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_layer=2, n_head=4, n_embd=64, n_positions=128, bos_token_id=1, eos_token_id=1
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for name, words in (("prompts.jsonl", PROMPTS), ("eval_prompts.jsonl", EVAL_PROMPTS)):
        (folder / name).write_text("".join(json.dumps({"prompt": p}) + "\n" for p in words))


def train_command(folder: Path) -> str:
    """The `fastppo rlhf` command for a model built in ``folder``, with absolute paths: it runs from any
    folder."""
    folder = folder.resolve()
    return (
        f"fastppo rlhf --model {folder} --reward {Path(__file__).resolve()}:reward "
        f"--prompts {folder / 'prompts.jsonl'} --eval-prompts {folder / 'eval_prompts.jsonl'} {TRAIN_FLAGS} "
        f"--output-dir {folder.parent / 'rlhf-tiny'}"
    )


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/tiny-gpt2")
    build(target)
    print(f"wrote {target}; now run:\n{train_command(target)}")
