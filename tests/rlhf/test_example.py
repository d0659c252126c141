"""examples/rlhf_tiny.py: its reward is won by a real behaviour, the command it prints runs from
any folder, and its docstring and the RLHF guide (docs/guides/rlhf.md) show the same command."""

from __future__ import annotations

import re
import shlex

from examples import rlhf_tiny

from tests.support.paths import ROOT
from tests.support.tiny_lm import run_cli


def test_the_reward_is_won_by_answering_with_the_prompts_letters() -> None:
    prompts = rlhf_tiny.PROMPTS
    assert rlhf_tiny.reward(prompts, [(p * 6)[:6] for p in prompts]) == [1.0] * len(prompts)
    # The score is linear in the characters, so repeated single letters bound every fixed completion.
    for letter in rlhf_tiny.LETTERS:
        assert sum(rlhf_tiny.reward(prompts, [letter * 8] * len(prompts))) / len(prompts) <= 3 / 16, letter
        assert max(rlhf_tiny.reward(prompts, [letter] * len(prompts))) <= 1 / 6, "one letter is not an answer"


def test_the_printed_command_runs_from_any_folder(tmp_path, monkeypatch) -> None:
    from transformers import AutoTokenizer

    rlhf_tiny.build(tmp_path / "tiny-gpt2")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tiny-gpt2")
    assert tokenizer.decode(tokenizer("nab ana")["input_ids"]) == "nab ana", "completions reach the reward as written"
    argv = shlex.split(rlhf_tiny.train_command(tmp_path / "tiny-gpt2"))
    argv[argv.index("--steps") + 1] = "1"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert argv[0] == "fastppo" and run_cli([*argv[1:], "--no-progress"]) == 0
    assert (tmp_path / "rlhf-tiny" / "metrics.jsonl").is_file()


def _documented_command(text: str) -> list[str]:
    joined = text.replace("\\\n", " ")  # shell line continuations
    return re.search(r"^\s*(fastppo rlhf --model runs/tiny-gpt2 .*)$", joined, re.M).group(1).split()


def test_docstring_and_rlhf_guide_show_the_command_the_example_prints() -> None:
    in_guide = _documented_command((ROOT / "docs" / "guides" / "rlhf.md").read_text())
    assert in_guide == _documented_command(rlhf_tiny.__doc__)
    flags = rlhf_tiny.TRAIN_FLAGS.split()
    assert any(in_guide[i : i + len(flags)] == flags for i in range(len(in_guide))), "the printed command's flags"
