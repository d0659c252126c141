"""Multi-agent PPO on PettingZoo MPE: fastppo MAPPO and IPPO vs a random policy and vs a
CleanRL-style IPPO (``reference_ippo.py``), same machine, same env-step budget, several seeds.

    python multi_agent.py                        # both tasks, seeds 1 2 3, 100k steps: 10 min on 2 quiet cores
    python multi_agent.py --tasks simple_spread_v3 --seeds 1 --total-timesteps 16000   # a quick check (~1 min)

Tasks: ``simple_spread_v3`` (3 agents cover 3 landmarks; shared and collision rewards) and
``simple_speaker_listener_v4`` (a speaker that sees the goal's colour and only talks, a listener
that hears it and moves: different observation sizes, 3 vs 5 actions, so both libraries pad).
Both with ``max_cycles`` 25 and discrete actions.

Rows, each run in its own fresh ``python`` process, one after another (seed by seed, the rows
interleaved so that changes in the machine's load touch them all alike):

- ``random``: uniformly random actions, every agent from its own action space, on raw PettingZoo
  env copies (no torch): the return to beat and the env's own speed ceiling. It plays
  ``--final-window`` of the budget, the same number of steps the learners are scored on.
- ``reference IPPO``: ``reference_ippo.py``, one shared 64-64 tanh actor and critic on
  [observation | one-hot id], plain PyTorch and CleanRL's loop.
- ``fastppo IPPO`` and ``fastppo MAPPO``: ``fastppo.train`` with the ``simple_spread_v3`` preset
  (speaker-listener: the same hyperparameters plus ``--multi-agent.pad``); MAPPO's critic also
  reads the env's ``state()``. The ``async`` rows step the env copies in worker processes (one per
  CPU, ``--env.backend async``): the same runs (bit-identical weights and returns), the env time
  shared among the cores.

All learners share the preset's hyperparameters (8 copies x 100 steps, 10 epochs of 2
minibatches, lr 7e-4 constant, gamma 0.99, lambda 0.95, clip 0.2 with value clipping, entropy
0.01, grad norm 0.5, observations normalised by a running mean/std) and one torch thread. What
they cannot share: the reference ends every episode as CleanRL's ppo.py does (``done =
terminated or truncated``, no bootstrap at MPE's time limit) and resets in the same step;
fastppo bootstraps a truncation from the value of its final observation.

Score of a run: the mean team return (the sum of the agents' returns) of the episodes that ended
in the last ``--final-window`` of its steps, by iteration (800 steps here) for the learners.
Per row: the mean over seeds with a 95% stratified-bootstrap CI (fastppo.experiments.report's rliable
estimate). SPS: env steps of the copies per second from building the envs to the end of
training (imports and interpreter start-up not included; ``cold s`` is the whole process), and
per CPU second of that process and its env workers, which a shared machine's load disturbs less
than wall time.
Ratios are against the reference of the same task.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common import footer, header

HERE = Path(__file__).resolve().parent
TASKS: dict[str, dict] = {
    "simple_spread_v3": {"module": "mpe2.simple_spread_v3", "pad": False},
    "simple_speaker_listener_v4": {"module": "mpe2.simple_speaker_listener_v4", "pad": True},
}
ENV_KWARGS = {"max_cycles": 25, "continuous_actions": False}
PRESET = "simple_spread_v3"
ROWS = ("random", "reference IPPO", "fastppo IPPO", "fastppo MAPPO", "fastppo IPPO async", "fastppo MAPPO async")
LEARNERS = tuple(row for row in ROWS if row.startswith("fastppo"))
SHARED = (
    "num_envs",
    "num_steps",
    "num_minibatches",
    "update_epochs",
    "learning_rate",
    "gamma",
    "gae_lambda",
    "clip_coef",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
)
"""Hyperparameters the reference takes from the fastppo preset by the same names."""


def preset_values() -> dict:
    """The fastppo preset's values, by field name, with fastppo's defaults for the rest."""
    from fastppo.config import Config, apply_overrides, load_preset

    config = apply_overrides(Config(), load_preset(PRESET))
    return {**vars(config.env), **vars(config.ppo), "torch_threads": config.intra_op_threads(stacked=False)}


def result_line(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"the child printed no RESULT line:\n{output[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


# --- children: each runs in its own process and prints one RESULT line -------------------------


def child_random(task: str, seed: int, steps: int, num_envs: int) -> dict:
    """Uniformly random actions on ``num_envs`` raw copies; episodes as [step, team return]."""
    module = importlib.import_module(TASKS[task]["module"])
    start, cpu = time.perf_counter(), time.process_time()
    envs = [module.parallel_env(**ENV_KWARGS) for _ in range(num_envs)]
    for c, env in enumerate(envs):
        env.reset(seed=seed + c)
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed * 1000 + c)
    team = np.zeros(num_envs)
    episodes, global_step = [], 0
    while global_step < steps:
        global_step += num_envs
        for c, env in enumerate(envs):
            _, rewards, _, _, _ = env.step({agent: env.action_space(agent).sample() for agent in env.agents})
            team[c] += sum(rewards.values())
            if not env.agents:
                episodes.append([global_step, float(team[c])])
                team[c] = 0.0
                env.reset()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"steps": global_step, "wall_s": wall, "cpu_s": cpu, "episodes": episodes}


def children_cpu_s() -> float:
    """CPU seconds of this process's finished child processes (the async rows' env workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child_fastppo(task: str, seed: int, steps: int, algorithm: str, backend: str) -> dict:
    """fastppo.train with the preset; episodes as [end step of their iteration, team return]."""
    import fastppo

    # The team return: speaker and listener share one reward (two groups by name, so no headline by default).
    overrides = {
        "total_timesteps": steps,
        "seed": seed,
        "progress": False,
        "tensorboard": False,
        "multi_agent.algorithm": algorithm,
        "backend": backend,
        "multi_agent.headline": "team",
    }
    if TASKS[task]["pad"]:
        overrides["multi_agent.pad"] = True
    start, cpu = time.perf_counter(), time.process_time() + children_cpu_s()
    agent = fastppo.train(f"pz:{TASKS[task]['module']}", preset=PRESET, env_kwargs=ENV_KWARGS, **overrides)
    wall, cpu = (
        time.perf_counter() - start,
        time.process_time() + children_cpu_s() - cpu,
    )  # the workers have been joined
    episodes, seen = [], 0
    for row in agent.history:
        count = int(row["charts/episodes"])
        episodes += [[int(row["global_step"]), float(r)] for r in agent.episode_returns[seen : seen + count]]
        seen += count
    sections = {
        key: sum(row.get(f"time/{key}", 0.0) for row in agent.history) for key in ("env", "policy", "copy", "update")
    }
    return {
        "steps": int(agent.history[-1]["global_step"]),
        "wall_s": wall,
        "cpu_s": cpu,
        "episodes": episodes,
        "sections": sections,
    }


