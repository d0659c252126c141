"""The benchmark scripts' bad flags stop in one line with exit 2, before any child process, env or
model is started (they used to fail deep inside, with a traceback or a child's)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

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
        ("cnn_update", ["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
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


STAGES = "tests gpu seeds atari rlhf pong breakout10m".split()


def gpu_session(
    *argv: str, out: Path, timeout: float = 60, python: str = sys.executable
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": python, "OUT": str(out)}
    return subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_session.sh"), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=BENCHMARKS.parent,
        env=env,
    )


@pytest.mark.parametrize("options", [[], ["--dry-run"], ["--dry-run", "--print"]])
def test_an_unknown_gpu_session_stage_is_one_line_and_exit_2(options: list[str], tmp_path: Path) -> None:
    done = gpu_session(*options, "tests", "bogus", out=tmp_path / "out")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip().splitlines() == [
        "gpu_session.sh: error: unknown stage 'bogus': pick from " + " ".join(STAGES)
    ]
    assert not (tmp_path / "out").exists()


def printed(*argv: str, out: Path) -> dict[str, str]:
    """--print's lines: each stage's command, by stage name."""
    done = gpu_session(*argv, out=out)
    assert (done.returncode, done.stderr) == (0, "")
    lines = [re.fullmatch(r"(\w+) \(limit \d+s\): (.+)", line) for line in done.stdout.splitlines()]
    return {str(line[1]): str(line[2]) for line in lines if line}


def test_every_gpu_session_stage_has_a_cpu_dry_run_and_print_runs_nothing(tmp_path: Path) -> None:
    """--dry-run runs all seven stages by default, each through the script the device runs but on the
    CPU (no command names CUDA), the tests stage with the device's very test selection; --print shows
    the commands and runs nothing."""
    out = tmp_path / "out"
    dry = printed("--dry-run", "--print", out=out)
    assert list(dry) == STAGES
    real = printed("--print", out=out)
    assert list(real) == STAGES[:5]  # pong and breakout10m run on the device only when named
    assert dry["tests"] == real["tests"] and "tests/training/test_compile.py::test_" in real["tests"]
    for name in STAGES[1:]:
        assert "--device cpu" in dry[name] and "cuda" not in dry[name], name
    for name in STAGES[1:5]:  # the same script as on the device
        assert re.findall(r"\w+\.py", dry[name])[0] == re.findall(r"\w+\.py", real[name])[0], name
    assert printed("--dry-run", "--print", "rlhf", "gpu", out=out) == {"gpu": dry["gpu"], "rlhf": dry["rlhf"]}
    assert not out.exists()


def test_a_failed_gpu_session_stage_leaves_the_others_and_the_call_names_it(tmp_path: Path) -> None:
    """An interpreter that is not there: each stage fails with its log, the next still runs, and the
    call ends with exit 1 and one line naming the failed stages (the last stage's code used to be
    the call's)."""
    done = gpu_session("--dry-run", "tests", "rlhf", out=tmp_path / "out", python=str(tmp_path / "no-python"))
    assert re.findall(r"=== (\w+) rc=(\d+)", done.stdout) == [("tests", "127"), ("rlhf", "127")]
    assert (done.returncode, done.stderr) == (
        1,
        f"gpu_session.sh: failed stages: tests rlhf (their logs in {tmp_path / 'out'})\n",
    )
    assert "no-python" in (tmp_path / "out" / "rlhf.log").read_text()


@pytest.mark.slow
def test_the_gpu_sessions_gpu_stages_dry_run_on_the_cpu(tmp_path: Path) -> None:
    """The CPU versions of the stages of the GPU figures (~3 min on 2 busy cores): the CUDA tests
    skip, saying so, and the others pass; gpu.py's rows, those that need CUDA saying they are
    skipped; a stack of seeds solved against single runs; the tiny model's RLHF tokens/s."""
    done = gpu_session("--dry-run", "tests", "gpu", "seeds", "rlhf", out=tmp_path, timeout=840)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu.log", "rlhf.log", "seeds.log", "tests.log"]
    tests = (tmp_path / "tests.log").read_text()
    assert re.search(r"\n\d+ passed, \d+ skipped", tests) and "needs a CUDA GPU" in tests
    gpu = (tmp_path / "gpu.log").read_text()
    assert re.search(r"\neager +655360 steps, .* steady +\d+ SPS", gpu)
    assert re.search(r"\n--cudagraphs +skipped: CUDA graphs need a CUDA device, not cpu\n", gpu)
    assert re.search(r"\n--compile +10240 steps, .*\n.*\n--compile / eager: [\d.]+x", gpu)
    assert re.search(r"\neager on the CPU +skipped: the runs above are on the CPU already\n", gpu)
    assert re.search(r"\n\| CartPole-v1 \| one per CPU \| [\d.]+ us \| [\d.]+ us \| [\d.]+x \|\n", gpu)
    seeds = (tmp_path / "seeds.log").read_text()
    assert len(re.findall(r"\nfastppo stacked .*: [\d.]+ s \(\d+ steps per seed; \d unsolved\)", seeds)) == 2
    assert "fastppo tensor, 2 sequential runs: " in seeds
    rlhf = (tmp_path / "rlhf.log").read_text()
    assert re.search(r"\n\| tiny \| 0\.11M \| \d+ \| \d+ \| \d+ \|", rlhf) and "gpt2-small" not in rlhf


@pytest.mark.slow
def test_the_gpu_sessions_atari_stages_dry_run_on_the_cpu(tmp_path):
    """The stages' CPU versions (~4 min on 2 busy cores): Breakout trained on the ale backend, then
    the env-only ceiling of the same envs; Pong trained and evaluated; a long Breakout run stopped by
    its time limit in a first call and resumed to its end in a second, then evaluated."""
    pytest.importorskip("ale_py")
    done = gpu_session("--dry-run", "atari", "pong", "breakout10m", out=tmp_path, timeout=840)
    log = (tmp_path / "atari.log").read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BreakoutNoFrameskip-v4 (ale backend): final return" in log
    assert re.search(r"time: (\w+ \d+%, ){3}\w+ \d+%", log) and "update" in log.split("time: ")[1].split("\n")[0]
    assert re.search(r"env-only ceiling \(the same 2 envs, random actions\): \d+ SPS; training makes \d+% of it", log)
    pong = (tmp_path / "pong.log").read_text()
    assert "PongNoFrameskip-v4: 256 of 256 steps" in pong and "deterministic evaluation, 1 game(s) (raw score)" in pong
    long_run = (tmp_path / "breakout10m.log").read_text()
    first, second = long_run.split("# atari_long: ")[1:]
    assert "SIGINT: stopped after iteration" in first and "of 512 steps" in first and "evaluation" not in first
    assert "resuming" in second and "512 of 512 steps" in second and "deterministic evaluation" in second


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
