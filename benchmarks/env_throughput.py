"""Raw environment throughput per family and backend: random actions through fastppo's VecEnv
(torch tensors in and out, the same path the trainer uses), no policy.

    python benchmarks/env_throughput.py                       # every family, sync / async / envpool
    python benchmarks/env_throughput.py --num-envs 8 --seconds 5 --families atari

Prints steps per second (all envs together) and each backend's ratio to gymnasium sync measured
in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import warnings

from common import raw_env_sps

FAMILIES = {
    "classic": "CartPole-v1",
    "box2d": "LunarLanderContinuous-v3",
    "mujoco": "HalfCheetah-v4",
    "atari": "BreakoutNoFrameskip-v4",
}
BACKENDS = ("sync", "async", "envpool")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    backends = [b for b in args.backends if b != "envpool" or importlib.util.find_spec("envpool")]

    print(f"| family | env | {' | '.join(backends)} |\n|---|---|{'---|' * len(backends)}")
    for family in args.families:
        env_id = FAMILIES[family]
        sps = {backend: raw_env_sps(env_id, backend, args.num_envs, args.seconds) for backend in backends}
        cells = [
            f"{sps[b]:,.0f} ({sps[b] / sps['sync']:.2f}x)" if "sync" in sps else f"{sps[b]:,.0f}" for b in backends
        ]
        print(f"| {family} | {env_id} | {' | '.join(cells)} |", flush=True)
    print(f"\nSPS over {args.num_envs} envs, random actions; (ratio to gymnasium sync in this run)")


if __name__ == "__main__":
    main()
