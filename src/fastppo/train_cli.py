"""`fastppo train ENV_ID [--preset NAME] [--any.hyperparameter V]`."""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import yaml

from fastppo.api import default_run_dir, make_config
from fastppo.config import Config, available_presets, field_docs, sections


def add_hyperparameter_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per config field, '--section.field' plus the bare '--field' when it is unique;
    values stay strings here and are typed by config.apply_overrides."""
    config = Config()
    names = Counter(f.name for section in sections(config).values() for f in dataclasses.fields(section))
    for section_name, section in sections(config).items():
        group = parser.add_argument_group(f"{section_name} ({type(section).__doc__.strip().rstrip('.')})")
        docs = field_docs(type(section))
        for f in dataclasses.fields(section):
            if (section_name, f.name) == ("env", "env_id"):
                continue
            flags = [f"--{section_name}.{f.name.replace('_', '-')}"]
            if names[f.name] == 1:
                flags.append(f"--{f.name.replace('_', '-')}")
            default = getattr(section, f.name)
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            group.add_argument(
                *flags,
                dest=f"hp:{section_name}.{f.name}",
                default=argparse.SUPPRESS,
                metavar="V",
                # A bare boolean flag means true: `--capture-video`.
                nargs="?" if f.type in (bool, "bool") else None,
                const="true" if f.type in (bool, "bool") else None,
                help=f"{docs.get(f.name, '')} (default: {shown})",
            )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a PPO agent on a gymnasium env",
        description="Train PPO. Hyperparameters come from the defaults (CleanRL's), then the preset, then these flags.",
        allow_abbrev=False,
    )
    parser.add_argument("env_id", metavar="ENV_ID", help="gymnasium id (CartPole-v1) or package.module:EnvClass")
    parser.add_argument("--preset", default=None, help=f"hyperparameter preset: {', '.join(available_presets())} (default: the env's own, else CleanRL's)")
    parser.add_argument("--run-dir", default=None, help="output folder (default: runs/<env>__<exp>__<seed>__<time>)")
    add_hyperparameter_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fastppo.trainer import train

    overrides = {key.removeprefix("hp:"): value for key, value in vars(args).items() if key.startswith("hp:")}
    config = make_config(args.env_id, args.preset, overrides)
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    agent = train(config, run_dir)
    returns = agent.episode_returns[-20:]
    last = f"{np.mean(returns):.1f} mean return over the last {len(returns)} episodes" if returns else "no episode finished"
    sps = np.mean([m["charts/SPS"] for m in agent.history])
    print(f"fastppo: {config.env.env_id}: {config.num_iterations * config.batch_size} steps, {last}, {sps:.0f} SPS.")
    print(f"fastppo: results in {run_dir} (metrics.jsonl, TensorBoard: tensorboard --logdir {run_dir.parent})")
    return 0
