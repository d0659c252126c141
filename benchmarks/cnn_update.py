"""The Atari update's arithmetic against this CPU's own ceiling: how far a faster update can go.

    python benchmarks/cnn_update.py                 # fp32 and bf16 (where native), eager, ~1 min
    python benchmarks/cnn_update.py --compile       # also bf16 (or fp32) under torch.compile

One PPO minibatch step of the ``atari`` preset (the Nature CNN shared by actor and critic, a
256-frame minibatch: forward, PPO loss, backward, the gradient clip and fastppo's Adam, through
``MinibatchStep``, the trainer's own step) is counted in floating-point operations (torch's
``FlopCounterMode``) and timed (the median of ``--repeats`` steps after warm-up, one variant
after the other in one process). Each rate is set beside a large matrix product's in the same
precision on the same threads, the most this CPU computes in that precision through torch: an
update step at a share of it near 1 leaves no room for a faster update of the same arithmetic.
The machine, the command and the date are printed with the figures.
"""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

import gymnasium as gym
import torch
from torch.utils.flop_counter import FlopCounterMode

from common import footer, header, positive
from fastppo.devices import native_bf16
from fastppo.envs.env_config import make_config
from fastppo.envs.make import policy_spaces
from fastppo.policies.population import seed_policy
from fastppo.training.update import MinibatchStep, UpdateCoefficients, make_optimizer

GAME = "BreakoutNoFrameskip-v4"
GEMM = 2048


def median_seconds(step: Callable[[], object], repeats: int) -> float:
    for _ in range(3):  # warm-up: oneDNN builds its kernels on a shape's first calls
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def update_step(precision: str, compile: bool) -> Callable[[], object]:
    """One minibatch step of the preset's policy and PPO settings on random frames."""
    config = make_config(GAME, overrides={"policy.precision": precision})
    frames, moves, _ = policy_spaces(config)
    assert isinstance(moves, gym.spaces.Discrete)
    policy, _ = seed_policy(config, 0, frames, moves, torch.device("cpu"))
    optimizer = make_optimizer(policy, config.ppo.learning_rate, config.ppo.adam_eps, torch.device("cpu"))
    step = MinibatchStep(policy, optimizer, config.ppo, compile=compile)
    rows = config.minibatch_size
    batch = {
        "obs": torch.randint(0, 256, (rows, *frames.shape), dtype=torch.uint8),
        "actions": torch.randint(0, int(moves.n), (rows,)),
        "logprobs": torch.full((rows,), -math.log(moves.n)),
        "values": torch.randn(rows),
        "advantages": torch.randn(rows),
        "returns": torch.randn(rows),
    }
    coefs = UpdateCoefficients(config.ppo.clip_coef, config.ppo.ent_coef, config.ppo.kl_beta)
    return lambda: step(batch, coefs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=positive, default=torch.get_num_threads(), help="torch intra-op threads")
    parser.add_argument("--repeats", type=positive, default=9, help="timed steps per variant")
    parser.add_argument(
        "--compile", action="store_true", help="also the step under torch.compile (needs a C++ compiler)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    header(f"The Atari update step against the CPU's matrix-product rate, {args.threads} threads")
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; command: python {shlex.join(sys.argv)}", flush=True)
    precisions = ["bf16", "fp32"] if native_bf16(torch.device("cpu")) else ["fp32"]
    rows = make_config(GAME).minibatch_size
    print(f"\n| step ({rows} frames) | GFLOP | ms (median) | GFLOP/s | share of the GEMM rate |\n|---|--:|--:|--:|--:|")
    for precision in precisions:
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        a, b = torch.randn(GEMM, GEMM, dtype=dtype), torch.randn(GEMM, GEMM, dtype=dtype)
        gemm = 2 * GEMM**3 / median_seconds(partial(torch.matmul, a, b), args.repeats)
        for compiled in (False, True) if args.compile and precision == precisions[0] else (False,):
            step = update_step(precision, compiled)
            with FlopCounterMode(display=False) as counter:
                step()
            flops = counter.get_total_flops()
            seconds = median_seconds(step, args.repeats)
            name = f"{precision}{', compiled' if compiled else ''}"
            print(
                f"| {name} | {flops / 1e9:.2f} | {seconds * 1e3:.1f} | {flops / seconds / 1e9:.0f} | "
                f"{flops / seconds / gemm:.0%} |",
                flush=True,
            )
        print(f"| {precision} GEMM {GEMM}x{GEMM}x{GEMM} (the ceiling) | | | {gemm / 1e9:.0f} | 100% |", flush=True)
    footer()


if __name__ == "__main__":
    main()