# --- the parent: runs the children, scores and prints ------------------------------------------


def run_child(argv: list[str]) -> dict:
    start = time.perf_counter()
    proc = subprocess.run(["nice", sys.executable, *argv], cwd=HERE, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    result = result_line(proc.stdout)
    result["cold_s"] = time.perf_counter() - start
    return result


def run_row(row: str, task: str, seed: int, steps: int, hp: dict, final_window: float) -> dict:
    common = ["--task", task, "--seed", str(seed)]
    if row == "random":
        random_steps = max(
            hp["num_envs"] * ENV_KWARGS["max_cycles"], int(round(steps * final_window))
        )  # one episode per copy at least
        return run_child([__file__, "--child", "random", *common, "--total-timesteps", str(random_steps)])
    if row.startswith("fastppo"):
        child = "-".join(row.lower().split())  # fastppo-ippo, fastppo-mappo-async, ...
        return run_child([__file__, "--child", child, *common, "--total-timesteps", str(steps)])
    argv = [
        "reference_ippo.py",
        "--quiet",
        "--env-id",
        TASKS[task]["module"],
        "--env-kwargs",
        json.dumps(ENV_KWARGS),
        "--seed",
        str(seed),
    ]
    argv += ["--total-timesteps", str(steps), "--torch-threads", str(hp["torch_threads"])]
    argv += [arg for name in SHARED for arg in (f"--{name.replace('_', '-')}", str(hp[name]))]
    argv += [
        "--normalize-obs" if hp["normalize_obs"] else "--no-normalize-obs",
        "--anneal-lr" if hp["lr_schedule"] == "linear" else "--no-anneal-lr",
    ]
    argv += ["--clip-vloss" if hp["clip_vloss"] else "--no-clip-vloss", "--pad" if TASKS[task]["pad"] else "--no-pad"]
    result = run_child(argv)
    # Label each episode with the end of its iteration, as fastppo's history does.
    batch = hp["num_envs"] * hp["num_steps"]
    result["episodes"] = [[int(math.ceil(step / batch) * batch), ret] for step, ret in result["episodes"]]
    return result


def score(result: dict, final_window: float, whole: bool) -> float:
    """Mean team return of the episodes that ended in the last ``final_window`` of the steps."""
    episodes = np.asarray(result["episodes"], dtype=float).reshape(-1, 2)
    if whole:
        return float(episodes[:, 1].mean())
    last = result["steps"]
    return float(episodes[episodes[:, 0] > (1 - final_window) * last, 1].mean())


def summarise(results: dict, tasks: list[str], final_window: float) -> str:
    from fastppo.experiments.report import interval_estimates

    lines = []
    for task in tasks:
        lines += [
            f"\n### {task}\n",
            "| row | team return, mean [95% CI] | per seed | SPS | SPS per CPU s | cold s | vs reference: return "
            "| SPS | SPS per CPU s |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        ref = results[task].get("reference IPPO")
        ref_mean = np.mean([score(r, final_window, False) for r in ref]) if ref else math.nan
        ref_sps = np.mean([r["steps"] / r["wall_s"] for r in ref]) if ref else math.nan
        ref_cpu = np.mean([r["steps"] / r["cpu_s"] for r in ref]) if ref else math.nan
        for row in ROWS:
            runs = results[task].get(row)
            if not runs:
                continue
            scores = np.array([score(r, final_window, row == "random") for r in runs])
            est = interval_estimates(scores[:, None], reps=2000)["mean"]
            sps = np.mean([r["steps"] / r["wall_s"] for r in runs])
            cpu = np.mean([r["steps"] / r["cpu_s"] for r in runs])
            cold = np.mean([r["cold_s"] for r in runs])
            per_seed = " / ".join(f"{s:.1f}" for s in scores)
            vs = (
                f"{est.point - ref_mean:+.1f} | {sps / ref_sps:.2f}x | {cpu / ref_cpu:.2f}x"
                if row != "reference IPPO"
                else "— | — | —"
            )
            lines.append(f"| {row} | {est} | {per_seed} | {sps:.0f} | {cpu:.0f} | {cold:.0f} | {vs} |")
        for row in LEARNERS:
            for r in results[task].get(row, []):
                total = sum(r["sections"].values())
                r["share"] = {k: round(v / total, 3) for k, v in r["sections"].items()}
            if results[task].get(row):
                share = {
                    k: np.mean([r["share"][k] for r in results[task][row]]) for k in ("env", "policy", "copy", "update")
                }
                lines.append(f"\n{row} time: " + ", ".join(f"{k} {v:.0%}" for k, v in share.items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument(
        "--total-timesteps", type=int, default=None, help="env steps per learning run (default: the preset's)"
    )
    parser.add_argument("--final-window", type=float, default=0.1, help="fraction of the steps a run is scored on")
    parser.add_argument(
        "--out", default="runs/multi_agent.json", help="where every run's result, episodes included, is written (JSON)"
    )
    parser.add_argument(
        "--child", choices=("random", *("-".join(row.lower().split()) for row in LEARNERS)), help=argparse.SUPPRESS
    )
    parser.add_argument("--task", choices=list(TASKS), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child == "random":
        print(
            "RESULT "
            + json.dumps(child_random(args.task, args.seed, args.total_timesteps, preset_values()["num_envs"]))
        )
        return
    if args.child:
        _, algorithm, *backend = args.child.split("-")
        print(
            "RESULT "
            + json.dumps(
                child_fastppo(args.task, args.seed, args.total_timesteps, algorithm, backend[0] if backend else "sync")
            )
        )
        return

    hp = preset_values()
    steps = args.total_timesteps or hp["total_timesteps"]
    header(f"multi-agent PPO: {', '.join(args.tasks)}; {steps} env steps per learning run; seeds {args.seeds}")
    results: dict = {task: {} for task in args.tasks}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for task in args.tasks:
        for seed in args.seeds:
            for row in args.rows:
                result = run_row(row, task, seed, steps, hp, args.final_window)
                results[task].setdefault(row, []).append(result)
                print(
                    f"{task} seed {seed} {row}: {score(result, args.final_window, row == 'random'):.1f} after "
                    f"{result['steps']} steps, {result['steps'] / result['wall_s']:.0f} SPS, "
                    f"{result['steps'] / result['cpu_s']:.0f} per CPU s, {result['cold_s']:.0f} s cold",
                    flush=True,
                )
                Path(args.out).write_text(json.dumps({"steps": steps, "seeds": args.seeds, "results": results}))
    print(summarise(results, args.tasks, args.final_window))
    footer()


if __name__ == "__main__":
    main()
