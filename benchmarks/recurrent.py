"""Recurrent PPO on CartPoleNoVelocity-v1 (CartPole-v1 observing only [x, theta]): fastppo vs
sb3-contrib's RecurrentPPO, same machine, same run.

    python recurrent.py --seeds 1 2 3 4 5      # every row (~25-40 min on 2 cores: SB3 needs 1-3 min per solve)
    python recurrent.py --quick                # ~3-5 min: one seed, short SPS run
    python recurrent.py --rows sps             # one row: sps, cold or framestack

1. ``sps``: SPS with identical hyperparameters: rl-zoo's ``CartPoleNoVel-v1`` entry of
   hyperparams/ppo_lstm.yml for RecurrentPPO (8 envs x 32 steps, 20 epochs of one 256-step
   minibatch, lr 1e-3 and clip 0.2 linearly annealed, gamma 0.98, lambda 0.8, no entropy bonus,
   VecNormalize of observations and rewards, an LSTM of 64 units for the actor and another for
   the critic, a 64-unit ReLU layer, no orthogonal init), and fastppo set to the same values on
   gymnasium sync envs and on tensor envs. What the architectures cannot share: fastppo's
   64-unit layer comes before its LSTM (obs -> Linear+ReLU -> LSTM -> heads), SB3's after it
   (obs -> LSTM -> Linear+ReLU -> heads), so fastppo's LSTM input is 64 wide against SB3's 2;
   fastppo initialises orthogonally (CleanRL), rl-zoo turns that off (``ortho_init=False``).
   Both run on one torch thread, fixed number of steps, set-up included.
2. ``cold``: time to solve (mean of the last 20 episodes >= 475), each library in its own fresh
   ``python`` subprocess (this script with --cold-child), from launching the process to solved:
   interpreter start-up, imports and set-up included. SB3 with rl-zoo's hyperparameters (its
   100k budget, over which lr and clip anneal); fastppo with its ``CartPoleNoVelocity-v1``
   preset (picked by ``fastppo train CartPoleNoVelocity-v1``) on sync and on tensor envs.
   Median over --seeds and the SB3/fastppo ratios.
3. ``framestack``: is it memory that solves the task? fastppo's tuned CartPole-v1 MLP preset on
   the same task, once on [x, theta] alone and once on the last 4 observations stacked
   (``recurrent:FrameStackNoVelocity``, an MLP with a fixed 4-step window of memory), against the
   recurrent preset; each stops when solved, else reports the last 20 episodes at its budget.

The SB3 child builds its env from gymnasium alone (``NoVelocity`` below, the same env as
fastppo's registered ``CartPoleNoVelocity-v1``), so it pays for no fastppo import.
Needs ``pip install --no-deps stable-baselines3 sb3-contrib pandas`` (see README.md).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from common import SOLVED_RETURN, footer, header, run_fastppo

ENV_ID = "CartPoleNoVelocity-v1"
OBSERVED = [0, 2]
"""CartPole's observation entries the task keeps: cart position, pole angle."""
ZOO_NO_VEL = dict(n_steps=32, batch_size=256, n_epochs=20, gae_lambda=0.8, gamma=0.98, ent_coef=0.0)
"""rl-zoo's CartPoleNoVel-v1 RecurrentPPO hyperparameters (hyperparams/ppo_lstm.yml): 8 envs,
normalize: True (VecNormalize of observations and rewards, gamma 0.98), lr lin_0.001, clip_range
lin_0.2, 1e5 steps; policy_kwargs below."""
ZOO_ENVS = 8
ZOO_BUDGET = 100_000
SAME_AS_ZOO: dict[str, Any] = {
    "num_envs": ZOO_ENVS,
    "num_steps": 32,
    "num_minibatches": 1,
    "update_epochs": 20,
    "learning_rate": 1e-3,
    "lr_schedule": "linear",
    "clip_coef": 0.2,
    "clip_schedule": "linear",
    "gamma": 0.98,
    "gae_lambda": 0.8,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "clip_vloss": False,
    "norm_adv": True,
    "adam_eps": 1e-5,
    "normalize_obs": True,
    "normalize_reward": True,
    "clip_obs": 10.0,
    "clip_reward": 10.0,
    "policy.memory": "lstm",
    "policy.memory_size": 64,
    "policy.hidden_sizes": [64],
    "policy.activation": "relu",
    "policy.shared_trunk": False,
}
"""fastppo set to rl-zoo's values (SB3's defaults where rl-zoo names none: vf_coef 0.5, grad norm
0.5, no value clipping, per-minibatch advantage normalisation, Adam eps 1e-5, clip 10 on
normalised observations and rewards)."""
COLD_LIBRARIES = ("SB3 RecurrentPPO rl-zoo", "fastppo sync", "fastppo tensor")


