"""The benchmark scripts' bad flags stop in one line with exit 2, before any child process, env or
model is started (they used to fail deep inside, with a traceback or a child's)."""

from __future__ import annotations

import importlib
import re
import sys

import pytest
import torch

from tests.support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"
NO_CUDA = "torch sees no CUDA GPU"


@pytest.mark.parametrize(
    ("script", "argv", "message"),
    [
        ("seed_stack", ["--seeds", "0"], "argument --seeds: must be at least 1, got 0"),
        ("seed_stack", ["--sb3-seeds", "-1"], "argument --sb3-seeds: must be at least 0, got -1"),
        ("seed_stack", ["--stack-runs", "0"], "argument --stack-runs: must be at least 1, got 0"),
        ("seed_stack", ["--widths", "1", "x"], "argument --widths: invalid positive value: 'x'"),
        ("seed_stack", ["--device", "meta"], "unknown device 'meta'"),
        ("seed_stack", ["--device", "cuda"], NO_CUDA),
        ("seed_stack", ["--plot", "width.png"], "--plot draws the width rows: add --rows width"),
        ("published_table", ["--recorded"], "--recorded draws the page's table: give --plot PATH"),
        (
            "before_after",
            ["--before", "/nonexistent", "--after", "."],
            "argument --before: /nonexistent is not a fastppo checkout (no src/fastppo/__init__.py)",
        ),
        (
            "before_after",
            ["--before", str(BENCHMARKS.parent), "--after", str(BENCHMARKS.parent), "--pairs", "0"],
            "argument --pairs: must be at least 1, got 0",
        ),
        (
            "gpu",
            ["--device", "cpu", "--halfcheetah-steps", "0"],
            "argument --halfcheetah-steps: must be at least 1, got 0",
        ),
        ("gpu", ["--device", "cpu", "--seeds", "-3"], "argument --seeds: must be at least 1, got -3"),
        ("gpu", [], NO_CUDA),  # its default device
        ("rlhf_throughput", ["--batch", "0"], "argument --batch: must be at least 1, got 0"),
        ("rlhf_throughput", ["--steps", "1"], "--steps must be at least 2"),
        ("rlhf_throughput", ["--device", "cuda"], NO_CUDA),
        (
            "tune_solve_time",
            ["--configs", '{"num_envs": 8}'],
            '--configs must be a JSON list of objects, got {"num_envs": 8}',
        ),
        ("tune_solve_time", ["--configs", "[1]"], "--configs must be a JSON list of objects, got [1]"),
        ("tune_solve_time", ["--configs", "[{"], "argument --configs: invalid loads value"),
        ("tune_solve_time", ["--search", "cnn"], "argument --search: invalid choice: 'cnn'"),
        ("tune_solve_time", ["--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
        ("games", ["/nonexistent/run"], "/nonexistent/run"),
        ("equilibrium", ["--seeds", "0"], "argument --seeds: must be at least 1, got 0"),
        ("equilibrium", ["--games", "kuhn,chess"], "argument --games: unknown game 'chess': choose among kuhn, leduc"),
        ("games", [str(BENCHMARKS), "--mcts", "10,0"], "argument --mcts: must be at least 1, got 0"),
        ("atari_long", ["/nonexistent/run", "--seconds", "0"], "argument --seconds: must be above 0, got 0"),
        ("atari_long", ["/nonexistent/run", "--seconds", "nan"], "argument --seconds: must be above 0, got nan"),
        ("atari_long", ["/x", "--seconds", "9", "--eval-games", "0"], "argument --eval-games: must be at least 1"),
        ("atari_long", [str(BENCHMARKS), "--seconds", "9"], "holds no run: give the new run's train arguments"),
    ],
)
def test_a_bad_benchmark_flag_is_one_line_and_exit_2(script, argv, message, monkeypatch, capsys):
    if message == NO_CUDA and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv])
    with pytest.raises(SystemExit) as done:
        importlib.import_module(script).main()
    assert done.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"{script}.py: error: ") and message in error


def test_an_unknown_gpu_session_stage_is_one_line_and_exit_2():
    import subprocess

    done = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_session.sh"), "tests", "bogus"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gpu_session.sh: error: unknown stage 'bogus': pick from tests gpu seeds atari rlhf pong breakout10m"
    ]


def test_a_gpu_session_stage_without_a_dry_run_is_one_line_and_exit_2():
    import subprocess

    done = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_session.sh"), "--dry-run", "gpu"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (
        2,
        "gpu_session.sh: error: stage 'gpu' has no dry run: --dry-run runs atari pong breakout10m\n",
    )


def test_the_gpu_sessions_atari_stages_dry_run_on_the_cpu(tmp_path):
    """The stages' CPU versions: Breakout trained on the ale backend, then the env-only ceiling of the
    same envs; Pong trained and evaluated; a long Breakout run stopped by its time limit in a first
    call and resumed to its end in a second, then evaluated."""
    import subprocess

    pytest.importorskip("ale_py")
    env = {**__import__("os").environ, "PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_session.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=840,
        cwd=BENCHMARKS.parent,
        env=env,
    )
    log = (tmp_path / "atari.log").read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BreakoutNoFrameskip-v4 (ale backend): final return" in log
    assert re.search(r"time: (\w+ \d+%, ){3}\w+ \d+%", log) and "update" in log.split("time: ")[1].split("\n")[0]
    assert re.search(r"env-only ceiling \(the same 2 envs, random actions\): \d+ SPS; training makes \d+% of it", log)
    pong = (tmp_path / "pong.log").read_text()
    assert "PongNoFrameskip-v4: 256 of 256 steps" in pong and "deterministic evaluation, 1 game(s) (raw score)" in pong
    long_run = (tmp_path / "breakout10m.log").read_text()
    first, second = long_run.split("# atari_long: ")[1:]
    assert "SIGINT: stopped after iteration" in first and "of 1,024 steps" in first and "evaluation" not in first
    assert "resuming" in second and "1,024 of 1,024 steps" in second and "deterministic evaluation" in second


@pytest.mark.games
def test_the_games_benchmark_measures_a_trained_game_agent(tmp_path, monkeypatch, capsys):
    import fastppo

    run = tmp_path / "ttt"
    fastppo.train(
        "pz:pettingzoo.classic.tictactoe_v3",
        run_dir=run,
        total_timesteps=4096,
        num_envs=4,
        num_steps=64,
        progress=False,
        tensorboard=False,
    )
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", ["games.py", str(run), "--games", "4"])
    importlib.import_module("games").main()
    out = capsys.readouterr().out
    assert "games/s, env" in out
    assert [
        line.split("|")[1].strip()
        for line in out.splitlines()
        if line.startswith("| random") or line.startswith("| minimax")
    ] == ["random", "minimax"]
