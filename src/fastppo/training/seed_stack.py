"""Many seeds of one config trained in one process as one batched computation (PureJaxRL's idea,
in PyTorch): ``fastppo train CartPole-v1 --backend tensor --seeds 1-64``.

The seeds enter the ordinary trainer as data. Their envs are rows of one tensor env, seed-major
(seed s owns rows ``s*N .. s*N+N-1``), each seed's block drawing its resets from its own
generator; their policies are one ``StackedActorCritic`` (``policies.population``: the one
``ActorCritic`` definition vmapped over views of one ``[seeds, P]`` parameter); the update shuffles
each seed's rows (a recurrent stack: its env sequences) with that seed's generator and reduces the
loss along the seed axis (``core`` functions' ``dim=-1``), so the gradient of seed s is the
gradient its single run would take, the gradient clip is per seed and Adam, being elementwise, is
per seed too. Observation and reward statistics are per seed (``RunningMeanStd(groups=seeds)``).

What a seed draws, and in which order, is what its single run draws: the initial weights come from
``torch.manual_seed(seed)`` as in a single run, after which each seed's generator takes over the
role of torch's global one (action sampling, minibatch permutations), and its envs' generator is
seeded as the single run's. A stacked seed therefore follows its single run exactly but for
float rounding: a batched matmul sums in another order than the single run's fused forward, and
after many updates a last-bit difference can flip a sampled action, from where the two runs are
different samples of the same distribution (tests/training/test_seed_stack.py compares a short budget).

Each seed is saved as an ordinary run in ``RUN_DIR/seed_<n>`` (metrics.jsonl, TensorBoard, the
final agent), which ``fastppo eval``, ``plot``, ``report`` and ``fastppo.load`` read as any run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import torch
from torch import Tensor, nn

from fastppo.agents.agent import Agent
from fastppo.config import Config
from fastppo.core.normalize import RunningMeanStd
from fastppo.envs.tensor import TensorEnv
from fastppo.envs.vector import Episodes
from fastppo.errors import FastPPOError
from fastppo.policies import ActorCritic
from fastppo.policies.population import SeedNoise, StackedActorCritic, seed_policy
from fastppo.training.distributed import LONE, World
from fastppo.training.optim import DEVICES, FusedAdam
from fastppo.training.rollout import EnvCursor
from fastppo.training.state import TrainState


class SeedMinibatches:
    """The update's minibatches for a stack of seeds, from each seed's rows ``[S, R, ...]``
    (``RolloutBuffer.batch(S)``), or a recurrent stack's env sequences ``[S, T, N, ...]``.

    Each seed does what its single run's update does: keep its valid rows (its reset rows out),
    shuffle them with its own generator (not at all for one minibatch), and cut them into
    minibatches whose sizes differ by at most one. Seeds have different numbers of reset rows, so
    minibatch i of each seed is padded to the longest and ``valid`` marks the real rows; the
    loss's per-seed masked means are then each seed's plain means. Sequences are cut by env, all T
    rows of each (time-major), reset rows kept and masked, as in a single run: every seed has N
    envs, so no padding.
    """

    world: World = LONE  # a stack trains in one process

    def __init__(self, batch: dict[str, Tensor], noise: SeedNoise, num_minibatches: int):
        self.noise, self.num_minibatches = noise, num_minibatches
        self.runs = batch["valid"].shape[0]
        self.sequences = "initial_state" in batch
        valid = batch["valid"]
        device = valid.device
        self.seed_index = torch.arange(valid.shape[0], device=device).unsqueeze(1)
        if self.sequences:
            self.batch = batch
            self.envs = valid.shape[2]
            self.rows = [torch.arange(self.envs, device=device)] * valid.shape[0]  # each seed's envs, in order
            return
        # Each field flat, [S * R, ...]: a minibatch is one index_select of its rows, about half
        # the time of indexing [S, R, ...] by (seed, row) pairs.
        self.batch = {k: v.flatten(0, 1) for k, v in batch.items() if k != "valid"}
        self.first_rows = self.seed_index * valid.shape[1]  # [S, 1]: where each seed's rows start
        counts = valid.sum(1).tolist()  # the update's one host sync
        self.rows = valid.nonzero()[:, 1].split(counts)  # each seed's valid rows, in order
        # Each seed's minibatch bounds (its valid rows cut as its single run cuts them), the same every epoch.
        self.bounds = torch.tensor(
            [[count * i // num_minibatches for i in range(num_minibatches + 1)] for count in counts], device=device
        )
        self.sizes = self.bounds[:, 1:] - self.bounds[:, :-1]
        self.steps = torch.arange(int(self.sizes.max()), device=device)

    def epoch(self, active: list[bool] | None = None) -> Iterator[tuple[dict[str, Tensor], None]]:
        """One epoch's minibatches; a seed not ``active`` (its epochs stopped: ``update.ppo_update``)
        draws no permutation, as its single run, which has left the loop, draws none."""
        shuffle = self.num_minibatches > 1  # one minibatch: no permutation drawn, as in a single run
        orders = [
            rows[self.noise.randperm(len(rows), s, rows.device)] if shuffle and (active is None or active[s]) else rows
            for s, rows in enumerate(self.rows)
        ]
        return ((mb, None) for mb in self._cut(orders))

    def in_order(self) -> Iterator[dict[str, Tensor]]:
        """The minibatches of each seed's valid rows (or envs) in rollout order (``update.kl_after_update``)."""
        return self._cut(self.rows)

    def across_ranks(self, value: Tensor, share: object) -> Tensor:
        """``value`` as it is: a stack has no other ranks (``share`` is always None)."""
        return value

    def one_per_run(self, values: list[float]) -> list[float]:
        return values

    def _cut(self, orders: list[Tensor]) -> Iterator[dict[str, Tensor]]:
        if self.sequences:
            yield from self._cut_envs(torch.stack(orders))
            return
        padded = nn.utils.rnn.pad_sequence(orders, batch_first=True)  # [S, most valid rows]
        for i in range(self.num_minibatches):
            positions = (self.bounds[:, i : i + 1] + self.steps).clamp(
                max=padded.shape[1] - 1
            )  # [S, longest minibatch]
            index = (padded.gather(1, positions) + self.first_rows).flatten()
            mb = {k: v.index_select(0, index).unflatten(0, positions.shape) for k, v in self.batch.items()}
            mb["valid"] = self.steps < self.sizes[:, i : i + 1]
            yield mb

    def _cut_envs(self, orders: Tensor) -> Iterator[dict[str, Tensor]]:
        """Minibatches of the envs ``orders`` [S, N] lists: each seed's sequences flattened
        time-major (row t * B + b, as ``update.minibatch`` does for a single run)."""
        bounds = [self.envs * i // self.num_minibatches for i in range(self.num_minibatches + 1)]
        for start, end in zip(bounds[:-1], bounds[1:]):
            if start < end:
                index = orders[:, start:end]  # [S, B]
                # v[seeds, :, envs] puts the indexed dims first: [S, B, T, ...] -> [S, T * B, ...]
                yield {
                    k: v[self.seed_index, index]
                    if k == "initial_state"
                    else v[self.seed_index, :, index].transpose(1, 2).flatten(1, 2)
                    for k, v in self.batch.items()
                }


# --- the trainer's side: build, split and save a stack -------------------------------------------


def check_seed_stack(config: Config) -> None:
    """What a stack of seeds cannot do, as one-line errors (each with the way out: one run per
    seed, on another backend; the policy's own limits are ``StackedActorCritic``'s).
    ``--target-kl`` and ``--objective kl`` work: each seed stops its epochs where its single run
    would (``update.ppo_update``, ``optim.FusedAdam``'s members) and adapts its own beta (the trainer's ``kl_beta``,
    one per seed, in each seed's checkpoints)."""
    refused = {
        "--backend tensor (the seeds' envs are rows of one tensor env)": config.env.backend != "tensor",
        "no --cudagraphs": config.run.cudagraphs,
        f"--device {', '.join(DEVICES)} or auto (each seed's Adam is torch's fused kernel)": config.run.device.split(
            ":"
        )[0]
        not in (*DEVICES, "auto"),
    }
    for need, broken in refused.items():
        if broken:
            raise FastPPOError(
                f"--seeds on tensor envs trains stacks of seeds, which need {need}: change that, or train one run per "
                "seed on another --backend (sync, async)"
            )


def stacked_agent(
    config: Config, observation_space: gym.Space, action_space: gym.Space, device: torch.device, seeds: list[int]
) -> Agent:
    """An Agent whose policy is the stack of each seed's single-run initial policy, with per-seed
    observation statistics."""
    assert isinstance(observation_space, gym.spaces.Box)  # a tensor env's observations
    policies, generators = zip(*(seed_policy(config, seed, observation_space, action_space, device) for seed in seeds))
    shape = observation_space.shape
    obs_rms = RunningMeanStd(shape, device, groups=len(seeds)) if config.env.normalize_obs else None
    return Agent(
        policy=StackedActorCritic(list(policies), list(generators)),
        config=config,
        observation_space=observation_space,
        action_space=action_space,
        obs_rms=obs_rms,
    )


def per_seed(values: dict[str, list[float] | float], seeds: int) -> list[dict[str, float]]:
    """Per-seed lists (``ppo_update``'s losses, a stack's ``kl_beta``) as one dict per seed (shared
    scalars repeated; a single run's plain dict is ``seeds=1``)."""
    return [
        {name: value[i] if isinstance(value, list) else value for name, value in values.items()} for i in range(seeds)
    ]


def episodes_by_seed(episodes: Episodes, members: int, envs_per_seed: int) -> list[Episodes]:
    """The finished episodes of each member of a population (by the env row they ran in); a
    population of one owns them all, as they are."""
    if members == 1:
        return [episodes]
    split: list[Episodes] = [Episodes([], []) for _ in range(members)]
    for ret, length, row in zip(episodes.returns, episodes.lengths, episodes.rows or []):
        part = split[row // envs_per_seed]
        part.returns.append(ret)
        part.lengths.append(length)
    return split


def seed_agent(
    stack: Agent,
    index: int,
    directory: Path,
    history: list[dict[str, float]],
    episode_returns: list[float],
    policy: ActorCritic | None = None,
) -> Agent:
    """Seed ``index`` of a stack as an ordinary Agent (a copy of its policy, written into
    ``policy`` if given, and of its observation statistics), with its run folder ``directory``."""
    assert isinstance(stack.policy, StackedActorCritic)
    obs_rms = None
    if stack.obs_rms is not None:
        counts = stack.obs_rms.count
        assert isinstance(counts, Tensor)  # a stack's statistics: one count per seed
        obs_rms = RunningMeanStd(stack.obs_shape, stack.device)
        obs_rms.load_state_dict(
            {"mean": stack.obs_rms.mean[index], "var": stack.obs_rms.var[index], "count": counts[index]}
        )
    seed = int(directory.name.removeprefix("seed_"))
    config = replace(stack.config, run=replace(stack.config.run, seed=seed))
    agent = Agent(
        policy=stack.policy.unstack(index, policy),
        config=config,
        observation_space=stack.observation_space,
        action_space=stack.action_space,
        obs_rms=obs_rms,
        history=history,
        run_dir=directory,
    )
    agent.episode_returns = list(episode_returns)
    agent.action_masks = stack.action_masks
    return agent


def save_seed_agent(
    stack: Agent, index: int, directory: Path, history: list[dict[str, float]], episode_returns: list[float]
) -> Agent:
    """``seed_agent``, saved into ``directory``: fastppo eval/plot/load read it as any run."""
    agent = seed_agent(stack, index, directory, history, episode_returns)
    agent.save(directory)
    return agent


def keep_seeds(state: TrainState, envs: TensorEnv, indices: list[int]) -> None:
    """Shrink a stack in place to the seeds at ``indices`` (in that order), at an iteration
    boundary: their weights, Adam state, generators, statistics, env rows, cursor rows and
    kl_betas, so that each goes on as it would have in the whole stack (nothing of a seed depends on
    the others) but for float rounding: the update's minibatches are padded to the longest seed's,
    and a sum over another padded length can round another way, as between a stack and its single
    runs (module docstring). The trainer rebuilds what holds the old parameter (its buffer and steps)."""
    from fastppo.training.optim import flatten_parameters

    stack, optimizer, kl_betas = state.agent.policy, state.optimizer, state.kl_beta
    assert isinstance(stack, StackedActorCritic) and isinstance(optimizer, FusedAdam) and isinstance(kl_betas, list)
    seeds = stack.seeds
    stack.keep(indices)
    optimizer.keep(indices, flatten_parameters(stack))
    for statistics in (state.agent.obs_rms, state.reward_scaler):
        if statistics is not None:
            statistics.keep_groups(indices)
    envs.keep_seed_blocks(indices)
    # Each seed's rows are a block: viewed [seeds, rows per seed, ...], the kept blocks in order.
    state.cursor = _cursor_rows(state.cursor, lambda t: t.unflatten(0, (seeds, -1))[indices].flatten(0, 1))
    state.kl_beta = [kl_betas[i] for i in indices]


def _cursor_rows(cursor: EnvCursor, pick: Callable[[Tensor], Tensor]) -> EnvCursor:
    """The cursor of the rows ``pick`` takes from each of ``cursor``'s tensors (a stack's cursor:
    no decisions open)."""
    mask, state = cursor.action_mask, cursor.state
    return EnvCursor(
        pick(cursor.obs),
        None if mask is None else pick(mask),
        pick(cursor.valid),
        None if state is None else pick(state),
    )
