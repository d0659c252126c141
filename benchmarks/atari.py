"""Atari: the ``atari`` preset on Pong and Breakout for the steps you can afford.

    python benchmarks/atari.py                                        # 10M steps each (use a GPU)
    python benchmarks/atari.py --games PongNoFrameskip-v4 --total-timesteps 500000 --device cpu --backend envpool
    python benchmarks/atari.py --games BreakoutNoFrameskip-v4 --total-timesteps 131072 --device cuda \
        --ceiling-seconds 10

Prints the return curve (mean raw game score of the episodes finished in each tenth of the run),
the final return (last 20 games), wall time, SPS and where an iteration's time went (env, copy,
policy, update); with ``--ceiling-seconds S`` also the env-only ceiling, the same envs stepped with
random actions for S seconds in the same process, and the training SPS as a share of it. The
backend is the ``atari`` preset's (ale-py's C++ vector env) unless ``--backend`` names another.
CleanRL's published ppo_atari.py figures at 10M steps (docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy,
mean ± std over 3 seeds):
BreakoutNoFrameskip-v4 414.66 ± 28.09, PongNoFrameskip-v4 20.36 ± 0.20. Compare at equal steps
with their learning curves (the ppo_atari / ppo_atari_envpool reports linked there).

The ``*NoFrameskip-v4`` ids have no sticky actions, as in CleanRL; ``ALE/*-v5`` ids keep v5's
repeat_action_probability 0.25 and score lower at equal steps.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import fastppo
from common import footer, header, raw_env_sps

CLEANRL_10M = {"BreakoutNoFrameskip-v4": "414.66 ± 28.09", "PongNoFrameskip-v4": "20.36 ± 0.20"}
CURVE_POINTS = 10
LAST_GAMES = 20


def return_curve(history: list[dict[str, float]], total: int) -> list[tuple[int, float]]:
    """(step, mean episodic return) over each tenth of the run, from the logged metrics."""
    points = []
    for k in range(1, CURVE_POINTS + 1):
        lo, hi = total * (k - 1) / CURVE_POINTS, total * k / CURVE_POINTS
        values = [
            row["charts/episodic_return"]
            for row in history
            if lo < row["global_step"] <= hi and "charts/episodic_return" in row
        ]
        if values:
            points.append((int(hi), float(np.mean(values))))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", default=["PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"])
    parser.add_argument("--total-timesteps", type=int, default=10_000_000)
    parser.add_argument(
        "--backend", default=None, choices=["sync", "async", "envpool", "ale"], help="default: the atari preset's (ale)"
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ceiling-seconds",
        type=float,
        default=0.0,
        help="also step the same envs alone with random actions this long: the env-only ceiling",
    )
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--runs-dir",
        help="write each game's run (metrics.jsonl, checkpoints) to RUNS_DIR/GAME: plot or resume it later",
    )
    args = parser.parse_args()

    header(
        f"Atari: {', '.join(args.games)}, {args.total_timesteps:,} steps, {args.num_envs} envs, device {args.device}"
    )
    results = []
    for game in args.games:
        start = time.perf_counter()
        agent = fastppo.train(
            game, seed=args.seed, total_timesteps=args.total_timesteps, device=args.device, num_envs=args.num_envs,
            progress=False, tensorboard=False, run_dir=None if args.runs_dir is None else f"{args.runs_dir}/{game}",
            **({"backend": args.backend} if args.backend else {}),
        )  # fmt: skip
        seconds = time.perf_counter() - start
        curve = return_curve(agent.history, args.total_timesteps)
        final = float(np.mean(agent.episode_returns[-LAST_GAMES:])) if agent.episode_returns else float("nan")
        loop_sps = float(np.mean([row["charts/SPS"] for row in agent.history]))
        backend = agent.config.env.backend
        results.append(
            dict(
                game=game,
                backend=backend,
                steps=args.total_timesteps,
                final=final,
                seconds=seconds,
                sps=args.total_timesteps / seconds,
                loop_sps=loop_sps,
                curve=curve,
                split=time_split(agent.history),
            )
        )
        print(
            f"{game} ({backend} backend): final return {final:.1f} after {args.total_timesteps:,} steps in "
            f"{seconds:.0f}s ({args.total_timesteps / seconds:.0f} SPS, the loop's {loop_sps:.0f})"
        )
        print("  time: " + ", ".join(f"{name} {share:.0%}" for name, share in results[-1]["split"].items()))
        print("  curve: " + ", ".join(f"{step:,}: {value:.1f}" for step, value in curve), flush=True)
        if args.ceiling_seconds > 0:
            ceiling = raw_env_sps(game, backend, args.num_envs, seconds=args.ceiling_seconds)
            results[-1].update(ceiling_sps=ceiling, share_of_ceiling=loop_sps / ceiling)
            print(
                f"  env-only ceiling (the same {args.num_envs} envs, random actions): {ceiling:.0f} SPS; "
                f"training makes {loop_sps / ceiling:.0%} of it",
                flush=True,
            )

    print(
        "\n| game | steps | final return (last 20 games) | wall time | SPS | CleanRL ppo_atari at 10M "
        "|\n|---|---|---|---|---|---|"
    )
    for r in results:
        print(
            f"| {r['game']} | {r['steps']:,} | {r['final']:.1f} | {r['seconds']:.0f} s | {r['sps']:.0f} | "
            f"{CLEANRL_10M.get(r['game'], 'n/a')} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    footer()


def time_split(history: list[dict[str, float]]) -> dict[str, float]:
    """Each section's share of an iteration's measured time (env, copy, policy, update), over the run."""
    totals = (
        {key[5:]: sum(row.get(key, 0.0) for row in history) for key in history[0] if key.startswith("time/")}
        if history
        else {}
    )
    whole = sum(totals.values()) or 1.0
    return {name: seconds / whole for name, seconds in sorted(totals.items(), key=lambda item: -item[1])}


if __name__ == "__main__":
    main()
