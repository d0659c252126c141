"""Env steps per CPU second of PettingZoo MPE copies with random actions, no policy: PettingZoo's
own ``parallel_env.step`` vs fastppo's direct MPE step (``fastppo.envs.mpe.parallel_step``), on
bare copies (observations concatenated) and through ``PettingZooVecEnv`` (torch rows in and out,
the trainer's path), there also with the copies stepped all at once
(``fastppo.envs.mpe.BatchedWorlds``, fastppo's default for both tasks), and the same rows on
``--backend async`` (the copies split among this process and worker processes, one per CPU). The
variants take turns in one process, round after round, so that the load of a shared machine
touches them alike; CPU time (the workers' included) is the steadier measure of work, wall time
the one that async can improve.

    python benchmarks/pettingzoo_step.py                                  # both tasks, 8 copies, IPPO rows
    python benchmarks/pettingzoo_step.py --tasks simple_spread_v3 --algorithm mappo --rounds 3
"""

from __future__ import annotations

import argparse
import importlib
import resource
import time
from collections.abc import Callable

import numpy as np
import torch

import fastppo
from common import footer, header
from fastppo.envs import make_vec_env, mpe


def bare_copies(task: str, copies: int, step: Callable, seed: int) -> Callable[[int], None]:
    """``steps`` steps of ``copies`` bare parallel envs with ``step(env, actions)``, resetting finished copies."""
    envs = [importlib.import_module(f"mpe2.{task}").parallel_env(max_cycles=25) for _ in range(copies)]
    for c, env in enumerate(envs):
        env.reset(seed=seed + c)
    agents = envs[0].possible_agents
    counts = np.asarray([envs[0].action_space(agent).n for agent in agents])
    rng = np.random.default_rng(seed)

    def run(steps: int) -> None:
        for _ in range(steps):
            for env, actions in zip(envs, rng.integers(counts, size=(copies, len(agents)))):
                if not env.agents:
                    env.reset()
                observations = step(env, dict(zip(agents, actions)))[0]
                np.concatenate(list(observations.values()))

    return run


STEPS = ("PettingZoo's step", "direct MPE step", "direct, copies at once")


def vec_env(
    task: str, copies: int, step: str, algorithm: str, seed: int, backend: str = "sync"
) -> Callable[[int], None]:
    """``steps`` steps of fastppo's agent rows with one of ``STEPS`` (sync; async takes fastppo's
    default, the last). The async copies are built afresh and closed by every call, so that their
    workers have ended (and their CPU time is counted) when it returns."""
    overrides = {"num_envs": copies, "multi_agent.algorithm": algorithm, "multi_agent.pad": True, "backend": backend}
    config = fastppo.make_config(f"pz:mpe2.{task}", "simple_spread_v3", overrides)

    def build():
        envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
        if backend == "sync":
            envs._direct = [step != STEPS[0]] * copies  # off: every copy through PettingZoo's own step
            envs._batched = envs._batched if step == STEPS[2] else None
        envs.reset(seed=seed)
        return envs

    envs = build()
    allowed = (
        torch.ones(len(envs.agents), envs.single_action_space.n)
        if envs.spaces.padding_mask is None
        else torch.as_tensor(envs.spaces.padding_mask, dtype=torch.float32)
    )
    generator = torch.Generator().manual_seed(seed)
    if backend != "sync":
        envs.close()

    def run(steps: int) -> None:
        rows = envs if backend == "sync" else build()
        for _ in range(steps):
            rows.step(torch.multinomial(allowed.repeat(copies, 1), 1, generator=generator).squeeze(1))
        if backend != "sync":
            rows.close()

    return run


def cpu_seconds() -> float:
    """This process's CPU time and that of its ended children (the async variant's workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["simple_spread_v3", "simple_speaker_listener_v4"])
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500, help="steps of all copies per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--algorithm", choices=["ippo", "mappo"], default="ippo")
    args = parser.parse_args()
    torch.set_num_threads(1)
    header(
        f"PettingZoo MPE env steps per CPU second: {', '.join(args.tasks)}; {args.copies} copies, {args.algorithm} rows"
    )
    print(
        "| task | variant | env steps per CPU s | vs PettingZoo's step | env steps per wall s | vs sync direct, "
        "wall |\n|---|---|---:|---:|---:|---:|"
    )
    for task in args.tasks:
        variants = {
            "bare copies, PettingZoo's step": bare_copies(task, args.copies, lambda env, actions: env.step(actions), 0),
            "bare copies, direct MPE step": bare_copies(task, args.copies, mpe.parallel_step, 0),
            **{f"PettingZooVecEnv, {step}": vec_env(task, args.copies, step, args.algorithm, 0) for step in STEPS},
            "PettingZooWorkers (--backend async), fastppo's default step": vec_env(
                task, args.copies, STEPS[2], args.algorithm, 0, "async"
            ),
        }
        cpu, wall = dict.fromkeys(variants, 0.0), dict.fromkeys(variants, 0.0)
        for _ in range(args.rounds):
            for name, run in variants.items():
                start, start_cpu = time.perf_counter(), cpu_seconds()
                run(args.steps)
                wall[name] += time.perf_counter() - start
                cpu[name] += cpu_seconds() - start_cpu
        steps = args.rounds * args.steps * args.copies
        sps = {name: steps / seconds for name, seconds in cpu.items()}
        wall_sps = {name: steps / seconds for name, seconds in wall.items()}
        for name, value in sps.items():
            base = sps[
                "bare copies, PettingZoo's step" if name.startswith("bare") else "PettingZooVecEnv, PettingZoo's step"
            ]
            vs_sync = wall_sps[name] / wall_sps["PettingZooVecEnv, direct MPE step"]
            print(
                f"| {task} | {name} | {value:,.0f} | {value / base:.2f}x | {wall_sps[name]:,.0f} | {vs_sync:.2f}x |",
                flush=True,
            )
    print(
        f"\n{args.copies} copies, max_cycles 25, random actions, {args.rounds} rounds x {args.steps} steps per "
        f"variant, {args.algorithm} rows"
    )
    footer()


if __name__ == "__main__":
    main()
