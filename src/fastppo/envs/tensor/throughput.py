"""Raw tensor-env throughput, run by hand (performance is never asserted in unit tests):

    python -m fastppo.envs.tensor.throughput CartPole-v1 --num-envs 4096 --steps 1000 --device cpu

Random actions drawn on the env's device each step, so the figure is the ceiling a policy-driven
rollout on that device can approach. The benchmark suite reports the same quantity with ratios.

``--threads`` defaults to 1 on purpose: each op touches only a few thousand numbers, so splitting
it over OpenMP threads buys nothing, and on a busy 2-core machine the threads' barrier waits for a
descheduled peer (measured: ~10M SPS with 1 thread, 0.3-3M with torch's default of 2).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch

from fastppo.envs.tensor import TENSOR_ENVS, TensorEnv, make_tensor_env


def measure_sps(env: TensorEnv, steps: int, seed: int = 0) -> float:
    """Env steps per second (``num_envs * steps / seconds``) over ``steps`` random-action steps,
    after a short warm-up; synchronises CUDA before reading the clock."""
    space = env.single_action_space
    generator = torch.Generator(device=env.device).manual_seed(seed)

    def random_actions() -> torch.Tensor:
        if isinstance(space, gym.spaces.Discrete):
            return torch.randint(0, int(space.n), (env.num_envs,), generator=generator, device=env.device)
        return torch.rand(env.num_envs, 1, generator=generator, device=env.device) * 4 - 2

    env.reset(seed=seed)
    for _ in range(10):
        env.step(random_actions())
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(random_actions())
    env.pop_episodes()
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    return env.num_envs * steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_id", nargs="?", default="CartPole-v1", choices=list(TENSOR_ENVS))
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    env = make_tensor_env(args.env_id, args.num_envs, device=args.device)
    sps = measure_sps(env, args.steps)
    print(
        f"{args.env_id}: {args.num_envs} envs x {args.steps} steps on {args.device} "
        f"({torch.get_num_threads()} torch threads): {sps:,.0f} SPS"
    )


if __name__ == "__main__":
    main()
