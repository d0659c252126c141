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
import time
import warnings

import numpy as np
import torch

from fastppo.config import EnvConfig
from fastppo.envs import make_vec_env

FAMILIES = {
    "classic": "CartPole-v1",
    "box2d": "LunarLanderContinuous-v3",
    "mujoco": "HalfCheetah-v4",
    "atari": "BreakoutNoFrameskip-v4",
}
BACKENDS = ("sync", "async", "envpool")


def measure(env_id: str, backend: str, num_envs: int, seconds: float) -> float:
    envs = make_vec_env(EnvConfig(env_id=env_id, num_envs=num_envs, backend=backend), torch.device("cpu"))
    envs.reset(seed=0)
    space = envs.single_action_space
    space.seed(0)
    actions = [torch.as_tensor(np.stack([space.sample() for _ in range(num_envs)])) for _ in range(64)]
    for i in range(20):  # warm-up: processes started, caches filled
        envs.step(actions[i % 64])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % 64])
        steps += 1
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * num_envs / elapsed


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
        sps = {backend: measure(env_id, backend, args.num_envs, args.seconds) for backend in backends}
        cells = [f"{sps[b]:,.0f} ({sps[b] / sps['sync']:.2f}x)" if "sync" in sps else f"{sps[b]:,.0f}" for b in backends]
        print(f"| {family} | {env_id} | {' | '.join(cells)} |", flush=True)
    print(f"\nSPS over {args.num_envs} envs, random actions; (ratio to gymnasium sync in this run)")


if __name__ == "__main__":
    main()
