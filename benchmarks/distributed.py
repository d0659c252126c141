"""Data-parallel fastppo on torchrun: 1 rank vs 2 ranks on this machine, in the same run.

    python benchmarks/distributed.py                      # ~11 min on 2 cores at load 6-7
    python benchmarks/distributed.py --seeds 1 --quick    # ~4 min there: 1 seed, half the HalfCheetah steps,
                                                          # no latency probe

Every run is its own fresh process tree: 1 rank is `python distributed.py --child ...` (no
torchrun, the single-process path), 2 ranks are `python -m torch.distributed.run --standalone
--nproc-per-node 2 distributed.py --child ...`. Measured:

1. CartPole-v1 with its preset (32 envs x 32 steps per rank): SPS and wall time to solve (mean of
   the last 20 episodes >= 475) for 1 rank, for 2 ranks with the preset per rank (twice the batch:
   what `torchrun --nproc-per-node 2 -m fastppo train CartPole-v1` runs) and for 2 ranks x 16 envs
   (the 1-rank batch split in two: the same updates on the same amount of data).
2. HalfCheetah-v5 with its preset (1 env x 2048 steps per rank, 10 epochs x 32 minibatches): SPS.
3. Where the 2-rank time goes: the wall time of the collectives inside the update (gradient
   all-reduce, advantages' mean/std, minibatch weights, KL and metrics) per update and per
   minibatch, those outside it per iteration (statistics merge, episode gather, stop signal), and
   the bare all-reduce latency of a 3-float and a flat-gradient-sized tensor.

Times to solve are read off the run's log: the wall time (from the call to train, set-up and the
rendezvous included) at which the iteration that reached the threshold was logged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import SOLVED_RETURN, footer, header

HERE = Path(__file__).resolve()


def child(spec: dict, out: Path) -> None:
    """One training run (this process is one rank, or the only process); rank 0 writes the result."""
    import torch.distributed as dist

    import fastppo
    import fastppo.training.trainer as trainer
    from fastppo.training.distributed import World, launched_rank

    timings = {"update_s": 0.0, "update_calls": 0, "other_s": 0.0, "other_calls": 0}
    in_update = [False]

    def timed(method):
        def wrapper(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                bucket = "update" if in_update[0] else "other"
                timings[f"{bucket}_s"] += time.perf_counter() - start
                timings[f"{bucket}_calls"] += 1

        return wrapper

    # Every collective goes through one of these (mean_ through sum_).
    for name in ("sum_", "max", "gather_episodes", "broadcast_module"):
        setattr(World, name, timed(getattr(World, name)))
    update = trainer.ppo_update

    def flagged_update(*args, **kwargs):
        in_update[0] = True
        try:
            return update(*args, **kwargs)
        finally:
            in_update[0] = False

    trainer.ppo_update = flagged_update
    if (
        "WORLD_SIZE" in os.environ
    ):  # one process group for the latency probe and the run (train uses a group set up already)
        dist.init_process_group("gloo")
        if spec.get("latency"):
            timings |= allreduce_latency()
    config = fastppo.make_config(spec["env"], overrides={**spec["overrides"], "progress": False, "tensorboard": False})
    start = time.time()
    agent = trainer.train(config)
    if "WORLD_SIZE" in os.environ:
        dist.destroy_process_group()
    if launched_rank() != 0:
        return
    history = agent.history
    # Steady state: every iteration but the first (its rollout pays the first-call costs).
    steps = [history[i]["global_step"] - history[i - 1]["global_step"] for i in range(1, len(history))]
    seconds = [s / row["charts/SPS"] for s, row in zip(steps, history[1:])]
    solved_s, seen = None, 0
    for row in history:
        seen += int(row["charts/episodes"])
        last20 = agent.episode_returns[max(0, seen - 20) : seen]
        if len(last20) == 20 and sum(last20) / 20 >= SOLVED_RETURN:
            solved_s = row["time"] - start
            break
    result = {
        "steps": history[-1]["global_step"],
        "iterations": len(history),
        "sps": sum(steps) / sum(seconds) if steps else float("nan"),
        "wall_s": time.time() - start,
        "solved_s": solved_s,
        "last20": sum(agent.episode_returns[-20:]) / max(1, len(agent.episode_returns[-20:])),
        "update_s_per_iteration": sum(r["time/update"] for r in history[1:]) / max(1, len(history) - 1),
        **timings,
    }
    out.write_text(json.dumps(result))


def allreduce_latency(repeats: int = 300) -> dict:
    """Bare all-reduce wall time in the ranks' process group."""
    import torch
    import torch.distributed as dist

    result = {}
    for name, size in (("latency_3_us", 3), ("latency_grad_us", 9155)):  # 9155: CartPole's 64-64 actor + critic
        tensor = torch.zeros(size)
        for _ in range(20):
            dist.all_reduce(tensor)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(repeats):
            dist.all_reduce(tensor)
        result[name] = (time.perf_counter() - start) / repeats * 1e6
    return result


