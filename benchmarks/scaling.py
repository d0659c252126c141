"""SPS as num_envs grows: the raw env ceiling (random actions) and fastppo training, per backend.

    python benchmarks/scaling.py            # ~2-3 min on 2 cores; writes benchmarks/scaling.png

CartPole-v1; gymnasium sync and async at 1..64 envs, tensor envs at 1..4096. Training uses
CleanRL's ppo.py hyperparameters except num_steps=16 (so that 4096 envs make a 64k batch), and
reports the SPS of the last whole iteration of 3 (the first pays warm-up). ``raw`` is the ceiling the
training SPS is measured against, in the same run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import footer, header, raw_env_sps, run_fastppo
from fastppo.envs.env_config import make_config

COUNTS = {"sync": [1, 4, 16, 64], "async": [1, 4, 16, 64], "tensor": [1, 16, 256, 1024, 4096]}


def train_sps(backend: str, num_envs: int) -> float:
    """Training SPS over the last whole iteration of 3: from the 2nd rollout's end to the 3rd's
    (one update, one rollout; the first iteration pays warm-up)."""
    cfg = make_config(
        "CartPole-v1",
        "cleanrl-discrete",
        {
            "backend": backend,
            "num_envs": num_envs,
            "num_steps": 16,
            "total_timesteps": 3 * 16 * num_envs,
            "checkpoint_every": 0,
        },
    )
    ends = run_fastppo(cfg).rollout_ends
    return cfg.batch_size / (ends[-1] - ends[-2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="per raw-throughput point")
    parser.add_argument("--out", default=str(Path(__file__).with_name("scaling.png")))
    args = parser.parse_args()
    header("SPS vs num_envs, CartPole-v1")
    results: dict[str, list[tuple[int, float, float]]] = {}
    print(f"{'backend':8} {'envs':>5} {'raw SPS':>10} {'train SPS':>10} {'train/raw':>9}")
    for backend, counts in COUNTS.items():
        results[backend] = []
        for n in counts:
            raw = raw_env_sps("CartPole-v1", backend, n, args.seconds)
            train = train_sps(backend, n)
            results[backend].append((n, raw, train))
            print(f"{backend:8} {n:5d} {raw:10.0f} {train:10.0f} {train / raw:9.2f}", flush=True)
    footer()
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    for (backend, rows), color in zip(results.items(), ("tab:blue", "tab:orange", "tab:green")):
        n, raw, train = zip(*rows)
        ax.plot(n, raw, "--", color=color, label=f"{backend} raw env")
        ax.plot(n, train, "-o", color=color, label=f"{backend} fastppo training")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="num_envs",
        ylabel="steps per second",
        title="CartPole-v1 on a shared 2-core CPU",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
