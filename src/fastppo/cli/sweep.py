"""`fastppo sweep ENV --trials N [--workers K] [--storage URL] [--space FILE] [--seeds SPEC]
[--any.hyperparameter V]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fastppo.cli.train import add_hyperparameter_flags
from fastppo.errors import FastPPOError, install_extra


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="tune hyperparameters with Optuna (TPE, median pruning) in parallel workers sharing one database; "
        "writes the best as a preset",
        description="Tune the fields of a search space over the config that the preset and the flags give (a "
        "field set by a flag is not tuned). Writes RUN_DIR/sweep.db, RUN_DIR/trial_<n>/seed_<s> (runs "
        "fastppo report reads) and RUN_DIR/best.yaml (a preset). Re-running the same command continues a "
        "stopped sweep (needs the 'sweep' extra).",
        allow_abbrev=False,
    )
    parser.add_argument(
        "env_id",
        metavar="ENV_ID",
        help="gymnasium id (CartPole-v1), package.module:EnvClass, or a PettingZoo Parallel env pz:<module> (see "
        "fastppo train --help)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        required=True,
        metavar="N",
        help="finished (complete or pruned) trials the study is to hold, all workers together; 0: only print the "
        "best and rewrite best.yaml",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="K",
        help="worker processes, each running trials (default: the number of CPU cores)",
    )
    parser.add_argument(
        "--seeds",
        default="1-3",
        metavar="SPEC",
        help="seeds each trial trains, e.g. 1-3 or 1,5 (default: 1-3); a trial's value is the mean of their "
        "final returns",
    )
    parser.add_argument(
        "--space",
        default=None,
        metavar="FILE",
        help="search space YAML replacing the default (src/fastppo/sweep_space.yaml, which documents the format)",
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="preset the trials start from (name or YAML file; default: the env's own, else CleanRL's)",
    )
    parser.add_argument(
        "--run-dir",
        default=None,
        metavar="DIR",
        help="sweep folder, not a run's (default: RUN_ROOT/sweep_<study name>)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        metavar="URL",
        help="Optuna storage URL (default: sqlite:///RUN_DIR/sweep.db); e.g. postgresql://user@host/db for "
        "workers on several machines",
    )
    parser.add_argument("--study-name", default=None, metavar="NAME", help="study in the storage (default: the env id)")
    parser.add_argument(
        "--sampler-seed", type=int, default=0, metavar="SEED", help="seed of the TPE sampler (default: 0)"
    )
    parser.add_argument(
        "--heartbeat",
        type=int,
        default=60,
        metavar="SECONDS",
        help="a running trial's heartbeat period; a trial silent for twice as long (its process killed) is "
        "failed and run again (default: 60)",
    )
    add_hyperparameter_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise FastPPOError(
            f"fastppo sweep needs the 'sweep' extra (optuna is missing): {install_extra('sweep')}"
        ) from None
    from fastppo.config import check_seed, resolve_key
    from fastppo.envs.env_config import make_config
    from fastppo.experiments.seeds import parse_seeds
    from fastppo.experiments.sweep import Sweep, best_table, open_study, run_workers, write_best_preset
    from fastppo.experiments.sweep_space import load_space
    from fastppo.files.outputs import output_dir
    from fastppo.files.run_folder import check_not_a_run

    overrides = {key.removeprefix("hp:"): value for key, value in vars(args).items() if key.startswith("hp:")}
    if any(key in ("seed", "run.seed") for key in overrides):
        raise FastPPOError("fastppo sweep trains every trial with --seeds: drop --seed")
    for flag, value, least in (
        ("--trials", args.trials, 0),
        ("--workers", args.workers, 1),
        ("--heartbeat", args.heartbeat, 1),
    ):
        if value is not None and value < least:
            raise FastPPOError(f"{flag} must be >= {least}, got {value}")
    check_seed(args.sampler_seed, "--sampler-seed")  # numpy's SeedSequence in each worker, else a traceback there
    seeds = parse_seeds(args.seeds)
    base = make_config(args.env_id, args.preset, overrides)
    fixed = {resolve_key(base, key) for key in overrides}
    space = {key: d for key, d in load_space(args.space).items() if key not in fixed}
    if not space:
        raise FastPPOError(
            "the flags fix every field of the search space: nothing is left to tune (drop a flag or widen --space)"
        )
    study_name = args.study_name or base.env.env_id.replace("/", "_").replace(":", "_")
    folder = Path(args.run_dir or Path(base.run.run_root) / f"sweep_{study_name}")
    database = folder / "sweep.db"
    if not args.trials and args.storage is None and not database.exists():
        # Checked before anything is made: a mistyped folder must not leave an empty database behind.
        raise FastPPOError(
            f"no sweep in {folder} (no sweep.db there): start one with --trials N (N > 0), or give its --run-dir"
        )
    check_not_a_run(folder, "--run-dir")
    output_dir(folder, "--run-dir")
    storage = args.storage or f"sqlite:///{database.resolve()}"
    sweep = Sweep(
        base, space, tuple(seeds), args.trials, folder, storage, study_name, args.heartbeat, args.sampler_seed
    )
    study = open_study(sweep, create=args.trials > 0)
    failed: list[int] = []
    if args.trials:
        workers = args.workers or os.cpu_count() or 1
        print(
            f"fastppo: sweep of {base.env.env_id}, study '{study_name}' in {storage}: {args.trials} trials x "
            f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}, {workers} workers; tuning {', '.join(space)}",
            flush=True,
        )
        try:
            failed = run_workers(sweep, workers, study)
        except KeyboardInterrupt:
            print(
                f"fastppo: sweep interrupted: re-run the same command to continue study '{study_name}'", file=sys.stderr
            )
            return 130
    print(best_table(study, sweep))
    best = write_best_preset(study, sweep, folder / "best.yaml")
    if best is None:
        print("fastppo: no trial has completed yet: no preset written")
    else:
        print(
            f"fastppo: best config (trial {best.number}, {best.value:.1f}) in {folder / 'best.yaml'}: fastppo "
            f"train {base.env.env_id} --preset {folder / 'best.yaml'}"
        )
        print(f"fastppo: its runs: fastppo report {folder / f'trial_{best.number}'}")
    for index in failed:
        print(
            f"fastppo: worker {index} failed (its error is above): re-run the same command to continue", file=sys.stderr
        )
    return 1 if failed else 0