def launch(ranks: int, spec: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        args = [str(HERE), "--child", json.dumps(spec), "--out", str(out)]
        command = (
            [sys.executable, *args]
            if ranks == 1
            else [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *args]
        )
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"run failed ({' '.join(command)}):\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def fmt(values: list[float | None], spec: str = ".1f") -> str:
    shown = [format(v, spec) if v is not None else "-" for v in values]
    known = [v for v in values if v is not None]
    median = f" (median {format(statistics.median(known), spec)})" if len(known) > 1 else ""
    return " / ".join(shown) + median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--quick", action="store_true", help="half the HalfCheetah steps, no all-reduce latency probe")
    parser.add_argument("--no-mujoco", action="store_true", help="skip HalfCheetah")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child), Path(args.out))
        return

    header("fastppo data-parallel (torchrun, gloo): 1 rank vs 2 ranks")
    cartpole = {
        "1 rank, 32 envs": (1, {}),
        "2 ranks x 32 envs (preset per rank)": (2, {}),
        "2 ranks x 16 envs (same global batch)": (2, {"num_envs": 16}),
    }
    rows = {
        name: [
            launch(
                ranks,
                {"env": "CartPole-v1", "overrides": {"seed": seed, **extra}, "latency": ranks == 2 and not args.quick},
            )
            for seed in args.seeds
        ]
        for name, (ranks, extra) in cartpole.items()
    }
    base_sps = statistics.median(r["sps"] for r in rows["1 rank, 32 envs"])
    print(f"\n## CartPole-v1, preset (100k steps), seeds {' '.join(map(str, args.seeds))}\n")
    print(
        "| setting | steady SPS | vs 1 rank | seconds to solve | last 20 | update s/iter | collectives in "
        "update: ms/update (calls) | outside: ms/iter |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, results in rows.items():
        sps = statistics.median(r["sps"] for r in results)
        solve = [r["solved_s"] for r in results]
        inside = statistics.median(1e3 * r["update_s"] / r["iterations"] for r in results)
        calls = statistics.median(r["update_calls"] / r["iterations"] for r in results)
        outside = statistics.median(1e3 * r["other_s"] / r["iterations"] for r in results)
        collectives = f"{inside:.1f} ({calls:.0f})" if calls else "-"
        print(
            f"| {name} | {sps:,.0f} | {sps / base_sps:.2f}x | {fmt(solve)} | "
            f"{fmt([r['last20'] for r in results], '.0f')} | "
            f"{statistics.median(r['update_s_per_iteration'] for r in results):.3f} | {collectives} | "
            f"{outside:.1f} |"
        )
    latencies = [r for results in rows.values() for r in results if "latency_3_us" in r]
    if latencies:
        print(
            "\nBare gloo all-reduce between the 2 ranks: "
            f"{statistics.median(r['latency_3_us'] for r in latencies):.0f} us (3 floats), "
            f"{statistics.median(r['latency_grad_us'] for r in latencies):.0f} us (9155 floats, CartPole's flat "
            "gradient)"
        )
    solved = {name: [r["solved_s"] for r in results if r["solved_s"] is not None] for name, results in rows.items()}
    base = statistics.median(solved["1 rank, 32 envs"] or [float("nan")])
    print(
        "Median time to solve over the seeds that solved, vs 1 rank: "
        + ", ".join(
            f"{name} {statistics.median(times):.1f} s ({statistics.median(times) / base:.2f}x)"
            for name, times in solved.items()
            if times
        )
    )

    if not args.no_mujoco:
        total = 2 * 2 * 2048 if args.quick else 4 * 2 * 2048
        print(
            f"\n## HalfCheetah-v5, preset (1 env x 2048 steps per rank, 10 epochs x 32 minibatches), {total} "
            f"steps, seed {args.seeds[0]}\n"
        )
        print("| setting | steady SPS | vs 1 rank | update s/iter | collectives in update: ms/update (calls) |")
        print("|---|---:|---:|---:|---:|")
        base = None
        for name, ranks in (("1 rank", 1), ("2 ranks", 2)):
            r = launch(ranks, {"env": "HalfCheetah-v5", "overrides": {"seed": args.seeds[0], "total_timesteps": total}})
            base = base or r["sps"]
            calls = r["update_calls"] / r["iterations"]
            collectives = f"{1e3 * r['update_s'] / r['iterations']:.0f} ({calls:.0f})" if calls else "-"
            print(
                f"| {name} | {r['sps']:,.0f} | {r['sps'] / base:.2f}x | {r['update_s_per_iteration']:.3f} | "
                f"{collectives} |"
            )
    footer()


if __name__ == "__main__":
    main()
