"""Random search for hyperparameters that minimise wall time to solve (CartPole-v1 by default).

    python tune_solve_time.py --backend tensor --trials 40 --out tensor.jsonl
    python tune_solve_time.py --backend sync --trials 40 --seeds 1 2 3
    python tune_solve_time.py --env CartPoleNoVelocity-v1 --backend tensor --search memory --budget 200000
    python tune_solve_time.py --env CartPoleNoVelocity-v1 --backend tensor --seeds 1 2 3 4 5 --budget 300000 \
        --configs '[{}, {"num_envs": 128, "num_steps": 8}]'

Each trial starts from the env's preset, draws one value per hyperparameter of the space,
trains until the last 20 episodes average >= 475 (or the budget runs out) for every seed, and
appends one JSON line: the hyperparameters, the median and worst seconds to solve (a failed
seed counts as twice its wall time), the median steps and each seed's figures. ``--configs``
screens a given list of override sets instead of random draws (``{}``: the preset itself). The
best trials are printed at the end; re-check a winner over more seeds with ``sb3_compare.py``,
``learning.py`` or ``recurrent.py`` before making it a preset.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

import torch

from common import footer, header, run_fastppo
from fastppo.envs.env_config import make_config
from fastppo.errors import FastPPOError

MLP_SPACE: dict[str, list] = {
    "num_envs": [8, 16, 32, 64, 128],
    "num_steps": [16, 32, 64],
    "update_epochs": [2, 4, 8, 10, 20],
    "num_minibatches": [1, 2, 4],
    "learning_rate": [1e-3, 2e-3, 3e-3, 5e-3, 1e-2],
    "lr_schedule": ["constant", "linear"],
    "clip_schedule": ["constant", "linear"],
    "gamma": [0.98, 0.99],
    "gae_lambda": [0.8, 0.9, 0.95],
    "ent_coef": [0.0],
    "clip_vloss": [False],
}
"""The search space of CartPole-v1's MLP presets."""

MEMORY_SPACE: dict[str, list] = {
    "num_envs": [16, 32, 64, 128],
    "num_steps": [8, 16, 32],
    "update_epochs": [2, 3, 4, 6],
    "num_minibatches": [1, 2, 4],
    "learning_rate": [3e-3, 5e-3, 1e-2, 2e-2],
    "lr_schedule": ["constant", "linear"],
    "gamma": [0.98, 0.99],
    "gae_lambda": [0.8, 0.9, 0.95],
    "ent_coef": [0.0, 0.01, 0.02],
    "max_grad_norm": [0.5, 1.0, 5.0],
    "hidden_sizes": [[32], [64]],
    "memory": ["lstm", "gru"],
    "memory_size": [16, 32, 64],
}
"""The search space of a recurrent preset (CartPoleNoVelocity-v1's)."""

SEARCHES = {"mlp": MLP_SPACE, "memory": MEMORY_SPACE}


def trial(env_id: str, overrides: dict, backend: str, seeds: list[int], budget: int) -> dict:
    seconds, steps = [], []
    for seed in seeds:
        config = make_config(
            env_id,
            None,
            {**overrides, "seed": seed, "backend": backend, "total_timesteps": budget, "checkpoint_every": 0},
        )
        run = run_fastppo(config, stop_when_solved=True)
        seconds.append(run.solved_s if run.solved_s is not None else 2 * run.wall_s)
        if run.solved_steps is not None:
            steps.append(run.solved_steps)
    return {
        "overrides": overrides,
        "median_s": round(statistics.median(seconds), 3),
        "worst_s": round(max(seconds), 3),
        "failed": len(seeds) - len(steps),
        "median_steps": statistics.median(steps) if steps else None,
        "seconds": [round(s, 2) for s in seconds],
        "steps": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1", help="an env whose episodes score up to 500 (solved at 475)")
    parser.add_argument("--backend", default="sync", choices=["sync", "tensor"])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--budget", type=int, default=150_000, help="env steps per run before it counts as failed")
    parser.add_argument("--search-seed", type=int, default=0)
    parser.add_argument("--out", help="append one JSON line per trial to this file")
    parser.add_argument(
        "--search",
        default="mlp",
        choices=list(SEARCHES),
        help="the space to draw from: mlp (CartPole-v1's presets, MLP_SPACE) or memory (recurrent, MEMORY_SPACE)",
    )
    parser.add_argument(
        "--space",
        type=json.loads,
        default={},
        help="JSON object replacing some of the space's value lists, e.g. '{\"num_envs\": [16, 32]}'",
    )
    parser.add_argument(
        "--configs",
        type=json.loads,
        help="JSON list of override objects to screen instead of random draws, e.g. '[{}, {\"num_envs\": 64}]'",
    )
    args = parser.parse_args()
    if args.configs is not None and not (
        isinstance(args.configs, list) and all(isinstance(c, dict) for c in args.configs)
    ):
        parser.error(f"--configs must be a JSON list of objects, got {json.dumps(args.configs)}")
    try:
        make_config(args.env)  # an unknown env: one line here, not a trial's traceback
    except FastPPOError as exc:
        parser.error(str(exc))
    torch.set_num_threads(1)
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # the one-off torch.optim import, out of the timings
    header(f"time-to-solve search, {args.env}, {args.backend} backend")
    rng = random.Random(args.search_seed)
    space = SEARCHES[args.search] | args.space
    draws = (
        args.configs
        if args.configs is not None
        else [{name: rng.choice(values) for name, values in space.items()} for _ in range(args.trials)]
    )
    results = []
    for overrides in draws:
        result = trial(args.env, overrides, args.backend, args.seeds, args.budget)
        results.append(result)
        print(json.dumps(result), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
    print("\n## best (fewest failed seeds, then worst seed's time)")
    for result in sorted(results, key=lambda r: (r["failed"], r["worst_s"]))[:5]:
        print(json.dumps(result))
    footer()


if __name__ == "__main__":
    main()
