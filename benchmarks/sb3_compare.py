"""fastppo vs Stable-Baselines3 on the same machine, in the same run.

    python benchmarks/sb3_compare.py                 # ~3-4 min on 2 cores
    python benchmarks/sb3_compare.py --quick         # ~1 min: smaller budgets

1. SPS with identical hyperparameters: CartPole-v1 (CleanRL ppo.py's: 4 sync envs x 128 steps,
   4 epochs, 4 minibatches, constant lr 2.5e-4, no value clipping since SB3 has none by default)
   and HalfCheetah (1 env x 2048 steps, 10 epochs, minibatch 64, obs+reward normalisation).
2. Time to solve CartPole-v1 (mean of the last 20 episodes >= 475), wall time from the call:
   each library's best preset: SB3 with rl-zoo's tuned CartPole hyperparameters; fastppo's
   CartPole-v1 preset on gymnasium sync envs and on tensor envs (--backend tensor).
3. The same time to solve in a cold process, as a user meets it: each run in its own fresh
   ``python`` subprocess (this script with --cold-child), wall time from launching the process to
   solved, interpreter start-up, imports and set-up included. The child imports only its own
   library (common.py imports fastppo lazily), and neither pre-imports torch.optim.

    python benchmarks/sb3_compare.py --rows cold --seeds 1 2 3 4 5   # only the cold-process row
    python benchmarks/sb3_compare.py --quick --plot sb3_compare.png  # and the rows as a picture

Needs ``pip install stable-baselines3`` (see benchmarks/README.md for the torch caveat).
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

import numpy as np
import torch

from common import SOLVED_RETURN, footer, header, pyplot, run_fastppo, save_figure

ZOO_CARTPOLE = dict(n_steps=32, batch_size=256, n_epochs=20, gae_lambda=0.8, gamma=0.98, ent_coef=0.0)
"""rl-zoo's CartPole-v1 PPO hyperparameters (8 envs; lr 1e-3 and clip range 0.2 linearly annealed)."""
COLD_LIBRARIES = ("SB3 rl-zoo", "fastppo sync", "fastppo tensor")


