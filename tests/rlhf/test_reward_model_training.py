"""`fastppo reward-model`: Bradley-Terry training on a trivially separable preference set raises the
held-out accuracy, and the saved folder is a reward for `fastppo rlhf --reward`."""

from __future__ import annotations

import json

import pytest
import torch

from fastppo.errors import FastPPOError
from fastppo.rlhf.rewards import load_reward
from tests.support.tiny_lm import build_encoder_folder, run_cli

WORDS = ["hi", "the cat", "ok", "yo", "good day", "sun", "a dog", "rain", "tea", "moon"]


def separable_pairs() -> list[dict[str, str]]:
    """Chosen completions use the letters a-e, rejected ones v-z: a bag of letters separates them."""
    generator = torch.Generator().manual_seed(0)

    def word(letters: str) -> str:
        return "".join(letters[i] for i in torch.randint(len(letters), (4,), generator=generator).tolist())

    return [
        {"prompt": prompt, "chosen": word("abcde"), "rejected": word("vwxyz")} for prompt in WORDS for _ in range(4)
    ]


def test_reward_model_learns_held_out_preferences_and_serves_as_reward(tiny_model, tmp_path, capsys) -> None:
    rows = separable_pairs()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "rm"
    argv = ["reward-model", "--model", str(tiny_model), "--data", str(data), "--output-dir", str(output),
            "--eval-split", "0.25", "--eval-every", "5", "--epochs", "4", "--batch-size", "8", "--learning-rate",
            "3e-3", "--max-length", "48", "--no-progress"]  # fmt: skip
    assert run_cli(argv) == 0
    logged = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    # 2 of the 10 prompts held out with their 4 pairs each: 32 training pairs, 8 per step, 4 epochs;
    # step 0: before training
    assert [row["global_step"] for row in logged] == list(range(0, 17))
    accuracies = {
        row["global_step"]: row["reward_model/eval_accuracy"] for row in logged if "reward_model/eval_accuracy" in row
    }
    assert sorted(accuracies) == [0, 5, 10, 15, 16]
    assert accuracies[0] <= 0.7 and accuracies[16] == 1.0, accuracies
    assert logged[-1]["reward_model/loss"] < 0.5 * logged[1]["reward_model/loss"]
    assert "held-out accuracy" in capsys.readouterr().out

    reward = load_reward(str(output), torch.device("cpu"))
    prompts = [row["prompt"] for row in rows]
    chosen, rejected = (
        reward(prompts, [row["chosen"] for row in rows]),
        reward(prompts, [row["rejected"] for row in rows]),
    )
    assert all(c > r for c, r in zip(chosen, rejected)), "the saved model and tokenizer score as the trained one"

    prompts_file = tmp_path / "prompts.jsonl"
    prompts_file.write_text("".join(json.dumps({"prompt": w}) + "\n" for w in WORDS[:4]))
    assert run_cli(["rlhf", "--model", str(tiny_model), "--reward", str(output), "--prompts", str(prompts_file),
                    "--steps", "1", "--prompts-per-step", "2", "--num-generations", "2", "--mini-batch-size", "4",
                    "--ppo-epochs", "1", "--max-new-tokens", "6", "--estimator", "rloo", "--output-dir",
                    str(tmp_path / "ppo"), "--no-progress"]) == 0  # fmt: skip


def test_an_encoder_reward_model_trains_and_serves_as_reward(tmp_path) -> None:
    """A BERT-style classifier (no EOS, right padding) trains as a causal LM's score head does."""
    rows = separable_pairs()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "rm"
    argv = ["reward-model", "--model", str(build_encoder_folder(tmp_path / "bert")), "--data", str(data),
            "--output-dir", str(output), "--eval-split", "0.25", "--epochs", "4", "--batch-size", "8",
            "--learning-rate", "3e-3", "--max-length", "48", "--no-progress"]  # fmt: skip
    assert run_cli(argv) == 0
    logged = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert logged[0]["reward_model/eval_accuracy"] <= 0.7 and logged[-1]["reward_model/eval_accuracy"] == 1.0
    reward = load_reward(str(output), torch.device("cpu"))
    prompts = [row["prompt"] for row in rows]
    chosen, rejected = (
        reward(prompts, [row["chosen"] for row in rows]),
        reward(prompts, [row["rejected"] for row in rows]),
    )
    assert all(c > r for c, r in zip(chosen, rejected))


def test_reward_model_resumes_where_it_stopped(tiny_model, tmp_path) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in separable_pairs()[:12]))
    argv = ["reward-model", "--model", str(tiny_model), "--data", str(data), "--output-dir", str(tmp_path / "rm"),
            "--eval-split", "0", "--batch-size", "4", "--learning-rate", "1e-3", "--save-every", "1",
            "--no-progress"]  # fmt: skip
    assert run_cli([*argv, "--epochs", "1"]) == 0
    assert run_cli([*argv, "--epochs", "2", "--resume"]) == 0
    steps = [json.loads(line)["global_step"] for line in (tmp_path / "rm" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--eval-split", "1"], r"--eval-split must be in \[0, 1\)"),
        (["--lora"], "drop --lora"),
        (["--batch-size", "3", "--gradient-accumulation-steps", "2"], "must divide --batch-size 3"),
        (["--chosen-column", "better"], "has no column 'better'"),
    ],
)
def test_reward_model_bad_input_is_a_one_line_error(tiny_model, tmp_path, extra, message) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "z"}) + "\n")
    with pytest.raises(FastPPOError, match=message):
        run_cli(
            [
                "reward-model",
                "--model",
                str(tiny_model),
                "--data",
                str(data),
                "--output-dir",
                str(tmp_path / "rm"),
                *extra,
            ]
        )


def test_eval_split_holds_out_prompts_with_all_their_pairs() -> None:
    """10 prompts with 4 pairs each, --eval-split 0.25: 2 prompts held out, no prompt on both sides."""
    from fastppo.rlhf.data import PreferencePair
    from fastppo.rlhf.reward_model import split_pairs

    pairs = [PreferencePair(row["prompt"], row["chosen"], row["rejected"]) for row in separable_pairs()]
    train, held_out = split_pairs(pairs, 0.25, seed=1)
    assert len(held_out) == 8 and len(train) == 32
    assert not {p.prompt for p in train} & {p.prompt for p in held_out}
    assert split_pairs(pairs, 0.25, seed=1) == (train, held_out), "seeded"
