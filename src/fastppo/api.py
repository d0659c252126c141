"""The Python API: ``fastppo.train``, ``train_seeds``, ``resume``, ``load``, ``evaluate``, ``record``,
``export_onnx`` and the config builder the CLI shares."""

from __future__ import annotations

import signal
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastppo.agents.agent import Agent, load_agent
from fastppo.envs.env_config import make_config
from fastppo.errors import FastPPOError
from fastppo.games.players import Player

if TYPE_CHECKING:  # annotations only: like the trainer, evaluation is imported when called
    from fastppo.agents.evaluation import EvalResult
    from fastppo.games.matches import GameResults


def train(
    env_id: str | type, *, preset: str | None = None, run_dir: str | Path | None = None, **overrides: Any
) -> Agent:
    """Train on ``env_id`` (a gymnasium id, ``module:Class``, or your env class itself) and return
    the agent (``agent.history`` holds the logged metrics).

    Keyword arguments override hyperparameters by name, e.g. ``total_timesteps=100_000, seed=1,
    learning_rate=1e-3`` or ``**{"ppo.clip_coef": 0.1}``. Files are written only if ``run_dir``
    is given; then Ctrl-C or SIGTERM ends training after the current iteration with a checkpoint,
    and the returned agent's ``interrupted_by`` names the signal (None when training finished).
    """
    from fastppo.training.trainer import few_updates_warning
    from fastppo.training.trainer import train as run_training

    config = make_config(env_id, preset, overrides)
    if (warning := few_updates_warning(config)) is not None:
        warnings.warn(warning, stacklevel=2)
    return run_training(config, Path(run_dir) if run_dir is not None else None)


def train_seeds(
    env_id: str | type,
    seeds: Iterable[int] | str,
    *,
    preset: str | None = None,
    run_dir: str | Path | None = None,
    workers: int | None = None,
    **overrides: Any,
) -> list[Agent]:
    """Train one agent per seed of ``seeds`` (``range(1, 11)``, or ``"1-10"`` as ``--seeds`` takes
    it) with the same config, as ``fastppo train ENV --seeds ...`` does, and return the agents in
    the order ``seeds`` gives them. ``workers`` processes train them (default: one per CPU core, at most one per seed;
    one for a stack on a GPU); on tensor envs each trains its share of the seeds as one batched
    computation (fastppo.training.seed_stack), in this process when there is one share. Each seed's run goes
    to ``run_dir/seed_<n>`` (default ``runs/<env>__<exp>__<seeds>__<time>``), which ``fastppo
    report``, ``eval`` and ``plot`` read. Each agent is read back from its folder: its ``history``
    from metrics.jsonl, its ``episode_returns`` the last 100 its final checkpoint keeps. A seed that
    fails is a FastPPOError naming it, once the others have finished. A signal stops the job: the
    agents (``interrupted_by`` set) are those of the seeds it had started."""
    from fastppo.errors import FastPPOError
    from fastppo.experiments.plot import read_run
    from fastppo.experiments.seeds import plan_seeds
    from fastppo.experiments.seeds import train_seeds as train_in_processes
    from fastppo.training.checkpoint import load_checkpoint

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
        agent.interrupted_by = signal.Signals(stopped) if stopped else None
        agents.append(agent)
    return agents


def resume(run_dir: str | Path, env_id: str | None = None, **overrides: Any) -> Agent:
    """Continue the run in ``run_dir`` from its newest checkpoint, with its saved config (a run
    that stopped before its first checkpoint starts over with it).

    Only ``total_timesteps`` and the output settings (``progress``, ``tensorboard``,
    ``checkpoint_every``, ``keep_checkpoints``, ``torch_threads``, ``collective_timeout``) may be overridden, and
    ``backend`` between sync, async, envpool and ale (the envs then restart fresh episodes). A run trained
    on your own code (``module:Class``, ``file.py:Class``) needs ``env_id`` naming it: fastppo
    never imports code that a run folder names.
    """
    from fastppo.training.resume import restart_config, resume_config
    from fastppo.training.trainer import train as run_training

    config = restart_config(run_dir, overrides, env_id)
    if config is not None:
        return run_training(config, Path(run_dir), start_over=True)
    config, checkpoint = resume_config(run_dir, overrides, env_id)
    return run_training(config, Path(run_dir), checkpoint)


