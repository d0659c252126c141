"""`fastppo rlhf` / `fastppo dpo` through the parser the top-level CLI uses."""

from __future__ import annotations

import json

import pytest

from fastppo.errors import FastPPOError
from tests.rlhf.tiny import parse_cli, run_cli


def test_rlhf_command_trains_and_resumes(tiny_model, tmp_path, capsys) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ("hi", "abc", "yo", "ok")))
    argv = ["rlhf", "--model", str(tiny_model), "--reward", "tests.rlhf.tiny:early_letters", "--prompts", str(prompts),
            "--steps", "2", "--prompts-per-step", "2", "--num-generations", "2", "--mini-batch-size", "2", "--ppo-epochs", "1",
            "--max-new-tokens", "6", "--estimator", "rloo", "--output-dir", str(tmp_path / "run"), "--no-progress", "--lora"]
    assert run_cli(argv) == 0
    assert "reward" in capsys.readouterr().out
    assert run_cli([*argv[: argv.index("--steps") + 1], "3", *argv[argv.index("--steps") + 2 :], "--resume"]) == 0
    steps = [json.loads(line)["global_step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_dpo_command(tiny_model, tmp_path) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "hi", "chosen": "aa", "rejected": "zz"}) + "\n")
    assert run_cli(["dpo", "--model", str(tiny_model), "--data", str(data), "--batch-size", "1", "--output-dir", str(tmp_path / "dpo"), "--no-progress",
                    "--dtype", "bf16", "--gradient-checkpointing"]) == 0
    assert (tmp_path / "dpo" / "metrics.jsonl").is_file()


@pytest.mark.parametrize(
    "command, inputs",
    [("rlhf", ["--reward", "x:y", "--prompts", "p.jsonl", "--whiten-advantages", "none"]), ("dpo", ["--data", "d.jsonl"])],  # bool | None too
)
def test_boolean_flags_take_the_spellings_of_fastppo_train(command, inputs) -> None:
    """--x, --x V and --no-x, as `fastppo train` takes them."""
    args = parse_cli([command, "--model", "m", *inputs, "--progress", "false", "--no-resume", "--lora"])
    assert (args.progress, args.resume, args.lora, getattr(args, "whiten_advantages", None)) == (False, False, True, None)
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
        run_cli(["rlhf", "--model", str(tiny_model), "--reward", "tests.rlhf.tiny:early_letters", "--prompts", str(empty)])
    with pytest.raises(FastPPOError, match="required"):
        parse_cli(["rlhf", "--reward", "x:y", "--prompts", "p.jsonl"])


def test_local_paths_that_do_not_exist_fail_before_anything_loads(tmp_path, monkeypatch) -> None:
    # Path-like (./, ../, /, ~): never a hub id, so no minute of hub retries; named before the data is read.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "hi"}))
    cases = [
        (["rlhf", "--model", "./typo-path", "--reward", "x:y", "--prompts", "missing.jsonl"], "--model './typo-path' does not exist"),
        (["dpo", "--model", "../typo-path", "--data", "missing.jsonl"], "--model '../typo-path' does not exist"),
        (["rlhf", "--model", str(tmp_path), "--critic-model", "./typo-critic", "--reward", "x:y", "--prompts", "missing.jsonl"],
         "--critic-model './typo-critic' does not exist"),
        (["rlhf", "--model", str(tmp_path), "--reward", "./typo-reward", "--prompts", "p.jsonl"], "--reward './typo-reward' does not exist"),
    ]  # fmt: skip
    for argv, message in cases:
        with pytest.raises(FastPPOError, match=message):
            run_cli(argv)