def sb3_run(
    env_id: str, n_envs: int, total: int, solve: bool = False, normalize: bool = False, seed: int = 1, **ppo_kwargs
) -> tuple[float, int, float | None]:
    """(wall seconds, steps, seconds to solve or None) for SB3 PPO, construction included."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    start = time.perf_counter()
    last20: deque[float] = deque(maxlen=20)
    solved: list[float] = []

    class Watch(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    last20.append(info["episode"]["r"])
            if solve and len(last20) == 20 and np.mean(last20) >= SOLVED_RETURN:
                solved.append(time.perf_counter() - start)
                return False
            return True

    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:
        env = VecNormalize(
            env, norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0, gamma=ppo_kwargs.get("gamma", 0.99)
        )
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **ppo_kwargs)
    model.learn(total, callback=Watch())
    wall = time.perf_counter() - start
    return wall, int(model.num_timesteps), (solved[0] if solved else None)


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


def zoo_cartpole() -> dict:
    return dict(ZOO_CARTPOLE, learning_rate=linear(1e-3), clip_range=linear(0.2))


def fastppo_solve_config(seed: int, backend: str, preset: str | None = None):
    from fastppo.envs.env_config import make_config

    return make_config(
        "CartPole-v1",
        preset,
        {"seed": seed, "checkpoint_every": 0, **({"backend": backend} if backend != "sync" else {})},
    )


def cold_child(library: str, seed: int, zoo_budget: int, preset: str | None = None) -> dict:
    """Inside the fresh process: solve once; report wall-clock (epoch) times for the parent: when
    python, numpy and torch were up (this module imported), and when the run was solved."""
    started = time.time()
    if library == "SB3 rl-zoo":
        torch.set_num_threads(1)  # as in the warm rows (fastppo's trainer sets its own default of 1)
        wall, steps, solved = sb3_run("CartPole-v1", 8, zoo_budget, solve=True, seed=seed, **zoo_cartpole())
    else:
        run = run_fastppo(fastppo_solve_config(seed, library.split()[-1], preset), stop_when_solved=True)
        wall, steps, solved = run.wall_s, run.solved_steps or run.steps, run.solved_s
    # Both runners time from after their library's imports: place their clock on the epoch from
    # its end (now), so that the parent counts those imports too.
    run_start = time.time() - wall
    return {
        "started": started,
        "solved": None if solved is None else run_start + solved,
        "steps": steps,
        "ended": time.time(),
    }


def cold_solve(
    library: str, seed: int, zoo_budget: int, preset: str | None = None
) -> tuple[float | None, float, int, float]:
    """(seconds from launching a fresh python to solved or None, seconds until python, numpy
    and torch were up, steps, seconds until the run ended: solved or out of budget) for one
    library and seed (fastppo: CartPole-v1's preset, or ``preset``)."""
    command = [
        sys.executable,
        __file__,
        "--cold-child",
        library,
        "--seeds",
        str(seed),
        "--zoo-budget",
        str(zoo_budget),
        *(["--cold-preset", preset] if preset else []),
    ]
    launch = time.time()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    child = json.loads(out.strip().splitlines()[-1])
    return (
        (None if child["solved"] is None else child["solved"] - launch),
        child["started"] - launch,
        child["steps"],
        child["ended"] - launch,
    )


def plot_rows(
    sps: dict[str, tuple[float, float]], solve: dict[str, dict[str, list[float]]], seeds: list[int], path: str
) -> None:
    """The rows run, side by side: SPS of fastppo and SB3 per env (identical hyperparameters), and
    the median seconds to solve CartPole-v1 per library, warm and in a fresh process (an unsolved
    seed counts as infinite; a median that is infinite is marked, not drawn)."""
    plt = pyplot()
    panels = [kind for kind, shown in (("sps", sps), ("solve", solve)) if shown]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel == "sps":
            envs = list(sps)
            x = np.arange(len(envs))
            for offset, (library, column) in zip((-0.2, 0.2), (("fastppo", 0), ("SB3", 1))):
                bars = ax.bar(x + offset, [sps[env][column] for env in envs], 0.4, label=library)
                ax.bar_label(bars, fmt="{:,.0f}", fontsize=7)
            ax.set_xticks(x, [f"{env}\n{sps[env][0] / sps[env][1]:.2f}x" for env in envs])
            ax.set(ylabel="environment steps per second (higher is better)", title="SPS, identical hyperparameters")
        else:
            x = np.arange(len(COLD_LIBRARIES))
            width = 0.8 / len(solve)
            ratios: dict[str, list[str]] = {library: [] for library in COLD_LIBRARIES[1:]}  # SB3's median / fastppo's
            for i, ((kind, times), color) in enumerate(zip(solve.items(), ("tab:green", "tab:purple"))):
                medians = dict(zip(COLD_LIBRARIES, (statistics.median(times[library]) for library in COLD_LIBRARIES)))
                bars = ax.bar(
                    x + (i - (len(solve) - 1) / 2) * width,
                    [m if math.isfinite(m) else 0 for m in medians.values()],
                    width,
                    label=kind,
                    color=color,
                )
                ax.bar_label(
                    bars,
                    labels=[f"{m:.2f} s" if math.isfinite(m) else "not solved" for m in medians.values()],
                    fontsize=7,
                )
                for library in ratios:
                    ratios[library].append(
                        f"{medians['SB3 rl-zoo'] / medians[library]:.2f}x" if math.isfinite(medians[library]) else "-"
                    )
            ax.set_xticks(
                x,
                [COLD_LIBRARIES[0]] + [f"{library}\n{' / '.join(ratios[library])} faster" for library in ratios],
                fontsize=8,
            )
            ax.set(
                ylabel="seconds to solve, median (lower is better)",
                title=f"time to solve CartPole-v1, seed{'s' if len(seeds) > 1 else ''} {' '.join(map(str, seeds))}",
            )
        ax.legend(fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    save_figure(fig, path, "fastppo vs Stable-Baselines3, same machine, same run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller budgets")
    parser.add_argument("--halfcheetah", default="HalfCheetah-v5")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="seeds of the time-to-solve runs (default: 1 2; 1 with --quick)"
    )
    parser.add_argument(
        "--zoo-budget",
        type=int,
        default=200_000,
        help="SB3's total steps, over which rl-zoo's lr and clip range anneal: rl-zoo's own file says 100 000, "
        "but SB3 solves faster with 200 000 (median 3.6 vs 4.3 s over seeds 1-5), so the default is the faster one",
    )
    parser.add_argument(
        "--rows",
        nargs="+",
        choices=("sps", "solve", "cold"),
        default=["sps", "solve", "cold"],
        help="which measurements to run (default: all)",
    )
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help="also draw the rows run (SPS side by side, median time to solve) as a PNG at PATH",
    )
    parser.add_argument(
        "--cold-child", choices=COLD_LIBRARIES, help=argparse.SUPPRESS
    )  # one run in a fresh process (cold_solve)
    parser.add_argument("--cold-preset", help=argparse.SUPPRESS)  # that run's fastppo preset
    args = parser.parse_args()
    if args.cold_child:
        print(json.dumps(cold_child(args.cold_child, args.seeds[0], args.zoo_budget, args.cold_preset)), flush=True)
        return
    from fastppo.envs.env_config import make_config

    torch.set_num_threads(1)  # both libraries on one intra-op thread (fastppo's default, see README)
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # one-off torch.optim import, out of both timings
    header("fastppo vs Stable-Baselines3")
    cart_steps = 25_600 if args.quick else 51_200
    hc_steps = 4096 if args.quick else 8192

    seeds = args.seeds or ([1] if args.quick else [1, 2])
    sps: dict[str, tuple[float, float]] = {}  # env: (fastppo SPS, SB3 SPS)
    solve: dict[str, dict[str, list[float]]] = {}  # warm / fresh process: library: seconds per seed (inf: unsolved)
    if "sps" in args.rows:
        print("\n## identical hyperparameters: SPS (higher is better)")
        cleanrl = dict(
            n_steps=128,
            batch_size=128,
            n_epochs=4,
            learning_rate=2.5e-4,
            gamma=0.99,
            gae_lambda=0.95,
            clip_range=0.2,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
        )
        sb3_wall, sb3_steps, _ = sb3_run("CartPole-v1", 4, cart_steps, **cleanrl)
        cfg = make_config(
            "CartPole-v1",
            "cleanrl-discrete",
            {"total_timesteps": cart_steps, "lr_schedule": "constant", "clip_vloss": False, "checkpoint_every": 0},
        )
        ours = run_fastppo(cfg)
        print(
            f"CartPole-v1  4 envs x 128, {cart_steps} steps: fastppo {ours.sps:8.0f} SPS  SB3 "
            f"{sb3_steps / sb3_wall:8.0f} SPS  ratio {ours.sps / (sb3_steps / sb3_wall):.2f}x",
            flush=True,
        )
        sps["CartPole-v1"] = (ours.sps, sb3_steps / sb3_wall)

        hc = dict(
            n_steps=2048,
            batch_size=64,
            n_epochs=10,
            learning_rate=3e-4,
            gamma=0.99,
            gae_lambda=0.95,
            clip_range=0.2,
            ent_coef=0.0,
            vf_coef=0.5,
            max_grad_norm=0.5,
        )
        sb3_wall, sb3_steps, _ = sb3_run(args.halfcheetah, 1, hc_steps, normalize=True, **hc)
        cfg = make_config(
            args.halfcheetah,
            "HalfCheetah",
            {"total_timesteps": hc_steps, "lr_schedule": "constant", "clip_vloss": False, "checkpoint_every": 0},
        )
        ours = run_fastppo(cfg)
        print(
            f"{args.halfcheetah} 1 env x 2048, {hc_steps} steps: fastppo {ours.sps:8.0f} SPS  SB3 "
            f"{sb3_steps / sb3_wall:8.0f} SPS  ratio {ours.sps / (sb3_steps / sb3_wall):.2f}x",
            flush=True,
        )
        sps[args.halfcheetah] = (ours.sps, sb3_steps / sb3_wall)

    if "solve" in args.rows:
        print("\n## time to solve CartPole-v1 (last 20 episodes >= 475), seconds from the call (lower is better)")
        warm = solve.setdefault("warm process", {library: [] for library in COLD_LIBRARIES})
        for seed in seeds:
            sb3_wall, sb3_steps, sb3_solved = sb3_run(
                "CartPole-v1", 8, args.zoo_budget, solve=True, seed=seed, **zoo_cartpole()
            )
            gym_run = run_fastppo(fastppo_solve_config(seed, "sync"), stop_when_solved=True)
            tensor_run = run_fastppo(fastppo_solve_config(seed, "tensor"), stop_when_solved=True)

            def show(name: str, solved: float | None, steps: int, wall: float) -> str:
                return (
                    f"{name} {solved:6.2f} s ({steps} steps)"
                    if solved is not None
                    else f"{name}  not solved in {wall:.1f} s ({steps} steps)"
                )

            print(
                f"seed {seed}: "
                + " | ".join(
                    [
                        show("SB3 rl-zoo", sb3_solved, sb3_steps, sb3_wall),
                        show(
                            "fastppo preset (sync)",
                            gym_run.solved_s,
                            gym_run.solved_steps or gym_run.steps,
                            gym_run.wall_s,
                        ),
                        show(
                            "fastppo preset (tensor)",
                            tensor_run.solved_s,
                            tensor_run.solved_steps or tensor_run.steps,
                            tensor_run.wall_s,
                        ),
                    ]
                ),
                flush=True,
            )
            for library, solved in zip(COLD_LIBRARIES, (sb3_solved, gym_run.solved_s, tensor_run.solved_s)):
                warm[library].append(math.inf if solved is None else solved)
            if sb3_solved and gym_run.solved_s:
                print(
                    f"    ratio SB3 / fastppo sync {sb3_solved / gym_run.solved_s:.2f}x"
                    + (
                        f", SB3 / fastppo tensor {sb3_solved / tensor_run.solved_s:.2f}x" if tensor_run.solved_s else ""
                    ),
                    flush=True,
                )
    if "cold" in args.rows:
        print(
            "\n## time to solve CartPole-v1 in a fresh process: seconds from launching python to solved, "
            "start-up, imports and set-up included (lower is better)"
        )
        cold = solve.setdefault("fresh process, start-up included", {library: [] for library in COLD_LIBRARIES})
        for seed in seeds:
            cells = []
            for library in COLD_LIBRARIES:
                solved, started, steps, _ = cold_solve(library, seed, args.zoo_budget)
                cold[library].append(math.inf if solved is None else solved)
                result = f"{solved:6.2f} s" if solved is not None else "not solved"
                cells.append(f"{library} {result} ({steps} steps; python+torch up at {started:.2f} s)")
            print(f"seed {seed}: " + " | ".join(cells), flush=True)
        median = {library: statistics.median(times) for library, times in cold.items()}
        sb3 = median["SB3 rl-zoo"]
        print(
            f"median over seeds {' '.join(map(str, seeds))}: "
            + " | ".join(
                f"{library} {median[library]:.2f} s"
                + ("" if library == "SB3 rl-zoo" else f" -> SB3 / fastppo {sb3 / median[library]:.2f}x")
                for library in COLD_LIBRARIES
            ),
            flush=True,
        )
    footer()
    if args.plot:
        plot_rows(sps, solve, seeds, args.plot)


if __name__ == "__main__":
    main()
