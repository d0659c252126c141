"""Stop strings and extra EOS ids: a response ends at the token that completes the first stop, its
mask and text are cut there, consistently with EOS."""

from __future__ import annotations

import torch

from fastppo.rlhf.config import ModelConfig, SamplingConfig
from fastppo.rlhf.models import Precision, load_models
from fastppo.rlhf.rollout import collect_rollout
from fastppo.rlhf.tokens import Stops, decode_completions
from tests.support.tiny_lm import build_tokenizer, parse_cli


def ids(tokenizer, text: str, eos_at: int | None = None) -> list[int]:
    row = tokenizer.convert_tokens_to_ids(list(text))
    if eos_at is not None:
        row[eos_at] = tokenizer.eos_token_id
    return row


def test_stop_strings_cut_mask_and_text_at_the_first_stop() -> None:
    tokenizer = build_tokenizer()
    stops = Stops.of(tokenizer, ["cd", "x"])
    assert stops == Stops((tokenizer.eos_token_id,), ("cd", "x"))
    response = torch.tensor(
        [
            ids(tokenizer, "abcdxyz"),  # "cd" completes at column 3, before "x" at 4
            ids(tokenizer, "zzxcdab"),  # "x" at column 2 comes first
            ids(tokenizer, "ab_cdxy", eos_at=2),  # EOS at column 2, before any stop string
            ids(tokenizer, "abababa"),  # no stop: runs into max_new_tokens
        ]
    )
    mask, stopped = stops.mask(tokenizer, response)
    assert mask.sum(dim=1).tolist() == [4, 3, 3, 7]
    assert stopped.tolist() == [True, True, True, False]
    assert decode_completions(tokenizer, response, mask, stops) == ["ab", "zz", "ab", "abababa"]


def test_special_token_stops_are_token_ids() -> None:
    """A special token is dropped from the decoded text, so it can only stop as an id, like EOS."""
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<end>"]})
    end = tokenizer.convert_tokens_to_ids("<end>")
    stops = Stops.of(tokenizer, ["<end>", "q"])
    assert stops == Stops((tokenizer.eos_token_id, end), ("q",))
    response = torch.tensor([ids(tokenizer, "ab") + [end] + ids(tokenizer, "cq"), ids(tokenizer, "abcde")])
    mask, stopped = stops.mask(tokenizer, response)
    assert mask.sum(dim=1).tolist() == [3, 5] and stopped.tolist() == [True, False]
    assert decode_completions(tokenizer, response, mask, stops) == ["ab", "abcde"]


def test_stop_flag_is_repeatable_and_takes_comma_lists() -> None:
    args = parse_cli(
        ["rlhf", "--model", "m", "--reward", "x:y", "--prompts", "p.jsonl", "--stop", "ab,c", "--stop", "<end>"]
    )
    assert args.stop == ["ab", "c", "<end>"]
    assert parse_cli(["rlhf", "--model", "m", "--reward", "x:y", "--prompts", "p.jsonl"]).stop == []


def test_rollout_responses_end_at_their_first_stop(tiny_model) -> None:
    models = load_models(ModelConfig(model=str(tiny_model)), critic=None)
    sampling = SamplingConfig(max_new_tokens=16, max_prompt_length=16, stop=("a", "e"))
    torch.manual_seed(0)
    rollout = collect_rollout(
        models, ["hello", "the cat", "x", "ok"], 4, sampling, 8, Precision("fp32", torch.device("cpu")).autocast
    )
    tokenizer = models.tokenizer
    stop_ids = set(tokenizer.convert_tokens_to_ids(["a", "e", "<eos>"]))
    lengths = rollout.response_mask.sum(dim=1)
    assert rollout.has_eos.any() and (lengths < 16).any(), "the random model hits a stop in some rows"
    for row, length, stopped, text in zip(
        rollout.response.tolist(), lengths.tolist(), rollout.has_eos.tolist(), rollout.completions
    ):
        assert not stop_ids & set(row[: length - 1]), "no stop before the last real token"
        assert stopped == (row[length - 1] in stop_ids)
        assert all(token == tokenizer.pad_token_id for token in row[length:]), "masked tokens are padding"
        assert "a" not in text and "e" not in text
