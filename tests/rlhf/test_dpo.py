"""DPO: the loss against its formula, and learning a toy preference."""

from __future__ import annotations

import math

import pytest
import torch

from fastppo.errors import FastPPOError
from fastppo.rlhf.config import DPOConfig, DPOTrainerConfig, ModelConfig, RunConfig
from fastppo.rlhf.data import PreferencePair
from fastppo.rlhf.dpo import dpo_loss, train_dpo


def test_dpo_loss_matches_the_formula() -> None:
    pc, pr, rc, rr = (
        torch.tensor([-1.0, -2.0]),
        torch.tensor([-3.0, -1.0]),
        torch.tensor([-2.0, -2.0]),
        torch.tensor([-2.0, -2.0]),
    )
    loss, metrics = dpo_loss(pc, pr, rc, rr, beta=0.5)
    margins = [0.5 * ((-1 + 2) - (-3 + 2)), 0.5 * ((-2 + 2) - (-1 + 2))]  # 1.0 and -0.5
    expected = sum(math.log1p(math.exp(-m)) for m in margins) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(metrics["accuracy"]) == 0.5
    assert float(metrics["margin"]) == pytest.approx(sum(margins) / 2)


def test_dpo_margin_grows_and_loss_falls(tiny_model, tmp_path) -> None:
    pairs = [PreferencePair(p, "aaa", "zzz") for p in ("hi", "abc", "the", "ok")] + [
        PreferencePair(p, "bab", "xyx") for p in ("yo", "q")
    ]
    cfg = DPOTrainerConfig(
        model=ModelConfig(model=str(tiny_model)),
        dpo=DPOConfig(beta=0.1, epochs=10, batch_size=6, gradient_accumulation_steps=2, learning_rate=3e-3),
        run=RunConfig(output_dir=str(tmp_path), progress=False, save_every=0),
    )
    history = train_dpo(cfg, pairs)
    assert len(history) == 10
    assert history[0]["dpo/loss"] == pytest.approx(math.log(2), abs=1e-5), "policy == reference at the start"
    assert history[-1]["dpo/loss"] < 0.5 * history[0]["dpo/loss"]
    assert history[0]["dpo/margin"] == pytest.approx(0.0, abs=1e-5)
    assert history[-1]["dpo/margin"] > 0.5 and history[-1]["dpo/accuracy"] == 1.0
    assert (tmp_path / "checkpoint-000010" / "policy" / "config.json").is_file()


def _dpo_config(model, output_dir, **dpo) -> DPOTrainerConfig:
    settings = dict(beta=0.1, epochs=3, batch_size=4, gradient_accumulation_steps=2, learning_rate=3e-3) | dpo
    return DPOTrainerConfig(
        model=ModelConfig(model=str(model)),
        dpo=DPOConfig(**settings),
        run=RunConfig(output_dir=str(output_dir), progress=False, save_every=0),
    )


PAIRS = [PreferencePair(p, "aaa", "zzz") for p in ("hi", "abc", "the cat", "ok")] + [
    PreferencePair(p, "bab", "xyxyx") for p in ("yo", "q")
]


@pytest.mark.parametrize("loss, first_loss", [("ipo", (0 - 1 / (2 * 0.1)) ** 2), ("cdpo", math.log(2))])
def test_ipo_and_cdpo_train_from_their_value_at_the_reference(tiny_model, tmp_path, loss, first_loss) -> None:
    """At the start policy == reference, so h = 0: IPO's loss is (1 / (2 beta))^2 = 25, cDPO's log 2."""
    history = train_dpo(
        _dpo_config(tiny_model, tmp_path, loss=loss, label_smoothing=0.1 if loss == "cdpo" else 0.0), PAIRS
    )
    assert history[0]["dpo/loss"] == pytest.approx(first_loss, rel=1e-5)
    assert history[-1]["dpo/loss"] < history[0]["dpo/loss"] and history[-1]["dpo/margin"] > 0


@pytest.mark.parametrize("loss", ["sigmoid", "ipo"])
def test_precomputed_reference_logps_equal_per_step_ones(tiny_model, tmp_path, loss) -> None:
    """One reference pass before training (micro-batches in data order) gives the values the
    reference computes inside each step's shuffled micro-batches, so training is the same."""
    precomputed = train_dpo(_dpo_config(tiny_model, tmp_path / "pre", loss=loss, precompute_ref_logps=True), PAIRS)
    per_step = train_dpo(_dpo_config(tiny_model, tmp_path / "step", loss=loss, precompute_ref_logps=False), PAIRS)
    assert len(precomputed) == len(per_step) == 5
    for a, b in zip(precomputed, per_step):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(loss="cdpo"), r"--loss cdpo needs --label-smoothing in \(0, 0.5\), got 0.0"),
        (dict(loss="cdpo", label_smoothing=0.5), "got 0.5"),
        (dict(loss="sigmoid", label_smoothing=0.1), "pass --loss cdpo"),
    ],
)
def test_label_smoothing_belongs_to_cdpo(tiny_model, tmp_path, settings, message) -> None:
    with pytest.raises(FastPPOError, match=message):
        train_dpo(_dpo_config(tiny_model, tmp_path, **settings), PAIRS)


def test_a_chat_templates_answer_ends_at_its_own_eos(tmp_path) -> None:
    """The tiny Qwen-style template ends an answer with "<eos> ": DPO trains "ab" + EOS, as the
    policy samples it, not "ab<eos> <eos>"; a plain-text completion still gets its EOS."""
    import json

    from fastppo.rlhf.config import PreferenceDataConfig
    from fastppo.rlhf.data import read_preferences
    from fastppo.rlhf.tokens import encode_completions
    from tests.support.tiny_lm import CHAT_TEMPLATE, build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "hi", "chosen": "ab", "rejected": "c"}) + "\n")
    [pair] = read_preferences(path, PreferenceDataConfig(chat_template=True), tokenizer)
    assert pair.chosen == "ab<eos> "
    ids, mask = encode_completions(tokenizer, [pair.chosen, "ab"], 8, torch.device("cpu"))
    expected = tokenizer("ab", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert ids[0][mask[0]].tolist() == expected and ids[1][mask[1]].tolist() == expected
