"""`fastppo train` from the command line: bad input gives one line and exit 2; good input a run dir."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from fastppo.cli.main import main

TINY = [
    "--total-timesteps",
    "256",
    "--num-envs",
    "2",
    "--num-steps",
    "64",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
    "--progress",
    "false",
]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "NoSuchEnv-v0"], "unknown env id 'NoSuchEnv-v0'"),
        (
            ["train", "numpy-v0"],
            "unknown env id 'numpy-v0': Environment `numpy` doesn't exist. (see gymnasium.pprint_registry())",
        ),
        (["train", "CartPole-v1", "--preset", "nope"], "unknown preset 'nope': available presets are"),
        (["train", "CartPole-v1", "--no-such-flag", "3"], "unrecognized arguments: --no-such-flag 3"),
        (["train", "CartPole-v1", "--learning-rate", "fast"], "--ppo.learning-rate expects a number, got 'fast'"),
        (["train", "CartPole-v1", "--learning-rate", "-1"], "--ppo.learning-rate must be > 0, got -1.0"),
        (["train", "CartPole-v1", "--num-envs", "2.5"], "--env.num-envs expects an integer, got '2.5'"),
        (["train", "CartPole-v1", "--num-envs", "0"], "--env.num-envs must be a positive integer, got 0"),
        (["train", "CartPole-v1", "--norm-adv", "maybe"], "--ppo.norm-adv expects true or false, got 'maybe'"),
        (["train", "CartPole-v1", "--gamma", "1.5"], "--ppo.gamma must be in [0, 1], got 1.5"),
        (["train", "CartPole-v1", "--objective", "trpo"], "--ppo.objective must be one of clip, kl, got 'trpo'"),
        (
            ["train", "CartPole-v1", "--num-envs", "3", "--num-steps", "5", "--num-minibatches", "4"],
            "batch size 15 (num_envs 3 x num_steps 5) does not split into 4 minibatches",
        ),
        (["train", "CartPole-v1", "--total-timesteps", "10"], "is less than one batch"),
        (["train", "CartPole-v1", "--device", "tpu9"], "unknown device 'tpu9'"),
        (["train", "nosuchmodule:Env"], "cannot load env 'nosuchmodule:Env'"),
        (["train", "tests.support.fake_envs:TextObsEnv", *TINY], "unsupported observation space Text"),
        (
            ["train", "CartPole-v1", "--backend", "tensor", "--capture-video", "true"],
            "--capture-video needs gymnasium envs that render, and the tensor backend has none",
        ),
        (["train", "CartPole-v1", "--seed", "-1"], "--run.seed must be in [0, 4294967295] (2**32 - 1), got -1"),
        (
            ["train", "CartPole-v1", "--seed", str(2**32)],
            "--run.seed must be in [0, 4294967295] (2**32 - 1), got 4294967296",
        ),
        (["eval", "no-run", "--seed", "-1"], "--seed must be in [0, 4294967295] (2**32 - 1), got -1"),
        (["record", "no-run", "--seed", str(2**32)], "--seed must be in [0, 4294967295] (2**32 - 1), got 4294967296"),
        (["train", "CartPole-v1", "--learning-rate", "inf"], "--ppo.learning-rate must be finite, got inf"),
        (["train", "CartPole-v1", "--adam-eps", "inf"], "--ppo.adam-eps must be finite, got inf"),
        (["train", "CartPole-v1", "--max-grad-norm", "inf"], "--ppo.max-grad-norm must be finite, got inf"),
        (["train", "CartPole-v1", "--kl-target", "inf"], "--ppo.kl-target must be finite, got inf"),
        (["train", "CartPole-v1", "--ent-coef", "inf"], "--ppo.ent-coef must be finite, got inf"),
        (["train", "CartPole-v1", "--ent-coef", "nan"], "--ppo.ent-coef must be >= 0, got nan"),
        (["train", "CartPole-v1", "--vf-coef", "nan"], "--ppo.vf-coef must be >= 0, got nan"),
        (["train", "CartPole-v1", "--kl-beta", "inf"], "--ppo.kl-beta must be finite, got inf"),
        (["train", "CartPole-v1", "--gae-lambda", "inf"], "--ppo.gae-lambda must be in [0, 1], got inf"),
        (["train", "CartPole-v1", "--gamma", "nan"], "--ppo.gamma must be in [0, 1], got nan"),
        (["train", "CartPole-v1", "--target-kl", "nan"], "--ppo.target-kl must be > 0 or none, got nan"),
        (
            ["train", "CartPole-v1", "--clip-coef", "inf", "--clip-schedule", "linear"],
            "--ppo.clip-coef inf cannot decay linearly",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastppo: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_an_id_a_package_registers_on_import_gets_the_module_form(monkeypatch, capsys):
    # As in a fresh process: popgym not imported yet, its ids not registered.
    import gymnasium as gym

    env_id = "popgym-RepeatPreviousEasy-v0"
    for registered in [i for i in gym.registry if i.startswith("popgym-")]:
        monkeypatch.delitem(gym.registry, registered)
    for name in [m for m in sys.modules if m == "popgym" or m.startswith("popgym.")]:
        monkeypatch.delitem(sys.modules, name)
    assert main(["train", env_id, *TINY]) == 2
    assert f"(popgym registers it when imported: give 'popgym:{env_id}')" in capsys.readouterr().err


def test_an_unknown_id_imports_no_module_it_merely_names(capsys):
    # 'antigravity' is a standard-library module with a side effect (it opens a web browser): only
    # packages that require gymnasium are imported to look for the id.
    assert "antigravity" not in sys.modules
    assert main(["train", "antigravity-v0", *TINY]) == 2
    assert "antigravity" not in sys.modules
    assert "(see gymnasium.pprint_registry())" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, path, message",
    [
        ("--run-dir", "{file}", "the run directory {file} is a file, not a folder"),
        ("--run-dir", "{file}/run", "cannot write the run directory {file}/run: {file} is a file, not a folder"),
        ("--run-root", "{file}", "cannot write the run directory {file}/CartPole-v1__ppo__1__"),
        (
            "--run-dir",
            "/proc/fastppo-run",
            "cannot write the run directory /proc/fastppo-run: No such file or directory",
        ),
    ],
)
def test_an_unwritable_run_dir_fails_before_training(tmp_path, capsys, flag, path, message):
    (tmp_path / "file").write_text("")
    path, message = path.format(file=tmp_path / "file"), message.format(file=tmp_path / "file")
    assert main(["train", "CartPole-v1", flag, path, *TINY]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"fastppo: error: {message}") and err.count("\n") == 1, err
    assert "steps" not in out  # nothing trained


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ([], 2),
        (["--seeds", "1-2", "--backend", "tensor", "--workers", "1"], 2),
        # In worker processes each seed fails on its own, exit 1.
        (["--seeds", "1-2", "--backend", "tensor", "--workers", "2"], 1),
        (["--seeds", "1-2", "--workers", "1"], 1),
    ],
    ids=["single", "stack", "stacks", "workers"],
)
def test_a_run_that_cannot_start_leaves_no_empty_folder(tmp_path, capsys, extra, code):
    # The CNN encoder fails on CartPole's flat observations once the run folder is made: the
    # folder, and the parents made for it, go again (``fastppo report runs/`` would stop at them).
    run_dir = tmp_path / "runs" / "run"
    assert main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--policy.encoder", "cnn", *TINY, *extra]) == code
    captured = capsys.readouterr()
    assert "the cnn encoder needs [channels, height, width] observations" in captured.err + captured.out
    assert list(tmp_path.iterdir()) == []


def test_a_failed_start_keeps_an_existing_folder_and_its_files(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "empty").mkdir()
    assert main(["train", "CartPole-v1", "--run-dir", str(tmp_path), "--policy.encoder", "cnn", *TINY]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "notes.txt"]


def test_bad_input_from_a_real_process_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--clip-coef", "x"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr == "fastppo: error: --ppo.clip-coef expects a number, got 'x'\n"


def test_train_writes_a_run_directory(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert (
        main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--seed", "7", "--ppo.clip-coef", "0.1", *TINY]) == 0
    )
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["run"]["seed"] == 7 and config["ppo"]["clip_coef"] == 0.1 and config["env"]["env_id"] == "CartPole-v1"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [128, 256]
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert (run_dir / "policy.safetensors").is_file()
    out = capsys.readouterr().out
    assert f"results in {run_dir} (metrics.jsonl, TensorBoard: tensorboard --logdir {tmp_path})" in out


def test_a_run_without_tensorboard_does_not_point_to_it(tmp_path, capsys):
    assert main(["train", "CartPole-v1", "--run-dir", str(tmp_path / "run"), *TINY, "--no-tensorboard"]) == 0
    assert f"fastppo: results in {tmp_path / 'run'} (metrics.jsonl)\n" in capsys.readouterr().out


def test_default_run_dir_follows_cleanrl_naming(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "CartPole-v1", "--exp-name", "demo", "--seed", "4", *TINY]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("CartPole-v1__demo__4__")


def test_help_lists_hyperparameters_with_their_docs(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--ppo.learning-rate V, --learning-rate V" in out
    assert "Adam learning rate" in out


def test_summary_says_where_the_time_went(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--run-dir",
                str(tmp_path / "run"),
                "--total-timesteps",
                "2048",
                "--progress",
                "false",
                "--tensorboard",
                "false",
            ]
        )
        == 0
    )
    summary = next(line for line in capsys.readouterr().out.splitlines() if " SPS" in line)  # after the start header
    split = re.search(r"; time: (.*)\.$", summary).group(1).split(", ")
    shares = {part.split()[0]: int(part.split()[1].rstrip("%")) for part in split}
    assert set(shares) == {"env", "copy", "policy", "update"} and 98 <= sum(shares.values()) <= 102, summary
    assert list(shares.values()) == sorted(shares.values(), reverse=True)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(row[f"time/{name}"] > 0 for row in rows for name in ("env", "copy", "policy", "update"))


def test_a_run_starts_with_a_header_of_what_it_trains(tmp_path, capsys):
    run = tmp_path / "run"
    argv = [
        "train",
        "Acrobot-v1",
        "--run-dir",
        str(run),
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--total-timesteps",
        "256",
        "--learning-rate",
        "1e-3",
        "--no-progress",
        "--no-tensorboard",
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [
        f"fastppo: Acrobot-v1 (preset Acrobot-v1, sync backend) into {run}, on cpu (1 thread)",
        "fastppo: 2 envs x 64 steps = 128 per update in 4 minibatches x 4 epochs; 256 steps = 2 updates",
        "fastppo: differs from the defaults: learning_rate=0.001",  # the Acrobot preset's values are CleanRL's defaults
        "fastppo: warning: --total-timesteps 256 gives only 2 updates of 128 steps (2 envs x 64 steps): PPO "
        "needs more to learn; "
        "raise --total-timesteps to 1280 or more, or lower --num-envs/--num-steps",
    ]
    assert lines[4].startswith("fastppo: Acrobot-v1: 256 steps, ")
    assert main(["train", "--resume", str(run), "--total-timesteps", "1280"]) == 0  # 10 updates: no warning
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:4] == [
        f"fastppo: Acrobot-v1 (its saved config, sync backend) into {run}, on cpu (1 thread)",
        "fastppo: 2 envs x 64 steps = 128 per update in 4 minibatches x 4 epochs; 1280 steps = 10 updates",
        "fastppo: differs from the defaults: learning_rate=0.001",
    ]
    assert lines[4].startswith("fastppo: Acrobot-v1: 1280 steps, ")


def test_time_split_of_a_history():
    from fastppo.cli.train import time_split

    history = [{"time/update": 3.0, "time/env": 1.0, "charts/SPS": 5.0}, {"time/update": 3.0, "time/env": 1.0}]
    assert time_split(history) == "; time: update 75%, env 25%"
    assert time_split([]) == ""


def test_boolean_flags_take_every_spelling(tmp_path):
    """--x, --x V and --no-x (or --section.no-x), as `fastppo rlhf` and `fastppo dpo` take them."""
    run_dir = tmp_path / "run"
    tiny = TINY[: TINY.index("--progress")]
    argv = [
        "train",
        "--no-progress",
        "CartPole-v1",
        "--run-dir",
        str(run_dir),
        *tiny,
        "--run.no-tensorboard",
        "--ppo.no-norm-adv",
        "--clip-vloss",
        "false",
        "--normalize-obs",
    ]
    assert main(argv) == 0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert [
        config["run"]["progress"],
        config["run"]["tensorboard"],
        config["ppo"]["norm_adv"],
        config["ppo"]["clip_vloss"],
        config["env"]["normalize_obs"],
    ] == [False, False, False, False, True]
    assert not list(run_dir.glob("events.out.tfevents.*"))


@pytest.mark.parametrize("steps, episodes", [(64, 2), (16, 0)])
def test_the_final_return_is_the_summary_lines_figure_when_the_last_iteration_ends_no_episode(
    tmp_path, capsys, steps, episodes
):
    # Seed 2 on 1 env x 16 steps: episodes end in the 2nd and 3rd iterations, none in the 1st or
    # the 4th, where the README's agent.history[-1]["charts/episodic_return"] raised KeyError.
    import fastppo

    flags = {
        "total_timesteps": steps,
        "num_envs": 1,
        "num_steps": 16,
        "num_minibatches": 1,
        "seed": 2,
        "progress": False,
        "tensorboard": False,
    }
    agent = fastppo.train("CartPole-v1", run_dir=tmp_path / "api", **flags)
    assert "charts/episodic_return" not in agent.history[-1]
    logged = [
        (row["charts/episodic_return"], row["charts/episodes"]) for row in agent.history if row["charts/episodes"]
    ]
    assert sum(count for _, count in logged) == episodes == len(agent.episode_returns)
    assert agent.final_return == (pytest.approx(sum(r * n for r, n in logged) / episodes) if episodes else None)
    argv = [f"--{name.replace('_', '-')}={str(value).lower()}" for name, value in flags.items()]
    assert main(["train", "CartPole-v1", "--run-dir", str(tmp_path / "cli"), *argv]) == 0
    shown = (
        f"{agent.final_return:.1f} mean return over the last {episodes} episodes" if episodes else "no episode finished"
    )
    assert f"fastppo: CartPole-v1: {steps} steps, {shown}, " in capsys.readouterr().out


def test_a_finished_run_ends_with_what_its_return_means_and_what_to_run_next(tmp_path, capsys):
    run = tmp_path / "my run"
    assert main(["train", "CartPole-v1", "--run-dir", str(run), *TINY]) == 0
    lines = capsys.readouterr().out.splitlines()
    final = re.search(r", (-?[\d.]+) mean return over the last", lines[-4]).group(1)
    assert lines[-3] == f"fastppo: results in {run} (metrics.jsonl, TensorBoard: tensorboard --logdir {tmp_path})"
    assert lines[-2:] == [
        f"fastppo: CartPole-v1 counts as solved at a mean return of 475 (its reward_threshold): {final} is "
        "not solved yet (train longer: --total-timesteps)",
        f"fastppo: next: fastppo eval '{run}' (evaluate the trained agent), fastppo plot '{run}' (its learning curves)",
    ]


def test_what_a_final_return_means_comes_from_the_envs_reward_threshold():
    from fastppo.cli.train import solved_line

    assert (
        solved_line("CartPole-v1", 500.0)
        == "fastppo: CartPole-v1 counts as solved at a mean return of 475 (its reward_threshold): 500.0 is solved"
    )
    assert (
        solved_line("Acrobot-v1", -99.5)
        == "fastppo: Acrobot-v1 counts as solved at a mean return of -100 (its reward_threshold): -99.5 is solved"
    )
    # No threshold (Pendulum), no gymnasium id (user code, PettingZoo), no return: nothing to say.
    assert [
        solved_line(env_id, 1.0)
        for env_id in ("Pendulum-v1", "tests.support.fake_envs:MaskedChoiceEnv", "pz:pettingzoo.classic.tictactoe_v3")
    ] == [None] * 3
    assert solved_line("CartPole-v1", None) is None


def test_the_progress_bar_ends_at_100_percent_of_the_steps_the_run_takes(tmp_path, capsys, monkeypatch):
    # --total-timesteps 300 in batches of 128: the run takes 256 steps, and its bar ends there.
    monkeypatch.setenv("COLUMNS", "120")
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--run-dir",
                str(tmp_path / "run"),
                *TINY[:-2],
                "--total-timesteps",
                "300",
                "--no-tensorboard",
            ]
        )
        == 0
    )
    bar = [line for line in capsys.readouterr().err.splitlines() if " SPS " in line][-1]
    assert re.search(r"━ +256/256 SPS .* eta 0:00:00$", bar), bar
