"""Model loading, LoRA, save -> load -> generate, and the errors a user can cause."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from fastppo.errors import FastPPOError
from fastppo.rlhf.config import ModelConfig
from fastppo.rlhf.data import read_preferences, read_prompts
from fastppo.rlhf.models import PAD_TOKEN, load_models, reference_model, save_models
from fastppo.rlhf.rewards import compute_scores, load_reward
from fastppo.rlhf.tokens import encode_prompts
from fastppo.rlhf.trainer import train
from tests.support.tiny_lm import PROMPTS, build_model_folder, early_letters, tiny_config


def _generate(model, tokenizer, seed: int = 7) -> torch.Tensor:
    query, mask = encode_prompts(tokenizer, PROMPTS, 16, torch.device("cpu"))
    torch.manual_seed(seed)
    config = GenerationConfig(
        do_sample=True,
        top_k=0,
        max_new_tokens=8,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.no_grad():
        return model.generate(input_ids=query, attention_mask=mask, generation_config=config)


def _perturb(models) -> None:
    with torch.no_grad():
        for p in models.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))


@pytest.mark.parametrize("lora", [False, True])
def test_save_load_generate_is_identical(tiny_model, tmp_path, lora) -> None:
    models = load_models(ModelConfig(model=str(tiny_model), lora=lora), critic="shared")
    _perturb(models)
    save_models(models, tmp_path)
    reloaded = load_models(ModelConfig(model=str(tiny_model), lora=lora), critic="shared", resume_from=tmp_path)
    assert torch.equal(_generate(models.policy, models.tokenizer), _generate(reloaded.policy, reloaded.tokenizer))
    assert torch.equal(models.critic.head.weight, reloaded.critic.head.weight)
    if not lora:  # the saved policy is a plain transformers model folder
        plain = AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
        assert torch.equal(_generate(models.policy, models.tokenizer), _generate(plain, models.tokenizer))
    else:
        assert (tmp_path / "policy" / "adapter_config.json").is_file()
        assert not (tmp_path / "policy" / "model.safetensors").exists(), "LoRA checkpoints hold the adapters only"


def test_lora_reference_is_the_base_with_adapters_disabled(tiny_model) -> None:
    models = load_models(ModelConfig(model=str(tiny_model), lora=True), critic=None)
    assert models.reference is None
    trainable = {n for n, p in models.policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    _perturb(models)
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    ids = torch.tensor([[3, 4, 5, 6]])
    with reference_model(models) as reference:
        assert torch.allclose(reference(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-6)
    assert not torch.allclose(models.policy(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-4)


def test_lora_training_run(tiny_model, tmp_path) -> None:
    cfg = tiny_config(tiny_model, tmp_path)
    cfg.model.lora = True
    history = train(cfg, early_letters, PROMPTS)
    assert history[0]["rlhf/kl_ref"] == 0.0
    assert (tmp_path / "checkpoint-000002" / "policy" / "adapter_model.safetensors").is_file()


def test_tokenizer_without_pad_gets_a_distinct_pad_token_with_a_warning(tmp_path) -> None:
    folder = build_model_folder(tmp_path / "nopad", with_pad=False)
    with pytest.warns(UserWarning, match="no pad token"):
        models = load_models(ModelConfig(model=str(folder)), critic=None)
    tok = models.tokenizer
    assert tok.pad_token == PAD_TOKEN and tok.pad_token_id != tok.eos_token_id
    assert models.policy.get_input_embeddings().num_embeddings == len(tok)
    ids = torch.tensor([[3, 4, 5]])
    assert torch.equal(models.policy(input_ids=ids).logits, models.reference(input_ids=ids).logits), (
        "policy and reference grew identically"
    )


def test_missing_model_path_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FastPPOError, match="does not exist"):
        load_models(ModelConfig(model=str(tmp_path / "missing")), critic=None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FastPPOError, match="cannot load"):
        load_models(ModelConfig(model=str(tmp_path / "empty")), critic=None)


def test_prompt_and_preference_files_are_checked(tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(FastPPOError, match="is empty"):
        read_prompts(empty)
    with pytest.raises(FastPPOError, match="does not exist"):
        read_prompts(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    with pytest.raises(FastPPOError, match="bad.jsonl', row 2, column 'prompt' is missing: expected text"):
        read_prompts(bad)
    good = tmp_path / "pairs.jsonl"
    good.write_text(json.dumps({"prompt": "p", "chosen": "c", "rejected": "r"}) + "\n")
    assert read_preferences(good)[0].chosen == "c"


def test_reward_function_results_are_checked() -> None:
    with pytest.raises(FastPPOError, match="returned 1 scores for 2 completions"):
        compute_scores(lambda p, c: [1.0], ["a", "b"], ["x", "y"], torch.device("cpu"))
    with pytest.raises(FastPPOError, match="list of floats"):
        compute_scores(lambda p, c: ["high", "low"], ["a", "b"], ["x", "y"], torch.device("cpu"))
    with pytest.raises(FastPPOError, match="NaN"):
        compute_scores(lambda p, c: [1.0, float("nan")], ["a", "b"], ["x", "y"], torch.device("cpu"))


def test_reward_spec_resolution(tmp_path, tiny_model) -> None:
    assert load_reward("tests.support.tiny_lm:early_letters", torch.device("cpu")) is early_letters
    script = tmp_path / "my_reward.py"
    script.write_text("def score(prompts, completions):\n    return [1.0] * len(completions)\n")
    assert load_reward(f"{script}:score", torch.device("cpu"))(["p"], ["c"]) == [1.0]
    for spec, message in (
        ("no_such_module_xyz:f", "cannot load the reward function"),
        ("tests.support.tiny_lm:nope", "names no function"),
        ("justaname", "neither"),
    ):
        with pytest.raises(FastPPOError, match=message):
            load_reward(spec, torch.device("cpu"))


def test_reward_model_folder_scores_texts(tmp_path) -> None:
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from tests.support.tiny_lm import build_tokenizer

    tokenizer = build_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_layer=1,
        n_head=2,
        n_embd=16,
        n_positions=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    GPT2ForSequenceClassification(config).save_pretrained(tmp_path / "rm")
    tokenizer.save_pretrained(tmp_path / "rm")
    reward = load_reward(str(tmp_path / "rm"), torch.device("cpu"), batch_size=2)
    scores = reward(["ab", "a", "hello"], ["cd", "b", ""])
    assert len(scores) == 3 and all(isinstance(s, float) for s in scores)
    assert reward(["ab"], ["cd"]) == pytest.approx(scores[:1], abs=1e-5), "padding in a batch does not change a score"
