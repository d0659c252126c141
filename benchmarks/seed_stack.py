"""Many seeds at once: ``fastppo train CartPole-v1 --backend tensor --seeds 1-N`` (stacked seeds:
on CPU one process per core, each a stack of its share) vs N single runs one after the other vs N
SB3 rl-zoo runs, CartPole-v1, wall time until every seed is solved.

    python benchmarks/seed_stack.py                      # 64 seeds; ~10 min on 2 cores
    python benchmarks/seed_stack.py --seeds 8 --sb3-seeds 2 --single-seeds 8   # ~2 min
    python benchmarks/seed_stack.py --compile --threads 1 2   # a stack row per (compile, threads)
    python benchmarks/seed_stack.py --rows width         # seconds per seed-step vs stack width
    python benchmarks/seed_stack.py --rows width --widths 1 8 64 --width-steps 8192 --threads 1 \
        --plot seed_stack_width.png                      # ~30 s, and its plot
    python benchmarks/seed_stack.py --preset cleanrl-discrete --single-seeds 16   # CleanRL's ppo.py settings
    python benchmarks/seed_stack.py --rows matmul        # the stack's update against its matmuls alone

Rows ``solve``: every run is a fresh ``python`` process timed from its launch, start-up included,
as a user meets it (the stack: the ``fastppo train`` command itself, with ``--threads N`` as
``--run.torch-threads N``). A seed is solved when the mean of its last 20 episode returns reaches 475.
The stack and the single runs train the same config, fastppo's ``CartPole-v1`` preset (or
``--preset``, e.g. ``cleanrl-discrete``: CleanRL's ppo.py settings) on tensor envs with its own
budget (a stacked seed is its single run). Each seed of the stack leaves it when solved
(``--stop-return 475``: the stack then trains the others on, narrower) and the stack ends with its
last seed or its budget; each single run and each SB3 run (rl-zoo's CartPole hyperparameters, 8
sync envs) ends when its seed is solved or its budget is spent, and the N runs' times add up, a
run out of budget with its whole time (the table counts them). With
``--sb3-seeds K < N`` (or ``--single-seeds``), K seeds are run and their mean time is scaled to
N, and the table says so. The stack runs ``--stack-runs`` times (default 2: before the single runs
and after them) and its row is the mean: this VM's speed drifts by up to a third within an hour,
and the single runs take minutes.

Rows ``width``: where the stack's gain comes from. Each cell is a fresh process training a short
budget (``--width-steps`` per seed) as one single run or as a stack of S seeds, timed from the
trainer's call (start-up left out): seconds per seed-step, for fastppo's preset (32 envs x 32
steps, minibatches of 512 rows) and for CleanRL's ``ppo.py`` settings (4 envs x 128 steps,
minibatches of 128), with the torch threads ``--threads`` lists (0: fastppo's default, one per
CPU for a stack and 1 for a single run).

Row ``matmul``: how far the stack's update is from the machine's arithmetic. One update of the N
stacked seeds (the batch of its third rollout, timed over repeats, in-process) beside the batched
matmuls of its linear layers alone, at the same shapes and counts (forward, weight gradient, and
input gradient for all but the layers reading the observation), with their FLOP rate: what no
cheaper bookkeeping can go below without fewer or cheaper FLOPs.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from common import SOLVED_RETURN, check_device, footer, header, nonnegative, positive, pyplot, save_figure
from fastppo.envs.env_config import make_config
from fastppo.errors import FastPPOError
from sb3_compare import cold_solve

ZOO_BUDGET = 200_000
WIDTH_PRESETS = {"CartPole-v1": None, "cleanrl-discrete": "cleanrl-discrete"}  # row label: preset


SEED_LINE = re.compile(r"^fastppo: seed (\d+): ([-\d.]+) mean return over the last (\d+) episodes")


def stacked(
    seeds: int, compile: bool, threads: int, preset: str | None, device: str
) -> tuple[float, list[float | None], int]:
    """(seconds from launch until the command ended, each seed's solve seconds or None, the most
    steps a seed trained) of ``fastppo train CartPole-v1 --backend tensor --seeds 1-N`` as a user
    types it, each seed leaving its stack when solved (``--stop-return 475``, the last 20
    episodes, as a single run stops at its solve) or at the budget's end. ``threads`` 0: fastppo's
    default (on CPU one process per core, each a stack of its share on one thread); else
    ``--run.torch-threads`` (cores / threads processes). A seed's solve time is the clock of its
    last logged iteration."""
    from tempfile import mkdtemp

    parent = Path(mkdtemp()) / "stack"
    command = [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--backend", "tensor",
               "--seeds", f"1-{seeds}", "--stop-return", str(SOLVED_RETURN), "--stop-window", "20",
               "--checkpoint-every", "0", "--no-tensorboard", "--no-progress", "--device", device,
               "--run-dir", str(parent),
               *(["--preset", preset] if preset else []), *(["--compile"] if compile else []),
               *(["--run.torch-threads", str(threads)] if threads else [])]  # fmt: skip
    launch = time.time()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    ended = time.time()
    finals = {int(m[1]): float(m[2]) for m in map(SEED_LINE.match, out.splitlines()) if m and int(m[3]) >= 20}
    times: list[float | None] = []
    steps = 0
    for seed in range(1, seeds + 1):
        last = json.loads((parent / f"seed_{seed}" / "metrics.jsonl").read_text().splitlines()[-1])
        steps = max(steps, last["global_step"])
        times.append(last["time"] - launch if finals.get(seed, -np.inf) >= SOLVED_RETURN else None)
    shutil.rmtree(parent.parent)
    return ended - launch, times, steps


def sequential(library: str, seeds: range, preset: str | None) -> tuple[float, int, list[float | None]]:
    """(sum of the runs' seconds until solved or out of budget, unsolved runs, each run's solve
    seconds) for ``seeds``, one fresh process each (fastppo's with ``preset``)."""
    runs = [cold_solve(library, seed, ZOO_BUDGET, preset) for seed in seeds]
    times = [run[0] for run in runs]
    return (
        sum(ended if solved is None else solved for solved, _, _, ended in runs),
        sum(t is None for t in times),
        times,
    )


def width_child(preset: str, seeds: int, threads: int, steps: int, device: str) -> None:
    """Inside the fresh process: train ``steps`` per seed as one single run (``seeds`` 1) or a
    stack; print the seconds from the trainer's call to its end."""
    from tempfile import mkdtemp

    import fastppo.training.trainer as trainer

    overrides = {
        "backend": "tensor",
        "device": device,
        "checkpoint_every": 0,
        "progress": False,
        "tensorboard": False,
        "total_timesteps": steps,
        "torch_threads": threads,
    }
    config = make_config("CartPole-v1", WIDTH_PRESETS[preset], overrides)
    start = time.perf_counter()
    if seeds == 1:
        trainer.train(config)
    else:
        trainer.train_seed_stack(config, list(range(1, seeds + 1)), Path(mkdtemp()))
    print(json.dumps({"seconds": time.perf_counter() - start}))


def width_rows(
    widths: list[int],
    threads: list[int],
    steps: int,
    device: str = "cpu",
    presets: Sequence[str] = tuple(WIDTH_PRESETS),
) -> dict[str, list[float]]:
    """Print the table; return each row's seconds per seed-step by width, keyed by its label."""
    rows: dict[str, list[float]] = {}
    print(f"\n## seconds per seed-step on {device}, {steps} steps per seed, start-up left out (lower is better)")
    print(
        "| settings | torch threads | "
        + " | ".join("single run" if w == 1 else f"stack of {w}" for w in widths)
        + f" | {widths[0]} / {widths[-1]} seeds |"
    )
    print("|---|--:|" + "--:|" * len(widths) + "--:|")
    for preset in presets:
        for n in threads:  # 0: fastppo's default
            cells = []
            for width in widths:
                command = [sys.executable, __file__, "--width-child", preset, str(width), str(n), str(steps), device]
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                cells.append(json.loads(out.strip().splitlines()[-1])["seconds"] / (width * steps))
            print(
                f"| {preset} | {'one per CPU' if n == 0 else n} | "
                + " | ".join(f"{c * 1e6:.2f} us" for c in cells)
                + f" | {cells[0] / cells[-1]:.2f}x |",
                flush=True,
            )
            settings = "fastppo's CartPole-v1 preset" if preset == "CartPole-v1" else "CleanRL ppo.py's settings"
            rows[settings + ("" if n == 0 else f", {n} torch threads")] = cells
    return rows


def plot_width_rows(rows: dict[str, list[float]], widths: list[int], steps: int, device: str, path: str) -> None:
    """Seconds per seed-step against stack width, log-log, each line labelled with its gain at the
    widest stack: the seeds-at-once scaling as a picture."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for label, cells in rows.items():
        ax.plot(
            widths,
            [c * 1e6 for c in cells],
            "-o",
            label=f"{label}: {cells[0] / cells[-1]:.1f}x less at {widths[-1]} seeds",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="seeds trained at once in one process (1: a single run)",
        ylabel="microseconds per seed-step (lower is better)",
    )
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.yaxis.set_major_formatter("{x:g}")
    ax.yaxis.set_minor_formatter("{x:g}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path, f"CartPole-v1 seeds at once on {device}: {steps} steps per seed, start-up left out")


def matmul_rows(seeds: int, preset: str | None, device: str, repeats: int = 10) -> None:
    from tempfile import mkdtemp

    import torch

    import fastppo.training.trainer as trainer

    config = make_config(
        "CartPole-v1",
        preset,
        {"backend": "tensor", "device": device, "checkpoint_every": 0, "progress": False, "tensorboard": False},
    )
    config.ppo.total_timesteps = 3 * config.batch_size
    captured = []
    update = trainer.ppo_update
    trainer.ppo_update = lambda *args, **kwargs: captured.append((args, kwargs)) or update(*args, **kwargs)
    try:
        trainer.train_seed_stack(config, list(range(1, seeds + 1)), Path(mkdtemp()))
    finally:
        trainer.ppo_update = update
    args, kwargs = captured[-1]
    policy, sync = args[0], (torch.cuda.synchronize if device.startswith("cuda") else lambda: None)

    def timed(run) -> float:
        run()
        sync()
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        sync()
        return (time.perf_counter() - start) / repeats

    update_s = timed(lambda: update(*args, **kwargs))
    rows = (
        config.batch_size // config.ppo.num_minibatches
    )  # per seed and minibatch (a few reset rows less in the real one)
    steps = config.ppo.update_epochs * config.ppo.num_minibatches
    obs_features = policy._template.actor_encoder[1].in_features
    shapes = [
        shape for name, shape in policy._shapes.items() if name.endswith("weight") and len(shape) == 2
    ]  # [out, in] per linear layer
    seconds = flops = 0.0
    for out_features, in_features in shapes:
        x = torch.randn(seeds, rows, in_features, device=device)
        w = torch.randn(seeds, out_features, in_features, device=device)
        b = torch.randn(seeds, 1, out_features, device=device)
        g = torch.randn(seeds, rows, out_features, device=device)
        # each product binds this layer's tensors (timed right here, but bound all the same)
        products = [
            lambda b=b, x=x, w=w: torch.baddbmm(b, x, w.transpose(1, 2)),
            lambda g=g, x=x: torch.bmm(g.transpose(1, 2), x),
        ]
        if in_features != obs_features:  # the observation needs no gradient
            products.append(lambda g=g, w=w: torch.bmm(g, w))
        seconds += steps * sum(timed(product) for product in products)
        flops += steps * len(products) * 2 * seeds * rows * in_features * out_features
    print(
        f"\n## one update of {seeds} stacked seeds ({config.ppo.update_epochs} epochs x "
        f"{config.ppo.num_minibatches} minibatches of {rows} rows per seed, {torch.get_num_threads()} torch "
        f"threads, {device})"
    )
    print("| | ms per update | share | GFLOP/s |")
    print("|---|--:|--:|--:|")
    print(
        f"| the update (forward, backward, clip, Adam) | {update_s * 1e3:.1f} | 100% | {flops / update_s / 1e9:.0f} |"
    )
    print(
        f"| its batched matmuls alone | {seconds * 1e3:.1f} | {seconds / update_s:.0%} | {flops / seconds / 1e9:.0f} |"
    )


def solve_rows(
    n: int,
    compile: bool,
    threads: list[int],
    single_seeds: int | None,
    sb3_seeds: int,
    preset: str | None,
    device: str,
    stack_runs: int = 2,
) -> None:
    """The stack(s) ``stack_runs`` times, spread over the sequential fastppo runs (2: once before
    them and once after), so that a drift of the machine's speed during the minutes the single runs
    take (this VM's varies by a third over an hour) weighs on both sides alike; a stack row is the
    mean of its runs. SB3's runs come last."""
    print(
        f"\n## {n} CartPole-v1 seeds, fastppo preset {preset or 'CartPole-v1'}, the stack on {device}: wall time "
        "until all are solved (fresh processes, start-up included)"
    )
    configs = [(compiled, n_threads) for compiled in ((False, True) if compile else (False,)) for n_threads in threads]
    timed: dict[tuple[bool, int], list[tuple[float, int]]] = {
        c: [] for c in configs
    }  # (seconds, unsolved seeds) per run

    def stack_name(compiled: bool, n_threads: int) -> str:
        processes = (
            "fastppo's default: a process per CPU core, 1 thread each"
            if n_threads == 0
            else f"--run.torch-threads {n_threads}"
        )
        return "fastppo stacked (" + processes + (", --compile" if compiled else "") + ")"

    def run_stacks() -> None:
        for config in configs:
            seconds, times, steps = stacked(n, *config, preset, device)
            timed[config].append((seconds, sum(t is None for t in times)))
            print(
                f"{stack_name(*config)}: {seconds:.1f} s ({steps} steps per seed; {timed[config][-1][1]} "
                f"unsolved); first seed solved at {min(t for t in times if t):.1f} s",
                flush=True,
            )

    def sequential_row(library: str, total: float, failed: int, count: int) -> tuple[str, float, int, int]:
        scaled = total * n / count
        print(
            f"{library}, {count} sequential runs: {total:.1f} s ({failed} out of budget) -> {scaled:.1f} s for {n}",
            flush=True,
        )
        scaling = "" if count == n else f" ({count} run{'s' if count > 1 else ''}, x{n / count:g})"
        return f"{library} sequential{scaling}", scaled, count, failed

    count, chunks = single_seeds or n, max(stack_runs - 1, 1)
    bounds = [1 + count * i // chunks for i in range(chunks + 1)]  # the single runs' chunks between the stacks
    total = failed = 0
    run_stacks()
    for chunk, (first, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        chunk_total, chunk_failed, _ = sequential("fastppo tensor", range(first, end), preset)
        total, failed = total + chunk_total, failed + chunk_failed
        if chunk + 1 < stack_runs:
            run_stacks()
    stacks = [(stack_name(*c), float(np.mean([seconds for seconds, _ in timed[c]]))) for c in configs]
    rows = [
        (
            f"{name} (mean of {len(timed[c])}: {', '.join(f'{t:.1f}' for t, _ in timed[c])} s)",
            seconds,
            n,
            timed[c][-1][1],
        )
        for c, (name, seconds) in zip(configs, stacks)
    ]
    rows.append(sequential_row("fastppo tensor", total, failed, count))
    if sb3_seeds:  # --sb3-seeds 0: SB3 left out (e.g. not installed)
        rows.append(
            sequential_row("SB3 rl-zoo", *sequential("SB3 rl-zoo", range(1, sb3_seeds + 1), preset)[:2], sb3_seeds)
        )
    print(
        f"\n| runs of {n} seeds | seconds to all solved or out of budget | seeds timed | unsolved | "
        + " | ".join(f"vs {name}" for name, _ in stacks)
        + " |"
    )
    print("|---|--:|--:|--:|" + "--:|" * len(stacks))
    for name, seconds, timed_seeds, unsolved in rows:
        print(
            f"| {name} | {seconds:.1f} | {timed_seeds} | {unsolved} | "
            + " | ".join(f"{seconds / stack_s:.2f}x" for _, stack_s in stacks)
            + " |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rows",
        nargs="+",
        choices=("solve", "width", "matmul"),
        default=["solve"],
        help="which measurements to run (default: solve)",
    )
    parser.add_argument("--seeds", type=positive, default=64, help="seeds in the stack (N)")
    parser.add_argument(
        "--single-seeds",
        type=positive,
        default=None,
        help="single fastppo runs to time (default N; fewer are scaled to N)",
    )
    parser.add_argument("--sb3-seeds", type=nonnegative, default=8, help="SB3 runs to time (scaled to N; 0: none)")
    parser.add_argument(
        "--device",
        default="cpu",
        help="the stack's torch device (width rows: every row's; the solve rows' single runs stay on the CPU)",
    )
    parser.add_argument("--compile", action="store_true", help="also time the stack with --compile")
    parser.add_argument(
        "--preset",
        help="solve and matmul rows: fastppo's preset for the stack and the single runs (default: CartPole-v1's own)",
    )
    parser.add_argument(
        "--threads",
        type=nonnegative,
        nargs="+",
        default=[0],
        help="torch threads (a row each; default 0: fastppo's own choice: a single run 1; stacked seeds on CPU a "
        "process per core, 1 thread each)",
    )
    parser.add_argument(
        "--stack-runs",
        type=positive,
        default=2,
        help="solve rows: times each stack runs, spread over the single runs (default 2: before and after them); "
        "its row is their mean",
    )
    parser.add_argument(
        "--widths", type=positive, nargs="+", default=[1, 8, 64], help="width rows: seeds per process (1: a single run)"
    )
    parser.add_argument("--width-steps", type=positive, default=32_768, help="width rows: steps per seed")
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help="width rows: also draw them (seconds per seed-step vs stack width) as a PNG at PATH",
    )
    parser.add_argument("--width-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.width_child:
        preset, seeds, threads, steps, device = args.width_child
        width_child(preset, int(seeds), int(threads), int(steps), device)
        return
    try:
        make_config("CartPole-v1", args.preset)  # a bad --preset: one line here, not a child's traceback
    except FastPPOError as exc:
        parser.error(str(exc))
    check_device(parser, args.device)
    if args.plot and "width" not in args.rows:
        parser.error("--plot draws the width rows: add --rows width")
    header("fastppo: many CartPole-v1 seeds at once")
    if "width" in args.rows:
        rows = width_rows(args.widths, args.threads, args.width_steps, args.device)
        if args.plot:
            plot_width_rows(rows, args.widths, args.width_steps, args.device, args.plot)
    if "matmul" in args.rows:
        matmul_rows(args.seeds, args.preset, args.device)
    if "solve" in args.rows:
        solve_rows(
            args.seeds,
            args.compile,
            args.threads,
            args.single_seeds,
            args.sb3_seeds,
            args.preset,
            args.device,
            args.stack_runs,
        )
    footer()


if __name__ == "__main__":
    main()
