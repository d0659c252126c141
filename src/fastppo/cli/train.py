"""`fastppo train ENV_ID [--preset NAME] [--any.hyperparameter V]`."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from collections import Counter
from pathlib import Path

import numpy as np

from fastppo.agents.agent import FINAL_EPISODES
from fastppo.cli.flags import add_boolean_flag
from fastppo.config import Config, available_presets, field_docs, sections
from fastppo.envs.env_config import resolved_config
from fastppo.errors import FastPPOError
from fastppo.experiments.seeds import MAX_SEEDS
from fastppo.files.run_folder import default_run_dir


def add_hyperparameter_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per config field, '--section.field' plus the bare '--field' when it is unique;
    values stay strings here and are typed by config.apply_overrides."""
    config = Config()
    names = Counter(f.name for section in sections(config).values() for f in dataclasses.fields(section))
    for section_name, section in sections(config).items():
        section_type: type = type(section)
        # the docstring's words on one line, however its source wraps them
        summary = " ".join((section_type.__doc__ or "").split()).rstrip(".")
        group = parser.add_argument_group(f"{section_name} ({summary})")
        docs = field_docs(section_type)
        for f in dataclasses.fields(section):
            if (section_name, f.name) == ("env", "env_id"):
                continue
            flags = [f"--{section_name.replace('_', '-')}.{f.name.replace('_', '-')}"]
            if names[f.name] == 1:
                flags.append(f"--{f.name.replace('_', '-')}")
            default = getattr(section, f.name)
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            dest = f"hp:{section_name}.{f.name}"
            if f.type in (bool, "bool"):  # `--capture-video`, `--capture-video false`, `--no-capture-video`
                add_boolean_flag(group, flags, dest, docs.get(f.name, ""), shown)
                continue
            group.add_argument(
                *flags,
                dest=dest,
                default=argparse.SUPPRESS,
                metavar="V",
                help=f"{docs.get(f.name, '')} (default: {shown})",
            )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a PPO agent on a gymnasium or PettingZoo env",
        description="Train PPO. Hyperparameters come from the defaults (CleanRL's), then the preset, then these flags.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "env_id",
        metavar="ENV_ID",
        nargs="?",
        help="gymnasium id (CartPole-v1), package.module:EnvClass or file.py:EnvClass, or a PettingZoo Parallel "
        "env: pz:<module> (its parallel_env(), e.g. pz:mpe2.simple_spread_v3) or pz:<module or "
        "file.py>:<function> returning one; --env-kwargs '{...}' are its arguments",
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue the run in RUN_DIR from its newest checkpoint, with its saved config (only "
        "--total-timesteps and the run.* output flags may change); a run that stopped before its first "
        "checkpoint starts over",
    )
    parser.add_argument(
        "--preset",
        default=None,
        help=f"hyperparameter preset: {', '.join(available_presets())}, or a preset YAML file's path (fastppo "
        "sweep writes one) (default: the env's own, else CleanRL's)",
    )
    parser.add_argument(
        "--run-dir",
        default=None,
        help="output folder, new or without a run in it: --resume continues a run (default: "
        "runs/<env>__<exp>__<seed>__<time>)",
    )
    parser.add_argument(
        "--seeds",
        metavar="SPEC",
        default=None,
        help=f"train one run per seed (1-10, 1,3,5, 1-4,8; at most {MAX_SEEDS}, each once) into RUN_DIR/seed_<n> "
        "in --workers processes (on tensor envs each trains its share of the seeds as one batched "
        "computation); 'fastppo report RUN_DIR' summarises them",
    )
    parser.add_argument(
        "--workers",
        metavar="K",
        type=int,
        default=None,
        help="with --seeds: processes that train the seeds (default: one per CPU core, at most one per seed; a "
        "stack of seeds on a GPU: 1)",
    )
    add_hyperparameter_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fastppo.experiments.seeds import PLAN_FILE
    from fastppo.files.run_folder import seed_folders
    from fastppo.training.distributed import launched_rank, launched_world_size
    from fastppo.training.resume import restart_config, resume_config
    from fastppo.training.trainer import train

    main = launched_rank() == 0  # under torchrun, rank 0 speaks for the run
    overrides = {key.removeprefix("hp:"): value for key, value in vars(args).items() if key.startswith("hp:")}
    checkpoint = None
    if args.workers is not None and args.seeds is None:
        raise FastPPOError(
            "--workers K runs the seeds of --seeds in parallel: add --seeds (e.g. --seeds 1-10) or drop --workers"
        )
    if args.resume is not None:
        if args.seeds is not None:
            raise FastPPOError("--resume RUN_DIR continues the seeds it holds: drop --seeds")
        if args.preset is not None or args.run_dir is not None:
            raise FastPPOError(
                "--resume RUN_DIR takes the preset and the run directory from the run: drop --preset/--run-dir"
            )
        if seed_folders(args.resume) or (Path(args.resume) / PLAN_FILE).is_file():
            return resume_seeds(Path(args.resume), overrides, args.env_id)
        run_dir = Path(args.resume)
        restarted = restart_config(run_dir, overrides, args.env_id)
        if restarted is not None:  # nothing to resume: the run again, from its start
            config = restarted
            if main:
                print(f"fastppo: {run_dir} stopped before its first checkpoint: starting it over with its saved config")
        else:
            config, checkpoint = resume_config(args.resume, overrides, args.env_id)
            if main:
                print(f"fastppo: resuming {run_dir} from {checkpoint.path.name} (step {checkpoint.global_step})")
        source = "its saved config"
    elif args.env_id is None:
        raise FastPPOError("give an ENV_ID to train (fastppo train CartPole-v1), or --resume RUN_DIR")
    elif args.seeds is not None:
        return run_seeds(args, overrides)
    else:
        config, preset = resolved_config(args.env_id, args.preset, overrides)
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(config)
        source = f"preset {preset}"
    start_over = args.resume is not None and checkpoint is None  # a run that stopped before its first checkpoint
    agent = train(
        config,
        run_dir,
        checkpoint,
        on_start=lambda trained: print(
            *start_header(trained, source, run_dir, launched_world_size()), sep="\n", flush=True
        ),
        start_over=start_over,
    )  # once the run folder passed its checks
    if main:
        groups = {group: group_returns[-FINAL_EPISODES:] for group, group_returns in agent.group_returns.items()}
        if agent.final_return is not None:
            last = (
                f"{agent.final_return:.1f} mean return over the last "
                f"{len(agent.episode_returns[-FINAL_EPISODES:])} episodes"
            )
        elif any(groups.values()):  # agents in several groups, no headline: each group's
            last = f"mean returns over the last {len(next(iter(groups.values())))} episodes: " + ", ".join(
                f"{group} {np.mean(r):.1f}" for group, r in groups.items()
            )
        elif games := sum(
            m.get("charts/episodes", 0.0) for m in agent.history
        ):  # a game against itself alone: no learner's return
            last = f"{games:.0f} games of self-play"
        else:
            last = "no episode finished"
        sps = np.mean([m["charts/SPS"] for m in agent.history]) if agent.history else float("nan")
        steps = agent.history[-1]["global_step"] if agent.history else 0
        print(f"fastppo: {config.env.env_id}: {steps} steps, {last}, {sps:.0f} SPS{time_split(agent.history)}.")
        board = f", TensorBoard: tensorboard --logdir {run_dir.parent}" if config.run.tensorboard else ""
        print(f"fastppo: results in {run_dir} (metrics.jsonl{board})")
        if agent.interrupted_by is None:  # a stopped run's last lines say how to resume it
            print(*filter(None, [solved_line(config.env.env_id, agent.final_return), next_steps(run_dir)]), sep="\n")
    # The shell's code for death by that signal (130, 143): scripts tell a stopped run from a finished one.
    return 0 if agent.interrupted_by is None else 128 + agent.interrupted_by


