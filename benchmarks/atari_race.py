"""Atari from pixels on the CPU: fastppo against CleanRL's ppo_atari_envpool.py and Stable-Baselines3, same machine,
same run.

    python benchmarks/atari_race.py --cleanrl-script path/to/ppo_atari_envpool.py     # 16 384 steps each, 2 rounds
    python benchmarks/atari_race.py --steps 4096 --rounds 1 --skip sb3               # quicker, without SB3

Every contender trains Breakout (no sticky actions: ``BreakoutNoFrameskip-v4``, EnvPool's
``Breakout-v5``) at equal settings, 8 envs x 128 steps, 4 epochs x 4 minibatches, the Nature CNN
shared by actor and critic, on the CPU, each in a fresh process of its own:

- fastppo: ``fastppo train BreakoutNoFrameskip-v4 --total-timesteps N`` with its defaults (the
  ``atari`` preset: ale-py's C++ vector env; no speed flags).
- CleanRL: its own ``ppo_atari_envpool.py`` (not shipped here: give its path), run in a venv of
  its own with the versions CleanRL pins for it, envpool 0.8.4 and gym 0.23.1 (EnvPool 1.x no
  longer serves its gym API), created under ``--venvs`` on first use with pip; torch and
  tensorboard come from this interpreter's packages.
- SB3: ``PPO("CnnPolicy")`` with rl-zoo's Atari hyperparameters (AtariWrapper, 4 stacked frames,
  8 envs x 128 steps, 4 epochs, batch 256, lr 2.5e-4 and clip 0.1 annealed, ent 0.01, vf 0.5), in
  a venv of its own with stable-baselines3 (pip, on first use).

Rounds run the contenders one after the other (paired: under a shared machine's load each round
meets about the same load). Per run: the loop's SPS (steps over the training loop's own time, as
each library reports it) and the whole process's (steps over launch-to-exit wall time). The
ratios are fastppo's over each peer's, per round, loop SPS. The ceiling: fastppo's envs (the
same 8, its default backend) stepped alone with random actions in a fresh process, and each
training SPS as a share of it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import sysconfig
import time
from datetime import UTC, datetime
from pathlib import Path

from common import footer, header, positive

GAME = "BreakoutNoFrameskip-v4"
ENVPOOL_GAME = "Breakout-v5"
CONTENDERS = ("fastppo", "cleanrl", "sb3")
PEER_PACKAGES = {"cleanrl": ["envpool==0.8.4", "gym==0.23.1", "numpy<2", "tyro"], "sb3": ["stable-baselines3>=2.3"]}
"""What each peer's venv installs over this interpreter's packages (torch, tensorboard, gymnasium, ale-py)."""

SB3_CHILD = """
import sys, time
import ale_py, gymnasium
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

gymnasium.register_envs(ale_py)
steps, seed = int(sys.argv[1]), int(sys.argv[2])
env = VecFrameStack(make_atari_env(sys.argv[3], n_envs=8, seed=seed), n_stack=4)
linear = lambda start: (lambda remaining: remaining * start)
model = PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=linear(2.5e-4),
            clip_range=linear(0.1), ent_coef=0.01, vf_coef=0.5, device="cpu", seed=seed, verbose=0)
start = time.perf_counter()
model.learn(steps)
print(f"LOOP_SPS {steps / (time.perf_counter() - start):.1f}")
"""
"""rl-zoo's ``atari`` entry of hyperparams/ppo.yml (its env wrapper, frame stack and PPO arguments)."""

CEILING_CHILD = """
import sys, time
import numpy as np, torch
import fastppo
from fastppo.envs import make_vec_env

config = fastppo.make_config(sys.argv[1])
envs = make_vec_env(config.env, torch.device("cpu"))
envs.reset(seed=1)
rng = np.random.default_rng(1)
actions = [torch.as_tensor(rng.integers(0, envs.single_action_space.n, size=envs.num_envs)) for _ in range(64)]
for i in range(20):
    envs.step(actions[i % 64])
steps, start = 0, time.perf_counter()
while time.perf_counter() - start < float(sys.argv[2]):
    envs.step(actions[steps % 64])
    steps += 1
print(f"LOOP_SPS {steps * envs.num_envs / (time.perf_counter() - start):.1f} ({config.env.backend} backend)")
"""
"""The ceiling: fastppo's default envs for the game, random actions, no policy."""


def peer_python(name: str, venvs: Path) -> Path:
    """The interpreter of ``name``'s venv, made on first use: a venv whose own packages
    (``PEER_PACKAGES``) come first and this interpreter's site-packages after them (a .pth file),
    so torch is shared and not downloaded again."""
    venv = venvs / name
    python = venv / "bin" / "python"
    done = venv / ".installed"
    if done.is_file() and done.read_text() == " ".join(PEER_PACKAGES[name]):
        return python
    print(f"# making {venv}: pip install {' '.join(PEER_PACKAGES[name])}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "shared_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES[name]], check=True)
    done.write_text(" ".join(PEER_PACKAGES[name]))
    return python


