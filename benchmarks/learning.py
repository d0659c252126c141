"""Sample efficiency of fastppo's presets: final return (mean of the last 20 episodes), the step
at which that running mean first reached the target, and wall time, per seed.

    python benchmarks/learning.py LunarLander-v3 --target 200 --seeds 1 2 3
    python benchmarks/learning.py Pendulum-v1 --target -300
    python benchmarks/learning.py CartPole-v1 --target 475 --backend tensor --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fastppo


def first_step_reaching(agent: fastppo.Agent, target: float) -> int | None:
    """Env step at the end of the first iteration whose last-20-episodes mean was >= target."""
    seen = 0
    for row in agent.history:
        seen += int(row["charts/episodes"])
        window = agent.episode_returns[max(0, seen - 20) : seen]
        if len(window) == 20 and np.mean(window) >= target:
            return int(row["global_step"])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env_id")
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--preset", default=None)
    parser.add_argument("--backend", default=None, help="vector env backend (default: the preset's)")
    args = parser.parse_args()
    backend = {"backend": args.backend} if args.backend else {}
    finals = []
    for seed in args.seeds:
        start = time.perf_counter()
        agent = fastppo.train(args.env_id, preset=args.preset, seed=seed, progress=False, tensorboard=False, **backend)
        wall = time.perf_counter() - start
        final = float(np.mean(agent.episode_returns[-20:]))
        finals.append(final)
        reached = first_step_reaching(agent, args.target)
        print(
            f"{args.env_id} seed {seed}: final {final:.1f} (last 20 episodes) after "
            f"{agent.history[-1]['global_step']} steps, {wall:.0f} s; target {args.target} first reached at step "
            f"{reached}"
        )
    print(f"{args.env_id}: final return {np.mean(finals):.1f} ± {np.std(finals):.1f} over {len(finals)} seeds")


if __name__ == "__main__":
    main()