def run_seeds(args: argparse.Namespace, overrides: dict[str, str]) -> int:
    """``--seeds``: one run per seed in worker processes (fastppo.experiments.seeds); exit 1 if any failed."""
    from fastppo.experiments.seeds import plan_seeds, train_seeds
    from fastppo.training.distributed import launched_world_size

    if launched_world_size() > 1:
        raise FastPPOError("--seeds trains its seeds in worker processes of its own: launch it without torchrun")
    config, seeds, parent, workers = plan_seeds(
        args.env_id, args.seeds, args.preset, args.run_dir, args.workers, overrides
    )
    if config.env.backend != "tensor":
        how = f"{workers} at a time"
    else:
        how = "as one batched run" if workers == 1 else f"as {workers} batched runs, one process each"
    print(f"fastppo: {config.env.env_id}: {len(seeds)} seeds {how}, into {parent}/seed_<n>")
    print(
        *start_header(config, f"preset {resolved_config(args.env_id, args.preset, overrides)[1]}", None),
        sep="\n",
        flush=True,
    )
    return seeds_exit_code(*train_seeds(config, seeds, parent, workers), parent)


def seeds_exit_code(results: list, stopped: int | None, parent: Path) -> int:
    """The summary of a --seeds run; its exit code: 128 + the signal that stopped it, else 1 if a seed failed."""
    from fastppo.experiments.seeds import print_summary

    print_summary(results, parent)
    if stopped:
        return 128 + stopped
    return 1 if any(r.error for r in results) else 0