def command(name: str, steps: int, seed: int, args: argparse.Namespace) -> list[str]:
    if name == "fastppo":
        return [
            sys.executable,
            "-m",
            "fastppo",
            "train",
            GAME,
            "--total-timesteps",
            str(steps),
            "--seed",
            str(seed),
            "--run-dir",
            str(args.run_root / f"fastppo_{seed}_{time.time_ns()}"),
            "--progress",
            "false",
            "--tensorboard",
            "false",
        ]
    if name == "cleanrl":
        return [
            str(peer_python("cleanrl", args.venvs)),
            str(args.cleanrl_script),
            "--env-id",
            ENVPOOL_GAME,
            "--total-timesteps",
            str(steps),
            "--seed",
            str(seed),
            "--num-envs",
            "8",
            "--num-steps",
            "128",
            "--num-minibatches",
            "4",
            "--update-epochs",
            "4",
        ]
    if name == "sb3":
        return [str(peer_python("sb3", args.venvs)), "-c", SB3_CHILD, str(steps), str(seed), GAME]
    return [sys.executable, "-c", CEILING_CHILD, GAME, str(args.ceiling_seconds)]


LOOP_SPS = {
    "fastppo": re.compile(r"(\d+) SPS"),  # its summary line: the mean over iterations
    "cleanrl": re.compile(r"^SPS: (\d+)", re.MULTILINE),  # printed every update: steps so far over the loop's time
    "sb3": re.compile(r"LOOP_SPS ([\d.]+)"),
    "ceiling": re.compile(r"LOOP_SPS ([\d.]+)"),
}


def run(name: str, steps: int, seed: int, args: argparse.Namespace) -> tuple[float, float]:
    """(loop SPS, whole-process SPS) of one fresh process; the process's output on failure."""
    argv = command(name, steps, seed, args)
    start = time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, cwd=args.run_root, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    wall = time.perf_counter() - start
    found = LOOP_SPS[name].findall(proc.stdout)
    if proc.returncode != 0 or not found:
        sys.exit(
            f"atari_race: {name} failed (exit {proc.returncode}): "
            f"{shlex.join(argv)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return float(found[-1]), steps / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--cleanrl-script", type=Path, help="CleanRL's ppo_atari_envpool.py (without it, CleanRL sits out)"
    )
    parser.add_argument("--steps", type=positive, default=16384, help="environment steps each run trains")
    parser.add_argument("--rounds", type=positive, default=2, help="paired rounds (each contender once per round)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip", nargs="*", default=[], choices=CONTENDERS[1:], help="peers to leave out")
    parser.add_argument("--ceiling-seconds", type=float, default=10.0, help="how long the env-only ceiling steps")
    parser.add_argument(
        "--venvs", type=Path, default=Path.home() / ".cache" / "fastppo-atari-race", help="where the peers' venvs live"
    )
    args = parser.parse_args()
    if args.cleanrl_script is not None and not args.cleanrl_script.is_file():
        parser.error(f"--cleanrl-script {args.cleanrl_script}: no such file")
    args.cleanrl_script = args.cleanrl_script.resolve() if args.cleanrl_script else None
    skipped = set(args.skip) | ({"cleanrl"} if args.cleanrl_script is None else set())
    contenders = [name for name in CONTENDERS if name not in skipped]
    args.run_root = Path(os.environ.get("TMPDIR", "/tmp")) / f"atari_race_{os.getpid()}"
    args.run_root.mkdir(parents=True, exist_ok=True)

    header(
        f"Atari race: {GAME}, {args.steps} steps per run, 8 envs x 128 steps, 4 epochs x 4 minibatches, Nature CNN, CPU"
    )
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; command: python {shlex.join(sys.argv)}")
    for name in contenders:
        shown = (
            "PPO('CnnPolicy') with rl-zoo's atari hyperparameters (SB3_CHILD)"
            if name == "sb3"
            else shlex.join(command(name, args.steps, args.seed, args))
        )
        print(f"# {name}: {shown}", flush=True)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in [*contenders, "ceiling"]}
    for round_ in range(args.rounds):
        for name in [*contenders, "ceiling"]:
            loop, process = run(name, args.steps, args.seed + round_, args)
            results[name].append((loop, process))
            print(f"round {round_ + 1}: {name:8s} loop {loop:7.0f} SPS, process {process:7.0f} SPS", flush=True)

    ceiling = statistics.median(loop for loop, _ in results["ceiling"])
    print(
        "\n| contender | loop SPS (median) | process SPS (median) | fastppo / it (per round, loop) | share of "
        f"the env-only ceiling ({ceiling:.0f} SPS) |"
    )
    print("|---|---:|---:|---|---:|")
    for name in contenders:
        loops = [loop for loop, _ in results[name]]
        ratios = ", ".join(f"{ours / theirs:.2f}x" for (ours, _), theirs in zip(results["fastppo"], loops))
        share = statistics.median(loops) / ceiling
        print(
            f"| {name} | {statistics.median(loops):.0f} | {statistics.median(p for _, p in results[name]):.0f} | "
            f"{ratios} | {share:.0%} |"
        )
    footer()


if __name__ == "__main__":
    main()
