"""The issue's GPU figures in one command, for a session that has a GPU:

    python benchmarks/gpu.py                         # ~5 min on a CUDA GPU
    python benchmarks/gpu.py --device cpu --quick    # the same code on CPU; the CUDA-only rows say they are skipped

1. Tensor-env CartPole-v1 trained end to end on the device (rollout and update never leave it):
   SPS eager and with --cudagraphs, 4 096 envs x 16 steps, 4 epochs of 4 minibatches (target:
   >= 4M SPS on a GPU, issue 43).
2. HalfCheetah-v5 with CleanRL's ppo_continuous_action defaults (the cleanrl-continuous preset):
   SPS eager against --compile --cudagraphs, same machine, same run (target: >= 2.7x, LeanRL's ratio
   over CleanRL), and the same run eager on the machine's CPU (target: the faster >= 2x it; on an H200, 1 668 SPS with
   --compile --cudagraphs vs 1 703 on its CPU, since host envs keep the rollout on the CPU).
3. Seeds at once: fastppo's CartPole-v1 preset on tensor envs as one single run and as a stack of
   ``--seeds`` seeds (1 024 by default: ``fastppo train CartPole-v1 --backend tensor --seeds
   1-1024``) on the device, a short budget per seed: seed_stack.py's width rows (each a fresh
   process; seconds per seed-step from the trainer's call) and their ratio.

SPS is the steady state: steps over the time from the end of the third rollout to the end of the
run, so that torch.compile's compilation and the CUDA-graph captures (first iterations) are left
out; the wall time from the call, which includes them, is printed beside it.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from common import RunResult, check_device, footer, header, positive, run_fastppo
from fastppo.envs.env_config import make_config
from seed_stack import width_rows

WARMUP_ROLLOUTS = 3


def steady_sps(run: RunResult, batch_size: int) -> float:
    ends = run.rollout_ends
    if len(ends) <= WARMUP_ROLLOUTS:
        return float("nan")
    return (len(ends) - WARMUP_ROLLOUTS) * batch_size / (run.wall_s - ends[WARMUP_ROLLOUTS - 1])


def measure(label: str, env_id: str, preset: str | None, overrides: dict) -> float:
    config = make_config(env_id, preset, {"checkpoint_every": 0, **overrides})
    run = run_fastppo(config)
    sps = steady_sps(run, config.batch_size)
    print(
        f"{label:44} {run.steps:9d} steps, wall {run.wall_s:7.1f} s, steady {sps:10.0f} SPS, last-20 return "
        f"{run.last20:.1f}",
        flush=True,
    )
    steady = run.timings[WARMUP_ROLLOUTS:]
    if steady:  # where an iteration's time goes, to tell a rollout-bound run from an update-bound one
        split = {name: np.mean([t[name] for t in steady]) * 1e3 for name in steady[0]}
        # "other": what no section times (the rollout's bookkeeping: statistics, buffer writes, the loop)
        iteration = np.mean(np.diff(run.rollout_ends)[WARMUP_ROLLOUTS - 1 :]) * 1e3
        shares = ", ".join(f"{name} {ms:.1f}" for name, ms in split.items())
        print(
            f"{'':44} ms per iteration: {iteration:.1f} = {shares}, other {iteration - sum(split.values()):.1f}",
            flush=True,
        )
    return sps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="smaller budgets (checks the script)")
    parser.add_argument("--halfcheetah", default="HalfCheetah-v5")
    parser.add_argument(
        "--halfcheetah-steps", type=positive, default=102_400, help="its budget per run (10 240 with --quick)"
    )
    parser.add_argument("--seeds", type=positive, default=1024, help="the stack of seeds' width (8 with --quick)")
    args = parser.parse_args()
    check_device(parser, args.device)
    graphs = args.device.startswith("cuda")  # CUDA graphs exist only there
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # one-off torch.optim import, out of the timings
    header(f"fastppo on {args.device}" + (f" ({torch.cuda.get_device_name()})" if graphs else ""))

    print("\n## tensor-env CartPole-v1, 4 096 envs x 16 steps, 4 epochs x 4 minibatches")
    tensor = dict(
        backend="tensor",
        device=args.device,
        num_envs=4096,
        num_steps=16,
        update_epochs=4,
        num_minibatches=4,
        total_timesteps=655_360 if args.quick else 6_553_600,
    )
    eager = measure("eager", "CartPole-v1", "cleanrl-discrete", tensor)
    if graphs:
        graphed = measure("--cudagraphs", "CartPole-v1", "cleanrl-discrete", {**tensor, "cudagraphs": True})
        print(f"--cudagraphs / eager: {graphed / eager:.2f}x; best {max(eager, graphed):.0f} SPS (target >= 4M)")
    else:
        print(f"{'--cudagraphs':44} skipped: CUDA graphs need a CUDA device, not {args.device}")

    print(
        f"\n## {args.halfcheetah}, CleanRL's ppo_continuous_action defaults (1 env x 2048, 10 epochs x 32 minibatches)"
    )
    cheetah = dict(device=args.device, total_timesteps=10_240 if args.quick else args.halfcheetah_steps)
    eager = measure("eager", args.halfcheetah, "cleanrl-continuous", cheetah)
    fast = {"compile": True, "cudagraphs": graphs}
    label = "--compile --cudagraphs" if graphs else "--compile"
    faster = measure(label, args.halfcheetah, "cleanrl-continuous", {**cheetah, **fast})
    print(f"{label} / eager: {faster / eager:.2f}x (target >= 2.7x on a GPU)")
    if graphs:  # one env and small MLPs: is the GPU worth it at all? The same run on this machine's CPU
        cpu = measure("eager on the CPU", args.halfcheetah, "cleanrl-continuous", {**cheetah, "device": "cpu"})
        print(f"best on {args.device} / CPU eager: {max(eager, faster) / cpu:.2f}x (target >= 2x)")
    else:
        print(f"{'eager on the CPU':44} skipped: the runs above are on the CPU already")

    width_rows([1, 8 if args.quick else args.seeds], [0], 8192 if args.quick else 16_384, args.device, ["CartPole-v1"])
    footer()


if __name__ == "__main__":
    main()
