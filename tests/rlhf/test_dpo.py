"""DPO: the loss against its formula, and learning a toy preference."""

from __future__ import annotations

import math

import pytest
import torch

from fastppo.rlhf.config import DPOConfig, DPOTrainerConfig, ModelConfig, RunConfig
from fastppo.rlhf.data import PreferencePair
from fastppo.rlhf.dpo import dpo_loss, train_dpo


def test_dpo_loss_matches_the_formula() -> None:
    pc, pr, rc, rr = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0]), torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])
    loss, metrics = dpo_loss(pc, pr, rc, rr, beta=0.5)
    margins = [0.5 * ((-1 + 2) - (-3 + 2)), 0.5 * ((-2 + 2) - (-1 + 2))]  # 1.0 and -0.5
    expected = sum(math.log1p(math.exp(-m)) for m in margins) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(metrics["accuracy"]) == 0.5
    assert float(metrics["margin"]) == pytest.approx(sum(margins) / 2)


def test_dpo_margin_grows_and_loss_falls(tiny_model, tmp_path) -> None:
    pairs = [PreferencePair(p, "aaa", "zzz") for p in ("hi", "abc", "the", "ok")] + [PreferencePair(p, "bab", "xyx") for p in ("yo", "q")]
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
