"""fastppo's PopGym preset at the POPGym paper's step budget (Morad et al., ICLR 2023).

    python popgym_returns.py --seeds 1 2 3                         # 15M steps per seed (~35 min each on one core)
    python popgym_returns.py --total-timesteps 1000000 --seeds 1   # the preset's own budget

Trains ``popgym:popgym-RepeatPreviousEasy-v0`` (``pip install 'fastppo[popgym]'``) with the preset
named after it (a GRU, as the paper's PPO-GRU baseline) and reports per seed:

- MMER, the paper's metric: the maximum over training of the mean episodic return, here the mean
  of the last 100 finished episodes (the default smoothing window of RLlib's
  ``episode_reward_mean``) at the end of each iteration;
- the final return, the mean of the last 100 episodes at the end of the budget;
- the first step at which that running mean reached --target, and the wall time.

The paper's runs (RLlib PPO, 15M steps, 3 trials) observe ``Antialias(PreviousAction(env))``:
the previous action and a first-step flag appended to the card. fastppo trains on the env as
registered (the card alone): the flag is redundant for a policy whose state is zeroed at each
episode's start, and RepeatPrevious's optimal action needs no previous action (popgym's
``obs_requires_prev_action`` is False for it).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fastppo
from common import footer, header

ENV_ID = "popgym:popgym-RepeatPreviousEasy-v0"
PAPER_BUDGET = 15_000_000
WINDOW = 100


def curve(agent: fastppo.Agent) -> list[tuple[int, float]]:
    """(env step, mean of the last WINDOW episodes) at the end of each iteration."""
    seen, points = 0, []
    for row in agent.history:
        seen += int(row["charts/episodes"])
        if seen >= WINDOW:
            points.append((int(row["global_step"]), float(np.mean(agent.episode_returns[seen - WINDOW : seen]))))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default=ENV_ID)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--total-timesteps", type=int, default=PAPER_BUDGET, help="default: the paper's 15M")
    parser.add_argument(
        "--target", type=float, default=0.99, help="report the first step the running mean reaches this"
    )
    parser.add_argument("--preset", default=None, help="default: the preset named after the env id")
    args = parser.parse_args()
    header(f"fastppo on {args.env_id}, {args.total_timesteps} steps per seed")
    mmers, finals = [], []
    for seed in args.seeds:
        start = time.perf_counter()
        agent = fastppo.train(
            args.env_id,
            preset=args.preset,
            seed=seed,
            total_timesteps=args.total_timesteps,
            progress=False,
            tensorboard=False,
            checkpoint_every=0,
        )
        wall = time.perf_counter() - start
        points = curve(agent)
        mmer = max(mean for _, mean in points)
        final = points[-1][1]
        reached = next((step for step, mean in points if mean >= args.target), None)
        mmers.append(mmer)
        finals.append(final)
        print(
            f"seed {seed}: MMER {mmer:.3f}, final {final:.3f} (last {WINDOW} episodes) after "
            f"{agent.history[-1]['global_step']} steps, {args.target} first reached at step {reached}, "
            f"{wall:.0f} s ({agent.history[-1]['global_step'] / wall:.0f} SPS)",
            flush=True,
        )
    print(
        f"MMER {np.mean(mmers):.3f} ± {np.std(mmers):.3f}, final {np.mean(finals):.3f} ± {np.std(finals):.3f} "
        f"over seeds {' '.join(map(str, args.seeds))}"
    )
    footer()


if __name__ == "__main__":
    main()
