"""fastppo with CleanRL's default hyperparameters: SPS and wall time, to set beside CleanRL's runs.

    python benchmarks/cleanrl_defaults.py             # ~2 min: 100k CartPole steps, 20k HalfCheetah steps
    python benchmarks/cleanrl_defaults.py --full      # CleanRL's budgets: 500k and 1M steps

ppo.py (cleanrl-discrete preset): 4 sync envs x 128 steps, 4 epochs, 4 minibatches, CartPole-v1.
ppo_continuous_action.py (cleanrl-continuous preset): 1 env x 2048 steps, 10 epochs, 32
minibatches, obs/reward normalisation, HalfCheetah. Short runs also print the wall time the full
budget would take at the measured SPS (labelled as projected).
"""

from __future__ import annotations

import argparse

import torch

from common import footer, header, run_fastppo
from fastppo.envs.env_config import make_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--halfcheetah", default="HalfCheetah-v5")
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args()
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # one-off torch.optim import, out of the timing
    header(f"fastppo with CleanRL's defaults (torch_threads={args.torch_threads})")
    runs = [
        ("ppo.py", "CartPole-v1", "cleanrl-discrete", 500_000, 100_000),
        ("ppo_continuous_action.py", args.halfcheetah, "cleanrl-continuous", 1_000_000, 20_480),
    ]
    for script, env_id, preset, full, short in runs:
        steps = full if args.full else short
        cfg = make_config(
            env_id, preset, {"total_timesteps": steps, "checkpoint_every": 0, "torch_threads": args.torch_threads}
        )
        r = run_fastppo(cfg)
        projected = "" if args.full else f", projected {full // 1000}k-step wall {full / r.sps:.0f} s"
        print(
            f"{script:26} {env_id:15} {r.steps:8d} steps in {r.wall_s:6.1f} s = {r.sps:6.0f} SPS{projected}; "
            f"last-20 return {r.last20:.1f}",
            flush=True,
        )
    footer()


if __name__ == "__main__":
    main()
