"""Reward-model folders given to --reward: a score depends on the text only, not on the batch it
was scored in, for decoder (learned positions, RoPE) and encoder (BERT-style) classifiers."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from fastppo.rlhf.rewards import load_reward
from tests.support.tiny_lm import build_encoder_folder, build_tokenizer

# Different lengths, so that batching pads all but the longest.
PROMPTS = ["ab", "hello there", "x", "the cat sat on the"]
COMPLETIONS = ["cd", "friend", "", "mat and"]


def _decoder_reward_model(kind: str, folder, padding_side: str):
    from transformers import GPT2Config, GPT2ForSequenceClassification, LlamaConfig, LlamaForSequenceClassification

    tokenizer = build_tokenizer()
    tokenizer.padding_side = padding_side  # saved with it: a reward model's tokenizer is used as it comes
    torch.manual_seed(0)
    common = dict(vocab_size=len(tokenizer), num_labels=1, pad_token_id=tokenizer.pad_token_id)
    if kind == "gpt2":  # learned absolute position embeddings
        model = GPT2ForSequenceClassification(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=64, **common))
    else:  # rotary position embeddings (Llama/Qwen/Mistral family)
        config = LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            **common,
        )
        model = LlamaForSequenceClassification(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _assert_batch_independent(reward) -> None:
    batched = reward(PROMPTS, COMPLETIONS)
    alone = [reward([p], [c])[0] for p, c in zip(PROMPTS, COMPLETIONS)]
    assert len(set(batched)) == len(batched), "the model tells the texts apart"
    assert batched == pytest.approx(alone, rel=1e-4), "a text's score does not depend on the texts padded with it"


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_decoder_reward_model_scores_a_text_the_same_batched_or_alone(tmp_path, kind, padding_side) -> None:
    folder = _decoder_reward_model(kind, tmp_path / "rm", padding_side)
    _assert_batch_independent(load_reward(str(folder), torch.device("cpu"), batch_size=len(PROMPTS)))


def test_encoder_reward_model_scores_with_its_own_tokenizer(tmp_path) -> None:
    """A BERT-style classifier: no EOS token, [CLS] ... [SEP] added by its tokenizer, right padding."""
    folder = build_encoder_folder(tmp_path / "rm")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token_id is None and tokenizer.padding_side == "right"
    _assert_batch_independent(load_reward(str(folder), torch.device("cpu"), batch_size=len(PROMPTS)))


def test_with_a_chat_template_a_sampled_completion_is_scored_as_the_reward_model_was_trained(tmp_path) -> None:
    """`fastppo reward-model --chat-template` trains on the conversation rendered by the template:
    the answer ends in its end token ("ab<eos> " with the tiny Qwen-style template). The rlhf path
    decodes a sampled completion without special tokens ("ab"), and must score it in that format."""
    import json

    from fastppo.rlhf.config import DataConfig, PreferenceDataConfig
    from fastppo.rlhf.data import Conversations, read_preferences, read_prompt_column
    from fastppo.rlhf.models import load_reward_model
    from fastppo.rlhf.rewards import score_texts
    from fastppo.rlhf.tokens import Stops, decode_completions
    from tests.support.tiny_lm import CHAT_TEMPLATE

    cpu = torch.device("cpu")
    folder = tmp_path / "rm"
    _decoder_reward_model("gpt2", folder, "left")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"prompt": "hi", "chosen": "ab", "rejected": "c"}) + "\n")

    [pair] = read_preferences(data, PreferenceDataConfig(chat_template=True), tokenizer)
    model, rm_tokenizer = load_reward_model(str(folder), cpu)
    trained = score_texts(model, rm_tokenizer, [pair.prompt + pair.chosen], cpu).tolist()

    column = read_prompt_column(data, "--prompts", DataConfig(chat_template=True))
    prompts = column.render(tokenizer)
    stops = Stops.of(tokenizer)
    response = torch.tensor(
        [tokenizer("ab", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id, tokenizer.pad_token_id]]
    )
    mask, _ = stops.mask(tokenizer, response)
    completions = decode_completions(tokenizer, response, mask, stops)
    assert completions == ["ab"] and prompts == ["user hi<eos> assistant "]
    reward = load_reward(str(folder), cpu, conversations=Conversations([column], [prompts]))
    assert reward(prompts, completions) == pytest.approx(trained, abs=1e-6)
    assert load_reward(str(folder), cpu)(prompts, completions) != pytest.approx(trained, abs=1e-3), (
        "the text without its end token scores otherwise"
    )
