"""`fastppo rlhf` / `fastppo dpo` through the parser the top-level CLI uses."""

from __future__ import annotations

import json
import re

import pytest
import torch

from fastppo.errors import FastPPOError
from tests.support.tiny_lm import cli_error, parse_cli, run_cli


def test_rlhf_command_trains_and_resumes(tiny_model, tmp_path, capsys) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ("hi", "abc", "yo", "ok")))
    argv = [
        "rlhf",
        "--model",
        str(tiny_model),
        "--reward",
        "tests.support.tiny_lm:early_letters",
        "--prompts",
        str(prompts),
        "--steps",
        "2",
        "--prompts-per-step",
        "2",
        "--num-generations",
        "2",
        "--mini-batch-size",
        "2",
        "--ppo-epochs",
        "1",
        "--max-new-tokens",
        "6",
        "--estimator",
        "rloo",
        "--output-dir",
        str(tmp_path / "run"),
        "--no-progress",
        "--lora",
    ]
    assert run_cli(argv) == 0
    assert "reward" in capsys.readouterr().out
    assert run_cli([*argv[: argv.index("--steps") + 1], "3", *argv[argv.index("--steps") + 2 :], "--resume"]) == 0
    steps = [json.loads(line)["global_step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_dpo_command(tiny_model, tmp_path) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "hi", "chosen": "aa", "rejected": "zz"}) + "\n")
    threads = torch.get_num_threads()
    try:
        assert run_cli(["dpo", "--model", str(tiny_model), "--data", str(data), "--batch-size", "1",
                        "--output-dir", str(tmp_path / "dpo"), "--no-progress", "--dtype", "bf16",
                        "--gradient-checkpointing", "--torch-threads", "1"]) == 0  # fmt: skip
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert (tmp_path / "dpo" / "metrics.jsonl").is_file()


@pytest.mark.parametrize(
    "command, inputs",
    [
        ("rlhf", ["--reward", "x:y", "--prompts", "p.jsonl", "--whiten-advantages", "none"]),
        ("dpo", ["--data", "d.jsonl"]),
    ],  # bool | None too
)
def test_boolean_flags_take_the_spellings_of_fastppo_train(command, inputs) -> None:
    """--x, --x V and --no-x, as `fastppo train` takes them."""
    args = parse_cli([command, "--model", "m", *inputs, "--progress", "false", "--no-resume", "--lora"])
    assert (args.progress, args.resume, args.lora, getattr(args, "whiten_advantages", None)) == (
        False,
        False,
        True,
        None,
    )
    assert parse_cli([command, "--model", "m", *inputs, "--no-progress"]).progress is False
    with pytest.raises(FastPPOError, match="--lora expects true or false, got 'maybe'"):
        parse_cli([command, "--model", "m", *inputs, "--lora", "maybe"])


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--mini-batch-size", "3"], "must divide"),
        (["--estimator", "grpo"], "num-generations 2"),
        (["--estimator", "ppo"], "invalid choice"),
        (["--dtype", "fp64"], "invalid choice"),
        (["--top-p", "0"], "top-p"),
        (["--top-k", "-1"], "top-k"),
    ],
)
def test_bad_flags_fail_before_loading_anything(tmp_path, extra, message) -> None:
    with pytest.raises(FastPPOError, match=message):
        run_cli(["rlhf", "--model", str(tmp_path / "not-loaded"), "--reward", "x:y", "--prompts", "p.jsonl", *extra])


