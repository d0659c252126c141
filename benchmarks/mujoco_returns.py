"""MuJoCo sample efficiency: fastppo's MuJoCo presets on HalfCheetah/Hopper/Walker2d, several seeds.

    python benchmarks/mujoco_returns.py                                   # 1M steps x 3 seeds x 3 envs (hours on CPU)
    python benchmarks/mujoco_returns.py --envs HalfCheetah-v4 --seeds 1 --total-timesteps 200000

Reports, per env, the mean +- std over seeds of the final return (mean of each run's last 10
training episodes, raw rewards, CleanRL's measure), the wall time and SPS. Compare with CleanRL's
published ppo_continuous_action.py figures for MuJoCo v4 at 1M steps:
https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_continuous_actionpy (benchmark/ppo_continuous_action.md).

Named mujoco_returns.py, not mujoco.py: a script of that name would shadow the mujoco package.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import fastppo

LAST_EPISODES = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v4", "Hopper-v4", "Walker2d-v4"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--total-timesteps", type=int, default=1_000_000)
    parser.add_argument("--backend", default="sync", choices=["sync", "async", "envpool"])
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    results = []
    for env_id in args.envs:
        finals, seconds = [], []
        for seed in args.seeds:
            start = time.perf_counter()
            agent = fastppo.train(
                env_id,
                seed=seed,
                total_timesteps=args.total_timesteps,
                backend=args.backend,
                progress=False,
                tensorboard=False,
            )
            seconds.append(time.perf_counter() - start)
            finals.append(float(np.mean(agent.episode_returns[-LAST_EPISODES:])))
            print(
                f"{env_id} seed {seed}: final return {finals[-1]:.1f} in {seconds[-1]:.0f}s "
                f"({args.total_timesteps / seconds[-1]:.0f} SPS)",
                flush=True,
            )
        results.append(
            dict(
                env=env_id,
                steps=args.total_timesteps,
                seeds=",".join(map(str, args.seeds)),
                mean=float(np.mean(finals)),
                std=float(np.std(finals)),
                seconds=float(np.mean(seconds)),
                sps=args.total_timesteps / float(np.mean(seconds)),
            )
        )

    print("\n| env | steps | seeds | final return (mean ± std) | wall time / run | SPS |\n|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['env']} | {r['steps']:,} | {r['seeds']} | {r['mean']:.1f} ± {r['std']:.1f} | "
            f"{r['seconds']:.0f} s | {r['sps']:.0f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