class NoVelocity(gym.ObservationWrapper):
    """CartPole observing ``[x, theta]`` (gymnasium alone; equal to fastppo's CartPoleNoVelocity-v1)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[OBSERVED], space.high[OBSERVED], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[OBSERVED]


def make_no_velocity() -> gym.Env:
    return NoVelocity(gym.make("CartPole-v1"))


class FrameStackNoVelocity(gym.Wrapper):
    """CartPoleNoVelocity with the last 4 observations stacked into one 8-vector (the first
    observation repeated at an episode's start): an MLP's fixed window of memory. Built as
    ``module:Class`` by fastppo, so it carries CartPole-v1's 500-step limit itself."""

    def __init__(self, render_mode: str | None = None) -> None:
        env = NoVelocity(gym.make("CartPole-v1", render_mode=render_mode))
        super().__init__(gym.wrappers.FlattenObservation(gym.wrappers.FrameStackObservation(env, 4)))


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


def zoo_kwargs() -> dict:
    from torch import nn

    policy_kwargs = dict(
        ortho_init=False,
        activation_fn=nn.ReLU,
        lstm_hidden_size=64,
        enable_critic_lstm=True,
        net_arch=dict(pi=[64], vf=[64]),
    )
    return dict(ZOO_NO_VEL, learning_rate=linear(1e-3), clip_range=linear(0.2), policy_kwargs=policy_kwargs)


def sb3_run(total: int, seed: int, solve: bool = False) -> tuple[float, int, float | None, int | None]:
    """(wall seconds, steps, seconds to solve or None, steps at solve) for RecurrentPPO with
    rl-zoo's CartPoleNoVel-v1 hyperparameters, construction included."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    start = time.perf_counter()
    last20: deque[float] = deque(maxlen=20)
    solved: list[tuple[float, int]] = []

    class Watch(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # Monitor's record: raw rewards, before VecNormalize
                    last20.append(info["episode"]["r"])
            if solve and len(last20) == 20 and np.mean(last20) >= SOLVED_RETURN:
                solved.append((time.perf_counter() - start, self.num_timesteps))
                return False
            return True

    env = VecNormalize(make_vec_env(make_no_velocity, n_envs=ZOO_ENVS, seed=seed), gamma=ZOO_NO_VEL["gamma"])
    model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", verbose=0, **zoo_kwargs())
    model.learn(total, callback=Watch())
    wall = time.perf_counter() - start
    return wall, int(model.num_timesteps), *(solved[0] if solved else (None, None))


def fastppo_config(overrides: dict[str, Any], preset: str | None = None):
    from fastppo.envs.env_config import make_config

    return make_config(ENV_ID, preset, {"checkpoint_every": 0, **overrides})


def preset_overrides(seed: int, backend: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {"seed": seed, **({"backend": backend} if backend != "sync" else {}), **extra}


def cold_child(library: str, seed: int, zoo_budget: int, extra: dict[str, Any]) -> dict:
    """Inside the fresh process: solve once; report wall-clock (epoch) times for the parent."""
    started = time.time()
    if library.startswith("SB3"):
        torch.set_num_threads(1)  # as fastppo's trainer does by default
        wall, steps, solved, solved_steps = sb3_run(zoo_budget, seed, solve=True)
    else:
        config = fastppo_config(preset_overrides(seed, library.split()[-1], extra))
        run = run_fastppo(config, stop_when_solved=True)
        wall, steps, solved, solved_steps = run.wall_s, run.steps, run.solved_s, run.solved_steps
    run_start = time.time() - wall  # both runners time from after their imports: count those too
    return {
        "started": started,
        "solved": None if solved is None else run_start + solved,
        "steps": solved_steps or steps,
    }


def cold_solve(library: str, seed: int, zoo_budget: int, extra: dict[str, Any]) -> tuple[float | None, float, int]:
    """(seconds from launching a fresh python to solved or None, seconds until python, numpy
    and torch were up, steps) for one library and seed."""
    command = [
        sys.executable,
        __file__,
        "--cold-child",
        library,
        "--seeds",
        str(seed),
        "--zoo-budget",
        str(zoo_budget),
        "--overrides",
        json.dumps(extra),
    ]
    launch = time.time()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    child = json.loads(out.strip().splitlines()[-1])
    return (None if child["solved"] is None else child["solved"] - launch), child["started"] - launch, child["steps"]


def describe(name: str, solved: float | None, steps: int, wall: float, last20: float | None = None) -> str:
    if solved is not None:
        return f"{name} {solved:6.2f} s ({steps} steps)"
    return f"{name} not solved in {wall:.1f} s ({steps} steps" + (
        f", last 20 episodes {last20:.1f})" if last20 is not None else ")"
    )


def check_preset(extra: dict[str, Any]) -> None:
    """The cold and framestack rows measure fastppo's CartPoleNoVelocity-v1 preset: without it
    (and without --overrides naming a memory) they would silently train an MLP."""
    config = fastppo_config(preset_overrides(1, "sync", extra))
    if config.policy.memory == "none":
        sys.exit(
            f"no recurrent {ENV_ID} preset found (src/fastppo/presets/{ENV_ID}.yaml): pass a provisional one "
            'with --overrides \'{"policy.memory": "gru", ...}\''
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, a shorter SPS run")
    parser.add_argument(
        "--rows", nargs="+", choices=("sps", "cold", "framestack"), default=["sps", "cold", "framestack"]
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="seeds of the time-to-solve rows (default 1 2 3 4 5; 1 with --quick)"
    )
    parser.add_argument(
        "--sps-steps", type=int, help="steps of each SPS run (default 12 800 = 50 iterations; 5 120 with --quick)"
    )
    parser.add_argument(
        "--zoo-budget",
        type=int,
        default=ZOO_BUDGET,
        help="SB3's total steps, over which rl-zoo's lr and clip anneal (rl-zoo: 100 000)",
    )
    parser.add_argument(
        "--overrides",
        default="{}",
        help="JSON overrides on top of fastppo's preset for the cold and framestack rows (e.g. a provisional config)",
    )
    parser.add_argument(
        "--framestack-budget", type=int, default=200_000, help="steps for each MLP run of the framestack row"
    )
    parser.add_argument("--cold-child", choices=COLD_LIBRARIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    extra = json.loads(args.overrides)
    if args.cold_child:
        print(json.dumps(cold_child(args.cold_child, args.seeds[0], args.zoo_budget, extra)), flush=True)
        return

    torch.set_num_threads(1)
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # one-off torch.optim import, out of both warm timings
    seeds = args.seeds or ([1] if args.quick else [1, 2, 3, 4, 5])
    if "cold" in args.rows or "framestack" in args.rows:
        check_preset(extra)
    header(f"Recurrent PPO on {ENV_ID}: fastppo vs sb3-contrib RecurrentPPO")

    if "sps" in args.rows:
        steps = args.sps_steps or (5_120 if args.quick else 12_800)
        print(
            f"\n## identical hyperparameters (rl-zoo's CartPoleNoVel-v1, LSTM 64): SPS over {steps} steps, "
            "set-up included (higher is better)"
        )
        sb3_wall, sb3_steps, _, _ = sb3_run(steps, seed=1)
        sb3_sps = sb3_steps / sb3_wall
        cells = [f"SB3 RecurrentPPO {sb3_sps:7.0f} SPS"]
        for backend in ("sync", "tensor"):
            ours = run_fastppo(
                fastppo_config(
                    {**SAME_AS_ZOO, "total_timesteps": steps, "seed": 1, "backend": backend}, preset="cleanrl-discrete"
                )
            )
            cells.append(f"fastppo {backend} {ours.sps:7.0f} SPS -> {ours.sps / sb3_sps:.2f}x")
        print(" | ".join(cells), flush=True)

    if "cold" in args.rows:
        print(
            f"\n## time to solve {ENV_ID} (last 20 episodes >= {SOLVED_RETURN:.0f}) in a fresh process: seconds "
            "from launching python to solved (lower is better)"
        )
        cold: dict[str, list[float]] = {library: [] for library in COLD_LIBRARIES}
        for seed in seeds:
            cells = []
            for library in COLD_LIBRARIES:
                solved, started, steps = cold_solve(library, seed, args.zoo_budget, extra)
                cold[library].append(math.inf if solved is None else solved)
                result = f"{solved:6.2f} s" if solved is not None else "not solved"
                cells.append(f"{library} {result} ({steps} steps; python+torch up at {started:.2f} s)")
            print(f"seed {seed}: " + " | ".join(cells), flush=True)
        median = {library: statistics.median(times) for library, times in cold.items()}
        sb3 = median[COLD_LIBRARIES[0]]

        def cell(library: str) -> str:
            if math.isinf(median[library]):
                return f"{library} not solved on most seeds"
            return f"{library} {median[library]:.2f} s" + (
                "" if library == COLD_LIBRARIES[0] else f" -> SB3 / fastppo {sb3 / median[library]:.2f}x"
            )

        print(f"median over seeds {' '.join(map(str, seeds))}: " + " | ".join(map(cell, COLD_LIBRARIES)), flush=True)

    if "framestack" in args.rows:
        print(
            f"\n## is it memory that solves {ENV_ID}? seconds from the call to solved, else the last 20 episodes "
            "at the budget"
        )
        runs = {
            "MLP on [x, theta]": (ENV_ID, "CartPole-v1", {"total_timesteps": args.framestack_budget}),
            "MLP on 4 stacked frames": (
                "recurrent:FrameStackNoVelocity",
                "CartPole-v1",
                {"total_timesteps": args.framestack_budget},
            ),
            "recurrent preset": (ENV_ID, None, extra),
        }
        for seed in seeds:
            cells = []
            for name, (env_id, preset, overrides) in runs.items():
                from fastppo.envs.env_config import make_config

                run = run_fastppo(
                    make_config(env_id, preset, {"checkpoint_every": 0, "seed": seed, **overrides}),
                    stop_when_solved=True,
                )
                cells.append(describe(name, run.solved_s, run.solved_steps or run.steps, run.wall_s, run.last20))
            print(f"seed {seed}: " + " | ".join(cells), flush=True)
    footer()


if __name__ == "__main__":
    main()