def test_missing_inputs_are_one_line_errors(tiny_model, tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(FastPPOError, match="empty"):
        run_cli(
            [
                "rlhf",
                "--model",
                str(tiny_model),
                "--reward",
                "tests.support.tiny_lm:early_letters",
                "--prompts",
                str(empty),
            ]
        )
    with pytest.raises(FastPPOError, match="required"):
        parse_cli(["rlhf", "--reward", "x:y", "--prompts", "p.jsonl"])


def test_local_paths_that_do_not_exist_fail_before_anything_loads(tmp_path, monkeypatch) -> None:
    # Path-like (./, ../, /, ~): never a hub id, so no minute of hub retries; named before the data is read.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "hi"}))
    cases = [
        (["rlhf", "--model", "./typo-path", "--reward", "x:y", "--prompts", "missing.jsonl"],
         "--model './typo-path' does not exist"),
        (["dpo", "--model", "../typo-path", "--data", "missing.jsonl"], "--model '../typo-path' does not exist"),
        (["rlhf", "--model", str(tmp_path), "--critic-model", "./typo-critic", "--reward", "x:y", "--prompts",
          "missing.jsonl"],
         "--critic-model './typo-critic' does not exist"),
        (["rlhf", "--model", str(tmp_path), "--reward", "./typo-reward", "--prompts", "p.jsonl"],
         "--reward './typo-reward' does not exist"),
    ]  # fmt: skip
    for argv, message in cases:
        with pytest.raises(FastPPOError, match=message):
            run_cli(argv)


# Every flag of rlhf, dpo and reward-model given a bad value, through `fastppo`'s entry point.
# {model}, {prompts}, {pairs}, {saved}: the tiny model, a prompts file, a pairs file (2 pairs),
# a save_to_disk dataset with a train split only.
BAD_INPUTS = [
    (
        "rlhf",
        ["--prompt-column", "text"],
        r"--prompts '.*p.jsonl' has no column 'text' \(it has prompt\): name the column with --prompt-column",
    ),
    ("rlhf", ["--split", "test", "--prompts", "{saved}"], r"has no split 'test': pass --split with one of train"),
    ("rlhf", ["--chat-template"], "has no chat template: drop --chat-template"),
    ("rlhf", ["--stop"], "argument --stop: expected one argument"),
    ("rlhf", ["--eval-prompts", "{tmp}/missing.jsonl"], "--eval-prompts .*missing.jsonl.* does not exist"),
    ("rlhf", ["--eval-every", "0"], "--eval-every must be positive"),
    ("rlhf", ["--sample-every", "-2"], "--sample-every must be 0"),
    ("rlhf", ["--num-samples", "0"], "--num-samples must be positive"),
    ("rlhf", ["--lr-schedule", "step"], "argument --lr-schedule: invalid choice"),
    ("rlhf", ["--lr-warmup-steps", "-1"], "--lr-warmup-steps must be 0 or positive"),
    ("rlhf", ["--lr-warmup-steps", "3"], "--lr-warmup-steps 3 is more than the run's 2 optimizer steps"),
    ("rlhf", ["--report-to", "mlflow"], "argument --report-to: invalid choice"),
    ("rlhf", ["--wandb-project"], "argument --wandb-project: expected one argument"),
    ("rlhf", ["--generator", "sglang"], "argument --generator: invalid choice"),
    ("rlhf", ["--generator", "vllm", "--device", "cpu"], "--generator vllm needs a CUDA GPU"),
    ("rlhf", ["--vllm-gpu-memory", "1.5"], r"--vllm-gpu-memory must be in \(0, 1\]"),
    ("rlhf", ["--fsdp"], "--fsdp shards the model over the processes of a torchrun launch"),
    ("rlhf", ["--save-every", "-1"], "--save-every must be 0"),
    ("rlhf", ["--keep-checkpoints", "0"], "--keep-checkpoints must be 1 or more"),
    ("rlhf", ["--torch-threads", "-1"], "--torch-threads must be 0"),
    ("dpo", ["--torch-threads", "-1"], "--torch-threads must be 0"),
    ("reward-model", ["--torch-threads", "-1"], "--torch-threads must be 0"),
    ("rlhf", ["--gamma", "1.5"], r"--gamma must be in \[0, 1\]"),
    ("rlhf", ["--clip-coef", "0"], "--clip-coef must be positive"),
    ("rlhf", ["--max-grad-norm", "-1"], "--max-grad-norm must be positive"),
    ("rlhf", ["--kl-coef", "-0.1"], "--kl-coef must be 0 or positive"),
    ("rlhf", ["--target-kl", "0"], "--target-kl must be positive"),
    ("rlhf", ["--learning-rate", "nan"], "--learning-rate must be positive, got nan"),
    ("rlhf", ["--kl-warn", "0"], "--kl-warn must be positive, got 0"),
    ("rlhf", ["--kl-warn", "nan"], "--kl-warn must be positive, got nan"),
    ("rlhf", ["--missing-eos-penalty", "nan"], "--missing-eos-penalty must be a finite number, got nan"),
    ("rlhf", ["--missing-eos-penalty", "inf"], "--missing-eos-penalty must be a finite number, got inf"),
    ("rlhf", ["--seed", "-1"], r"--seed must be in \[0, 4294967295\] \(2\*\*32 - 1\), got -1"),
    ("dpo", ["--seed", "4294967296"], r"--seed must be in \[0, 4294967295\]"),
    ("reward-model", ["--seed", "-5"], r"--seed must be in \[0, 4294967295\]"),
    ("dpo", ["--chosen-column", "good"], "has no column 'good' .*: name the column with --chosen-column"),
    ("dpo", ["--rejected-column", "bad"], "has no column 'bad' .*: name the column with --rejected-column"),
    ("dpo", ["--split", "test", "--data", "{saved}"], "has no split 'test'"),
    ("dpo", ["--loss", "kto"], "argument --loss: invalid choice"),
    ("dpo", ["--loss", "cdpo"], r"--loss cdpo needs --label-smoothing in \(0, 0.5\), got 0.0"),
    ("dpo", ["--loss", "cdpo", "--label-smoothing", "0.5"], r"--label-smoothing in \(0, 0.5\), got 0.5"),
    ("dpo", ["--label-smoothing", "0.1"], "--label-smoothing is conservative DPO's: pass --loss cdpo"),
    ("dpo", ["--precompute-ref-logps", "maybe"], "--precompute-ref-logps expects true or false, got 'maybe'"),
    ("dpo", ["--max-prompt-length", "0"], "--max-prompt-length must be positive"),
    ("dpo", ["--max-completion-length", "0"], "--max-completion-length must be positive"),
    ("dpo", ["--max-grad-norm", "0"], "--max-grad-norm must be positive"),
    ("dpo", ["--lr-warmup-steps", "3"], "--lr-warmup-steps 3 is more than the run's 2 optimizer steps"),
    ("dpo", ["--fsdp"], "--fsdp shards the model over the processes of a torchrun launch"),
    ("reward-model", ["--eval-split", "1"], r"--eval-split must be in \[0, 1\)"),
    ("reward-model", ["--eval-every", "0"], "--eval-every must be positive"),
    ("reward-model", ["--max-length", "0"], "--max-length must be positive"),
    (
        "reward-model",
        ["--batch-size", "3", "--gradient-accumulation-steps", "2"],
        "--gradient-accumulation-steps 2 must divide --batch-size 3",
    ),
    ("reward-model", ["--lora"], "drop --lora and --gradient-checkpointing"),
    ("reward-model", ["--fsdp"], "fastppo reward-model trains in one process: drop --fsdp"),
    ("reward-model", ["--max-grad-norm", "0"], "--max-grad-norm must be positive"),
    ("reward-model", ["--chosen-column", "good"], "name the column with --chosen-column"),
    ("reward-model", ["--generator", "vllm"], "unrecognized arguments: --generator vllm"),
    (
        "reward-model",
        ["--lr-warmup-steps", "3", "--eval-split", "0"],
        "--lr-warmup-steps 3 is more than the run's 2 optimizer steps",
    ),
]


@pytest.mark.parametrize("command, flags, message", BAD_INPUTS, ids=[f"{c} {' '.join(f)}" for c, f, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(tiny_model, tmp_path, capsys, command, flags, message) -> None:
    datasets = pytest.importorskip("datasets")
    prompts, pairs, saved = tmp_path / "p.jsonl", tmp_path / "pairs.jsonl", tmp_path / "saved"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("hi", "abc")))
    pairs.write_text("".join(json.dumps({"prompt": p, "chosen": "aa", "rejected": "zz"}) + "\n" for p in ("hi", "abc")))
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list([{"prompt": "hi", "chosen": "aa", "rejected": "zz"}])}
    ).save_to_disk(str(saved))
    common = ["--model", str(tiny_model), "--output-dir", str(tmp_path / "run"), "--no-progress"]
    base = {
        "rlhf": [
            "--reward",
            "tests.support.tiny_lm:early_letters",
            "--prompts",
            str(prompts),
            "--steps",
            "2",
            "--prompts-per-step",
            "2",
            "--mini-batch-size",
            "2",
        ],
        "dpo": ["--data", str(pairs), "--batch-size", "1"],
        "reward-model": ["--data", str(pairs), "--batch-size", "1"],
    }[command]
    flags = [f.format(tmp=tmp_path, saved=saved) for f in flags]
    assert re.search(message, cli_error([command, *common, *base, *flags], capsys))
    assert not (tmp_path / "run").exists()  # failed before the run wrote anything
