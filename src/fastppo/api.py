"""The Python API: ``fastppo.train``, ``train_seeds``, ``resume``, ``load``, ``evaluate``, ``record``,
``export_onnx`` and the config builder the CLI shares."""

from __future__ import annotations

import itertools
import signal
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gymnasium as gym

from fastppo.agent import Agent, load_agent
from fastppo.config import Config, EnvConfig, apply_overrides, load_preset, preset_for_env, resolve_key
from fastppo.envs.make import policy_spaces
from fastppo.loading import absolute_spec, file_spec


def make_config(env_id: str | type, preset: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults <- preset (named, or the env's own, or CleanRL's for the action type) <- overrides
    (``resolved_config``, without the preset's name)."""
    return resolved_config(env_id, preset, overrides)[0]


def resolved_config(env_id: str | type, preset: str | None = None, overrides: dict[str, Any] | None = None) -> tuple[Config, str]:
    """The config (defaults <- preset <- overrides) and the preset it used: ``preset``, or the
    env's own, or CleanRL's for the action type.

    ``env_id`` may also be the class of your own env, ``gymnasium.Env`` or ``TensorEnv``; the config
    stores it as ``module:Class``, the name a resumed or evaluated run imports it by (a
    ``file.py:Class`` with the file's absolute path). A ``TensorEnv``, by class or by name, picks
    ``backend="tensor"``.
    """
    from fastppo.envs.tensor import TensorEnv, user_tensor_env

    overrides = dict(overrides or {})
    if isinstance(env_id, type):
        env_class, env_id = env_id, f"{env_id.__module__}:{env_id.__qualname__}"
    else:
        env_id = absolute_spec(env_id)
        env_class = user_tensor_env(env_id)
    if env_class is not None and issubclass(env_class, TensorEnv) and "backend" not in overrides and "env.backend" not in overrides:
        overrides["backend"] = "tensor"
    if preset is None:
        preset = preset_for_env(env_id, continuous=isinstance(action_space(env_id, overrides), gym.spaces.Box))
    config = Config()
    preset_values = load_preset(preset)
    apply_overrides(config, preset_values)
    apply_overrides(config, {"env.env_id": env_id, **overrides})
    given = {resolve_key(config, key) for key in overrides}
    from_preset = {resolve_key(config, key) for key in preset_values} - given
    return config.validate(minibatches_from=f"the {preset} preset's" if "ppo.num_minibatches" in from_preset else None), preset


def action_space(env_id: str, overrides: dict[str, Any]) -> gym.Space:
    """The action space of the env (or of a PettingZoo env's agents) as ``overrides`` build it;
    before ``Config.validate``, so with the default frame stack (it changes no action space)."""
    config = apply_overrides(Config(), {"env.env_id": env_id, **overrides})
    config.env.frame_stack = EnvConfig.frame_stack
    return policy_spaces(config)[1]


def default_run_dir(config: Config, seed: str | None = None) -> Path:
    """runs/<env>__<exp>__<seed>__<timestamp>, CleanRL's naming (``seed``: the --seeds spec of a
    folder of seeds instead of the run's own), with -2, -3, ... after the timestamp where that
    folder exists already (a run of the same name started in the same second): a new run never
    lands in another's folder, which training would refuse."""
    env = config.env.env_id
    if (parts := file_spec(env)) is not None:  # an absolute path: the file's name is name enough
        env = f"{Path(parts[0]).name}:{parts[1]}"
    env = env.replace("/", "_").replace(":", "_")
    name = f"{env}__{config.run.exp_name}__{seed or config.run.seed}__{int(time.time())}"
    candidates = (Path(config.run.run_root) / (name if n == 1 else f"{name}-{n}") for n in itertools.count(1))
    return next(path for path in candidates if not path.exists())


def train(env_id: str | type, *, preset: str | None = None, run_dir: str | Path | None = None, **overrides: Any) -> Agent:
    """Train on ``env_id`` (a gymnasium id, ``module:Class``, or your env class itself) and return
    the agent (``agent.history`` holds the logged metrics).

    Keyword arguments override hyperparameters by name, e.g. ``total_timesteps=100_000, seed=1,
    learning_rate=1e-3`` or ``**{"ppo.clip_coef": 0.1}``. Files are written only if ``run_dir``
    is given; then Ctrl-C or SIGTERM ends training after the current iteration with a checkpoint,
    and the returned agent's ``interrupted_by`` names the signal (None when training finished).
    """
    from fastppo.trainer import few_updates_warning
    from fastppo.trainer import train as run_training

    config = make_config(env_id, preset, overrides)
    if (warning := few_updates_warning(config)) is not None:
        warnings.warn(warning, stacklevel=2)
    return run_training(config, Path(run_dir) if run_dir is not None else None)


def train_seeds(
    env_id: str | type, seeds: Iterable[int] | str, *, preset: str | None = None, run_dir: str | Path | None = None, workers: int | None = None, **overrides: Any
) -> list[Agent]:
    """Train one agent per seed of ``seeds`` (``range(1, 11)``, or ``"1-10"`` as ``--seeds`` takes
    it) with the same config, as ``fastppo train ENV --seeds ...`` does, and return the agents in
    seed order. ``workers`` processes train them (default: one per CPU core, at most one per seed;
    one for a stack on a GPU); on tensor envs each trains its share of the seeds as one batched
    computation (fastppo.seed_stack), in this process when there is one share. Each seed's run goes
    to ``run_dir/seed_<n>`` (default ``runs/<env>__<exp>__<seeds>__<time>``), which ``fastppo
    report``, ``eval`` and ``plot`` read. Each agent is read back from its folder: its ``history``
    from metrics.jsonl, its ``episode_returns`` the last 100 its final checkpoint keeps. A seed that
    fails is a FastPPOError naming it, once the others have finished. A signal stops the job: the
    agents (``interrupted_by`` set) are those of the seeds it had started."""
    from fastppo.checkpoint import load_checkpoint
    from fastppo.errors import FastPPOError
    from fastppo.plot import read_run
    from fastppo.seeds import plan_seeds
    from fastppo.seeds import train_seeds as train_in_processes

    results, stopped = train_in_processes(*plan_seeds(env_id, seeds, preset, run_dir, workers, overrides))
    failed = [r for r in results if r.error]
    if failed:
        raise FastPPOError(f"{len(failed)} of {len(results)} seeds failed; seed {failed[0].seed}: {failed[0].error}")
    agents = []
    for result in (r for r in results if r.started):  # a stopped job: the seeds it did not reach are left out
        agent = load_agent(result.run_dir)
        agent.from_folder = False  # written just now, from the env the caller named
        agent.history = read_run(result.run_dir).records
        agent.episode_returns = list(load_checkpoint(result.run_dir).meta.get("episode_returns", []))
        agent.interrupted_by = stopped and signal.Signals(stopped)
        agents.append(agent)
    return agents


def resume(run_dir: str | Path, env_id: str | None = None, **overrides: Any) -> Agent:
    """Continue the run in ``run_dir`` from its newest checkpoint, with its saved config.

    Only ``total_timesteps`` and the output settings (``progress``, ``tensorboard``,
    ``checkpoint_every``, ``keep_checkpoints``, ``torch_threads``, ``collective_timeout``) may be overridden. A run trained
    on your own code (``module:Class``, ``file.py:Class``) needs ``env_id`` naming it: fastppo
    never imports code that a run folder names.
    """
    from fastppo.training.resume import resume_config
    from fastppo.trainer import train as run_training

    config, checkpoint = resume_config(run_dir, overrides, env_id)
    return run_training(config, Path(run_dir), checkpoint)


def load(run_dir: str | Path, device: str = "cpu", env_id: str | None = None) -> Agent:
    """The agent saved in a run directory (its final agent, else its newest checkpoint), or in a
    checkpoint folder (``RUN_DIR/checkpoints/000050``). Only data is read, no code the folder names
    is imported: the policy's spaces are stored in it. ``env_id`` is needed only by a folder saved
    before they were, trained on your own code: the env to rebuild them from."""
    return load_agent(run_dir, device, env_id)


def evaluate(agent: Agent | str | Path, env_id: str | None = None, episodes: int = 10, deterministic: bool = False, seed: int | None = None):
    """Play ``episodes`` episodes (default env: the agent's own; a run folder trained on your own
    code needs ``env_id`` naming it) with frozen observation statistics; returns an ``EvalResult``
    (returns, lengths, mean_return, std_return, mean_length, std_length; a multi-agent env's
    group_returns and mean_group_returns, its mean_return None without a headline:
    --multi-agent.headline)."""
    from fastppo.evaluation import evaluate as run_evaluation

    return run_evaluation(agent, env_id, episodes, deterministic, seed)


def record(agent: Agent | str | Path, out: str | Path, episodes: int = 1, deterministic: bool = True, seed: int | None = None, env_id: str | None = None) -> Path:
    """Render ``episodes`` episodes to the MP4 file ``out`` (needs the ``video`` extra); ``env_id``
    as for ``evaluate``."""
    from fastppo.evaluation import record as run_recording

    return run_recording(agent, out, episodes, env_id=env_id, deterministic=deterministic, seed=seed)[0]


def export_onnx(agent: Agent | str | Path, path: str | Path) -> Path:
    """Write the deterministic policy, observation normalisation included, to ONNX (``export`` extra)."""
    from fastppo.export import export_onnx as run_export

    return run_export(agent, path)
