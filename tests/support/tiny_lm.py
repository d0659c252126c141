"""Tiny offline models for the RLHF tests: a character-level tokenizer and a 2-layer GPT-2,
built from configs and saved with save_pretrained so every test loads them with from_pretrained."""

from __future__ import annotations

from pathlib import Path

from fastppo.rlhf.config import ModelConfig, PPOConfig, RLHFConfig, RunConfig, SamplingConfig

CHARS = "abcdefghijklmnopqrstuvwxyz "


# A Qwen-style chat template in the tiny vocabulary: every message ends in the EOS token, and the
# template writes a character after it (Qwen's "<|im_end|>\n"), so a completion's text as the
# template renders it is its answer, "<eos>", then a space.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }}<eos> {% endfor %}"
    "{% if add_generation_prompt %}assistant {% endif %}"
)


def build_tokenizer(with_pad: bool = True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<eos>"] + (["<pad>"] if with_pad else [])
    vocab = {token: i for i, token in enumerate(specials + list(CHARS))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()  # decode "abc" as "abc", not WordLevel's default "a b c"
    kwargs = {"pad_token": "<pad>"} if with_pad else {}
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>", **kwargs)


def build_model_folder(folder: Path, with_pad: bool = True, seed: int = 0) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = build_tokenizer(with_pad)
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=64,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_encoder_folder(folder: Path, seed: int = 0) -> Path:
    """A 1-layer BERT-style sequence classifier with one output and its character tokenizer: no EOS
    token, [CLS] ... [SEP] added by the tokenizer, right padding."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials + list(CHARS))}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def early_letters(prompts: list[str], completions: list[str]) -> list[float]:
    """Synthetic reward: the share of the completion's characters among 'abcde' (0 when empty).
    A random tiny model scores about 0.15, so the signal is dense enough to learn in seconds."""
    return [sum(ch in "abcde" for ch in c) / max(len(c), 1) for c in completions]


def run_cli(argv: list[str]) -> int:
    """``fastppo ARGV`` for the rlhf and dpo commands, through the parser the top-level CLI uses."""
    args = parse_cli(argv)
    return args.func(args)


def cli_error(argv: list[str], capsys) -> str:
    """``fastppo ARGV`` through the real entry point, failing as a user error must: exit code 2 and
    one line on stderr, no traceback. Returns that line."""
    from fastppo.cli.main import main

    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def parse_cli(argv: list[str]):
    from fastppo.cli.flags import OneLineErrorParser
    from fastppo.cli.rlhf import register

    parser = OneLineErrorParser(prog="fastppo")
    register(parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser))
    return parser.parse_args(argv)


def synthetic_rollout(logprobs, ref_logprobs, mask):
    """A Rollout of made-up log-probs, no model needed; ``query[i, 0] == i`` identifies row i."""
    import torch

    from fastppo.rlhf.rollout import Rollout

    batch = mask.shape[0]
    query = torch.arange(batch).unsqueeze(1)
    response = torch.zeros(mask.shape, dtype=torch.long)
    return Rollout(
        [""] * batch,
        [""] * batch,
        query,
        torch.ones_like(query),
        response,
        mask,
        logprobs,
        ref_logprobs,
        None,
        torch.ones(batch, dtype=torch.bool),
    )


def tiny_config(model: Path, output_dir: Path, **ppo) -> RLHFConfig:
    defaults = dict(steps=2, prompts_per_step=4, num_generations=2, mini_batch_size=4, ppo_epochs=1, learning_rate=1e-3)
    return RLHFConfig(
        model=ModelConfig(model=str(model)),
        sampling=SamplingConfig(max_new_tokens=8, max_prompt_length=16),
        ppo=PPOConfig(**{**defaults, **ppo}),
        run=RunConfig(output_dir=str(output_dir), progress=False, save_every=0),
    )


PROMPTS = ["hello", "abc", "the cat", "x", "good morning", "ok"]


def deterministic(record: dict) -> dict:
    """A step's record without its timings, which differ between two runs of the same steps."""
    return {k: v for k, v in record.items() if not k.startswith(("time/", "perf/"))}