def load(run_dir: str | Path, device: str = "cpu", env_id: str | None = None) -> Agent:
    """The agent saved in a run directory (its final agent, else its newest checkpoint), or in a
    checkpoint folder (``RUN_DIR/checkpoints/000050``). Only data is read, no code the folder names
    is imported: the policy's spaces are stored in it. ``env_id`` is needed only by a folder saved
    before they were, trained on your own code: the env to rebuild them from."""
    return load_agent(run_dir, device, env_id)


def evaluate(
    agent: Agent | str | Path,
    env_id: str | None = None,
    episodes: int | None = None,
    deterministic: bool | None = None,
    seed: int | None = None,
    opponent: str | Player | None = None,
    games: int | None = None,
    search: int = 0,
) -> EvalResult | GameResults:
    """Play ``episodes`` episodes (default 10; default env: the agent's own; a run folder trained
    on your own code needs ``env_id`` naming it) with frozen observation statistics, sampling
    actions unless ``deterministic``; returns an ``EvalResult`` (returns, lengths, mean_return,
    std_return, mean_length, std_length; a multi-agent env's group_returns and
    mean_group_returns, its mean_return None without a headline: --multi-agent.headline).

    An agent of a turn-based game plays ``games`` games (default 100) against ``opponent``
    (``"random"`` by default, ``"mcts:N"``, ``"minimax"``, a run folder, or a ``Player``),
    seats swapped, its most likely move unless ``deterministic=False`` (with ``search`` N > 0:
    the most visited move of N simulations of tree search guided by its policy and value,
    ``fastppo.games.search``); returns a
    ``GameResults`` (wins, draws, losses per seat: ``seats``, ``total``, ``win_rate``,
    ``table()``, ``to_dict()``)."""
    from fastppo.agents.evaluation import evaluate_episodes, played_env
    from fastppo.games.game_env import names_game
    from fastppo.games.matches import evaluate_games

    agent, env_id = played_env(agent, env_id, "eval")
    if names_game(env_id, agent.config.env.env_kwargs):
        if episodes is not None:
            raise FastPPOError(
                f"{env_id} is a turn-based game: count its games with --games N (default 100), not --episodes"
            )
        return evaluate_games(
            agent,
            env_id,
            "random" if opponent is None else opponent,
            100 if games is None else games,
            deterministic is not False,
            seed,
            search,
        )
    if opponent is not None or games is not None or search:
        raise FastPPOError(
            f"--opponent, --games and --search play turn-based games, and {env_id} is not one (a PettingZoo AECEnv "
            "such as pz:pettingzoo.classic.tictactoe_v3): count episodes with --episodes"
        )
    return evaluate_episodes(agent, env_id, 10 if episodes is None else episodes, bool(deterministic), seed)


def record(
    agent: Agent | str | Path,
    out: str | Path,
    episodes: int = 1,
    deterministic: bool = True,
    seed: int | None = None,
    env_id: str | None = None,
) -> Path:
    """Render ``episodes`` episodes to the MP4 file ``out`` (needs the ``video`` extra); ``env_id``
    as for ``evaluate``."""
    from fastppo.agents.evaluation import record as run_recording

    return run_recording(agent, out, episodes, env_id=env_id, deterministic=deterministic, seed=seed)[0]


def export_onnx(agent: Agent | str | Path, path: str | Path) -> Path:
    """Write the deterministic policy, observation normalisation included, to ONNX (``export`` extra)."""
    from fastppo.agents.export import export_onnx as run_export

    return run_export(agent, path)
