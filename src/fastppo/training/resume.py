"""Resuming a run or a stack of seeds from its checkpoints: the config to resume with (only the
``RESUMABLE_OVERRIDES`` may change), the checkpoints, and whether anything is left to train; a
run that stopped before its first checkpoint is started over with its saved config."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from fastppo.config import Config, apply_overrides, resolve_key
from fastppo.core import schedule_progress
from fastppo.env_ids import folder_env_id, names_user_code, same_env
from fastppo.errors import FastPPOError
from fastppo.files.run_folder import (
    CONFIG_FILE,
    checkpoint_root,
    list_checkpoints,
    read_config,
    seed_folders,
    stopped_before_first_checkpoint,
)
from fastppo.games.players import check_folder_players
from fastppo.training.checkpoint import Checkpoint, load_checkpoint
from fastppo.training.distributed import check_world_size, launched_world_size
from fastppo.training.runs import reached_stop_return
from fastppo.training.state import planned_iterations

RESUMABLE_OVERRIDES = (
    "ppo.total_timesteps",
    "run.checkpoint_every",
    "run.keep_checkpoints",
    "run.progress",
    "run.tensorboard",
    "run.torch_threads",
    "run.stop_return",
    "run.stop_window",
    "run.collective_timeout",
    "env.step_in_halves",
)
"""What may change on resume; anything else would make the resumed run a different experiment."""
SWITCHABLE_BACKENDS = ("sync", "async", "envpool", "ale")
"""Backends that step the same ids the same way: a resume moves between them when asked
(``--backend``), its envs then restarting fresh episodes; without asking it keeps the saved one."""


def resume_config(
    run_dir: str | Path, overrides: dict[str, Any] | None = None, env_id: str | None = None
) -> tuple[Config, Checkpoint]:
    """The config saved with a run's newest checkpoint (plus the few overrides that keep it the same
    experiment: ``RESUMABLE_OVERRIDES``, and a backend asked for among ``SWITCHABLE_BACKENDS``), and
    that checkpoint, its schedules re-anchored when total_timesteps changes: a run stopped before its
    end goes on from the schedules' current values in a straight line to 0 at the new end; a finished
    run (its linear lr, clip and entropy at 0) restarts them from their configured start values,
    annealing to 0 at the new end (a warm restart). An unchanged total resumes exactly. A finished
    run without a larger total is an error that says how to train further; so is an ``env_id`` (as
    the command line names one) that ``check_resumed_env`` refuses."""
    checkpoint = load_checkpoint(run_dir, env_id=env_id)
    config = checkpoint.config
    check_resumed_env(run_dir, config.env.env_id, env_id)
    check_folder_players(run_dir, config.self_play, {resolve_key(config, key) for key in overrides or {}})
    check_world_size(run_dir, checkpoint.meta.get("world_size", 1))
    world_size = launched_world_size()
    planned = planned_iterations(config, world_size)  # the horizon the schedules have followed so far
    apply_resumable(config, overrides or {}, run_dir)
    num_iterations = planned_iterations(config, world_size)
    if checkpoint.iteration == planned and num_iterations <= planned:
        raise FastPPOError(
            f"{run_dir} is finished (trained its {checkpoint.global_step} steps); to train further, give it a larger "
            f"budget: fastppo train --resume {run_dir} --total-timesteps {2 * checkpoint.global_step}"
        )
    if num_iterations <= checkpoint.iteration:
        raise FastPPOError(
            f"the checkpoint is at step {checkpoint.global_step}, --total-timesteps {config.ppo.total_timesteps} "
            "leaves nothing to train: raise it to train further"
        )
    if num_iterations != planned:  # a new horizon: the schedules' line goes to its end (core.schedule_progress)
        # A run stopped early goes on from where its schedules stand; a finished one, whose linear
        # schedules stand at 0 (no learning), restarts them from their configured start values.
        at = (
            0.0
            if checkpoint.iteration == planned
            else schedule_progress(checkpoint.iteration + 1, planned, checkpoint.schedule_anchor)
        )
        checkpoint.schedule_anchor = (checkpoint.iteration, at)
    return config, checkpoint


def check_backend_switch(run_dir: str | Path, saved: str, asked: str) -> None:
    """A resume may move to another backend that steps the same envs the same way (``SWITCHABLE_BACKENDS``)."""
    if saved not in SWITCHABLE_BACKENDS or asked not in SWITCHABLE_BACKENDS:
        raise FastPPOError(
            f"{run_dir} was trained on the {saved} backend and cannot resume on {asked}: a resume may move between "
            f"{', '.join(SWITCHABLE_BACKENDS)} only; drop --backend"
        )


def apply_resumable(config: Config, overrides: dict[str, Any], run_dir: str | Path) -> Config:
    """``config`` with ``overrides`` applied, validated; a one-line FastPPOError for one that would
    change the experiment (not in ``RESUMABLE_OVERRIDES``, or a backend ``check_backend_switch``
    refuses)."""
    for key, value in overrides.items():
        full = resolve_key(config, key)
        section, name = full.split(".")
        unchanged = getattr(getattr(apply_overrides(Config(), {full: value}), section), name) == getattr(
            getattr(config, section), name
        )
        if full == "env.backend" and not unchanged:
            check_backend_switch(run_dir, config.env.backend, str(value))
        elif full not in RESUMABLE_OVERRIDES and not unchanged:
            raise FastPPOError(
                f"cannot change {full} when resuming (allowed: {', '.join(RESUMABLE_OVERRIDES)}): start a new run "
                "instead"
            )
        apply_overrides(config, {full: value})
    return config.validate()


def restart_config(
    run_dir: str | Path, overrides: dict[str, Any] | None = None, env_id: str | None = None
) -> Config | None:
    """The saved config (config.yaml, plus ``overrides`` as ``resume_config`` allows them) of a run
    that stopped before its first checkpoint (``stopped_before_first_checkpoint``), which
    ``fastppo train --resume`` starts over; None for any other folder. Its env is checked as a
    resume checks it (``check_resumed_env``: user code only when named again)."""
    run_dir = Path(run_dir)
    if not stopped_before_first_checkpoint(run_dir):
        return None
    try:
        config = Config.from_dict(read_config(run_dir / CONFIG_FILE))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:
        raise FastPPOError(
            f"{run_dir} stopped before its first checkpoint, and its {CONFIG_FILE} cannot start it over: damaged "
            f"({str(exc).splitlines()[0]})"
        ) from None
    check_resumed_env(run_dir, config.env.env_id, env_id)
    check_folder_players(run_dir, config.self_play, {resolve_key(config, key) for key in overrides or {}})
    return apply_resumable(config, overrides or {}, run_dir)


def finished_run(run_dir: Path, overrides: dict[str, Any] | None = None) -> bool:
    """Whether the run in ``run_dir`` has nothing left to train: its newest checkpoint at the end of
    its --total-timesteps, or past its --run.stop-return (each as ``overrides`` may move it)."""
    checkpoint = load_checkpoint(run_dir)
    config = copy.deepcopy(checkpoint.config)
    moved = {resolve_key(config, key): value for key, value in (overrides or {}).items()}
    apply_overrides(
        config,
        {
            key: value
            for key, value in moved.items()
            if key in ("ppo.total_timesteps", "run.stop_return", "run.stop_window")
        },
    )
    at_end = checkpoint.iteration >= config.num_iterations // checkpoint.meta.get("world_size", 1)
    return at_end or reached_stop_return(config.run, checkpoint.meta.get("episode_returns", []))


def every_seed_finished(run_dir: str | Path) -> FastPPOError:
    return FastPPOError(
        f"every seed in {run_dir} is finished (its --total-timesteps or --run.stop-return reached): nothing is left to "
        f"train; to train further, give a larger budget: fastppo train --resume {run_dir} --total-timesteps N (or "
        "--stop-return none)"
    )


def check_resumed_env(run_dir: str | Path, own: str, env_id: str | None) -> None:
    """The ENV_ID of ``fastppo train --resume RUN_DIR [ENV_ID]`` must be the run's ``own``, and is
    required when that is user code: fastppo never imports code that a run folder names."""
    if env_id is None:
        folder_env_id(
            own,
            run_dir,
            f"if you trust it, name it yourself: fastppo train --resume {run_dir} {own} (in Python: env_id='{own}')",
        )
    elif not same_env(env_id, own):  # a file env is saved with its absolute path
        raise FastPPOError(
            f"{run_dir} trains {own}, not {env_id}: "
            + (f"give {own}" if names_user_code(own) else "drop ENV_ID when resuming")
        )


def resume_seed_stack_config(
    run_dir: str | Path, overrides: dict[str, Any] | None = None, env_id: str | None = None
) -> tuple[Config, list[int], list[Checkpoint]]:
    """A stack of seeds to resume (``fastppo train --resume RUN_DIR`` on a ``--seeds`` folder): the
    config, the seeds and each seed's checkpoint as ``resume_config`` gives it, at the newest
    iteration every seed reached (a kill during a save can leave some seeds one checkpoint ahead)
    where a seed still has it, else at the seed's newest (``fastppo.experiments.seeds.stacks`` groups the seeds
    into the stacks they were saved from, each at one iteration).
    Seeds that reached --run.stop-return (theirs, or the one ``overrides`` give) left the stack
    finished and stay out."""
    folders = seed_folders(run_dir)
    first = load_checkpoint(folders[0]).config.env
    if first.backend != "tensor":  # trained as separate processes (--workers): each is an ordinary run
        raise FastPPOError(
            f"{run_dir} holds seeds trained one process each ({first.backend} envs): resume each alone, fastppo train "
            f"--resume {run_dir}/seed_<n>"
        )
    # named for the stack, before each seed's resume_config names its own folder
    check_resumed_env(run_dir, first.env_id, env_id)
    folders = [folder for folder in folders if not finished_run(folder, overrides)]
    if not folders:
        raise every_seed_finished(run_dir)
    iteration = min(int(list_checkpoints(d)[-1].name) for d in folders)
    resumed = []
    for folder in folders:
        # A seed a checkpoint ahead (a kill during a save) goes back to where the others stand, so
        # that the stack resumes as one; one without that checkpoint (trained in another process
        # of the run, which stopped later) resumes from its own newest, in a stack of its own.
        at = checkpoint_root(folder) / f"{iteration:06d}"
        resumed.append(
            resume_config(at if at.is_dir() and list_checkpoints(folder)[-1] != at else folder, overrides, env_id)
        )
    config = resumed[0][0]
    for other, _ in resumed[1:]:
        if replace(other, run=replace(other.run, seed=config.run.seed)) != config:
            raise FastPPOError(
                f"the seeds in {run_dir} were trained with different configs: resume each alone (fastppo train "
                f"--resume {run_dir}/seed_<n>)"
            )
    return config, [c.config.run.seed for _, c in resumed], [c for _, c in resumed]