def resume_seeds(parent: Path, overrides: dict[str, str], env_id: str | None) -> int:
    """``--resume`` on a ``--seeds`` job's folder: every seed not finished goes on from its
    checkpoint (tensor envs: its stack, in this process when there is one), and those that never
    started start, with the job's saved config (fastppo.experiments.seeds.resume_plan)."""
    from fastppo.experiments.seeds import resume_plan, train_seeds

    config, seeds, workers, checkpoints = resume_plan(parent, overrides, env_id)
    steps = sorted({c.global_step for c in checkpoints if c is not None})
    started = (
        f"from step {steps[0]}" + (f" (some from {', '.join(map(str, steps[1:]))})" if steps[1:] else "")
        if steps
        else ""
    )
    new = sum(c is None for c in checkpoints)
    print(
        f"fastppo: resuming the {len(seeds)} seed{'s' if len(seeds) > 1 else ''} of {parent} "
        + ", ".join(filter(None, [started, f"{new} not started yet" if new else ""]))
    )
    return seeds_exit_code(*train_seeds(config, seeds, parent, workers, checkpoints), parent)


HEADER_SIZES = (
    "env.env_id",
    "env.backend",
    "env.num_envs",
    "ppo.num_steps",
    "ppo.num_minibatches",
    "ppo.update_epochs",
    "ppo.total_timesteps",
    "policy.precision",
)
"""Fields the header's first lines show (a pixel policy's precision as chosen for the device); its last line lists
the other hyperparameters that differ from the defaults."""


def solved_line(env_id: str, final_return: float | None) -> str | None:
    """What the final return means, where gymnasium's registry gives the env a reward_threshold
    (the mean return that counts as solving it: CartPole-v1 475 of its maximum 500, Acrobot-v1
    -100, LunarLander-v3 200); None elsewhere (user code, PettingZoo, Atari, Pendulum)."""
    import gymnasium as gym

    if final_return is None or ":" in env_id:  # no return, or an id naming code: nothing to look up
        return None
    try:
        threshold = gym.spec(env_id).reward_threshold
    except gym.error.Error:
        return None
    if threshold is None:
        return None
    verdict = "solved" if final_return >= threshold else "not solved yet (train longer: --total-timesteps)"
    return (
        f"fastppo: {env_id} counts as solved at a mean return of {threshold:g} (its reward_threshold): "
        f"{final_return:.1f} is {verdict}"
    )


def next_steps(run_dir: Path) -> str:
    """What to run next on a finished run's folder."""
    folder = shlex.quote(str(run_dir))
    return (
        f"fastppo: next: fastppo eval {folder} (evaluate the trained agent), fastppo plot {folder} (its "
        "learning curves)"
    )


def start_header(config: Config, source: str, run_dir: Path | None, world_size: int = 1) -> list[str]:
    """The lines a run prints as it starts: what it trains with which config (``source``: "preset
    NAME", or a resume's "its saved config") into which folder, on which device, the batch and the
    number of updates, the hyperparameters that differ from the defaults (CleanRL's), and a warning
    when the budget gives too few updates (``few_updates_warning``)."""
    from fastppo.devices import resolve_device
    from fastppo.training.trainer import few_updates_warning

    threads = config.intra_op_threads(stacked=False)
    # As asked for: a device the run cannot use is its own check's one-line error, later (a stack's among them).
    device = f"auto: {resolve_device('auto')}" if config.run.device == "auto" else config.run.device
    where = f" into {run_dir}" if run_dir is not None else ""
    ranks = f" per rank, {world_size} ranks" if world_size > 1 else ""
    lines = [
        f"fastppo: {config.env.env_id} ({source}, {config.env.backend} backend){where}, on {device} ({threads} "
        f"thread{'s' if threads > 1 else ''}{f', {config.policy.precision}' if config.pixel_policy else ''})",
        f"fastppo: {config.env.num_envs} envs x {config.ppo.num_steps} steps = {config.batch_size}{ranks} per "
        f"update in {config.ppo.num_minibatches} minibatches x {config.ppo.update_epochs} epochs; "
        f"{config.ppo.total_timesteps} steps = {config.num_iterations // world_size} updates",
    ]
    defaults, values = Config().to_dict(), config.to_dict()
    changed = [
        f"{name}={shown(value)}"
        for section in ("env", "ppo", "policy", "multi_agent", "self_play")
        for name, value in values[section].items()
        if value != defaults[section][name] and f"{section}.{name}" not in HEADER_SIZES
    ]
    lines.append(f"fastppo: differs from the defaults: {' '.join(changed) if changed else 'nothing'}")
    warning = few_updates_warning(config, world_size)
    return lines + ([f"fastppo: warning: {warning}"] if warning else [])


def shown(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(shown, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def time_split(history: list[dict[str, float]]) -> str:
    """Where the run's time went, largest share first, e.g. '; time: update 51%, env 36%, ...'."""
    totals: dict[str, float] = {}
    for row in history:
        for name, value in row.items():
            if name.startswith("time/"):
                section = name.removeprefix("time/")
                totals[section] = totals.get(section, 0.0) + value
    whole = sum(totals.values())
    if whole <= 0:
        return ""
    return "; time: " + ", ".join(
        f"{name} {100 * seconds / whole:.0f}%" for name, seconds in sorted(totals.items(), key=lambda item: -item[1])
    )
