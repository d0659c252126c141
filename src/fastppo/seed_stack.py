"""Many seeds of one config trained in one process as one batched computation (PureJaxRL's idea,
in PyTorch): ``fastppo train CartPole-v1 --backend tensor --seeds 1-64``.

The seeds enter the ordinary trainer as data. Their envs are rows of one tensor env, seed-major
(seed s owns rows ``s*N .. s*N+N-1``), each seed's block drawing its resets from its own
generator; their policies are one ``StackedActorCritic`` whose weights are one ``[seeds, P]``
parameter, each MLP layer a batched matmul over the seeds; the update shuffles each seed's rows
with that seed's generator and reduces the loss along the seed axis (``core`` functions'
``dim=-1``), so the gradient of seed s is the gradient its single run would take, the gradient
clip is per seed and Adam, being elementwise, is per seed too. Observation and reward statistics
are per seed (``RunningMeanStd(groups=seeds)``).

What a seed draws, and in which order, is what its single run draws: the initial weights come from
``torch.manual_seed(seed)`` as in a single run, after which each seed's generator takes over the
role of torch's global one (action sampling, minibatch permutations), and its envs' generator is
seeded as the single run's. A stacked seed therefore follows its single run exactly but for
float rounding: a batched matmul sums in another order than the single run's fused forward, and
after many updates a last-bit difference can flip a sampled action, from where the two runs are
different samples of the same distribution (tests/test_seed_stack.py compares a short budget).

Each seed is saved as an ordinary run in ``RUN_DIR/seed_<n>`` (metrics.jsonl, TensorBoard, the
final agent), which ``fastppo eval``, ``plot``, ``report`` and ``fastppo.load`` read as any run.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from fastppo.agent import Agent
from fastppo.config import Config
from fastppo.core.normalize import RewardScaler, RunningMeanStd
from fastppo.envs.vector import Episodes
from fastppo.errors import FastPPOError
from fastppo.logger import RunLogger
from fastppo.optim import DEVICES, FusedAdam, adam_step
from fastppo.policies import ActorCritic
from fastppo.policies.activations import ACTIVATIONS
from fastppo.policies.distributions import GaussianHead, Noise
from fastppo.policies.mlp_autograd import mlp_layers


class SeedNoise(Noise):
    """The heads' draws for a ``[seeds, ...]`` tensor, block s from seed s's generator (the
    draws seed s's single run makes from torch's global generator), and each seed's permutations."""

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators

    def _draw(self, like: Tensor, fill: str) -> Tensor:
        """A tensor like ``like`` whose block s is filled in place by ``fill`` from generator s."""
        out = torch.empty_like(like)
        for block, generator in zip(out, self.generators):
            getattr(block, fill)(generator=generator)
        return out

    def exponential(self, like: Tensor) -> Tensor:
        return self._draw(like, "exponential_")

    def normal(self, like: Tensor) -> Tensor:
        return self._draw(like, "normal_")

    def uniform(self, like: Tensor) -> Tensor:
        return self._draw(like, "uniform_")

    def randperm(self, n: int, seed_index: int, device: torch.device) -> Tensor:
        return torch.randperm(n, generator=self.generators[seed_index], device=device)


def seed_policy(config: Config, seed: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device) -> tuple[ActorCritic, torch.Generator]:
    """The policy a single run of ``seed`` starts with, and a generator standing where torch's
    global one stands in that run once the policy is built."""
    torch.manual_seed(seed)
    policy = ActorCritic(observation_space, action_space, config.policy).to(device)
    generator = torch.Generator(device=device)
    if device.type == "cpu":
        generator.set_state(torch.get_rng_state())  # after the initialisation's draws
    else:
        generator.manual_seed(seed)  # a single run's device generator: seeded, nothing drawn yet
    return policy, generator


class StackedActorCritic(nn.Module):
    """S MLP actor-critics (separate actor and critic trunks, or one shared trunk under both heads)
    as one module of batched matmuls.

    Takes rows seed-major, flat (``[S * n, ...]``, the rollout's env rows) or stacked
    (``[S, n, ...]``, the update's minibatches), and returns per-row outputs of the same layout.
    All weights are views of one ``[S, P]`` parameter, seed s's row holding its policy's
    parameters in ``ActorCritic.parameters()`` order (so ``unstack`` can rebuild it).
    """

    recurrent = False
    state_size = 0

    def __init__(self, policies: list[ActorCritic], generators: list[torch.Generator]):
        super().__init__()
        base = policies[0]
        actor, critic = mlp_layers(base.actor_encoder), mlp_layers(base.critic_encoder)
        if base.recurrent or actor is None or critic is None or actor[1] != critic[1]:
            raise FastPPOError("--seeds on one process stacks MLP policies without memory: drop --policy.memory, or add --workers K")
        self.seeds = len(policies)
        self._activation = ACTIVATIONS[actor[1]]() if actor[1] else None
        self._shapes = {name: p.shape for name, p in base.named_parameters()}
        names = {id(p): name for name, p in base.named_parameters()}

        def layers(modules: list[nn.Linear]) -> list[tuple[str, str]]:
            return [(names[id(m.weight)], names[id(m.bias)]) for m in modules]

        # A shared trunk runs once and feeds both heads; separate trunks are part of each head's MLP.
        self._trunk = layers(actor[0]) if base.shared_trunk else []
        self._actor = layers([*([] if base.shared_trunk else actor[0]), base.action_head.linear])
        self._critic = layers([*([] if base.shared_trunk else critic[0]), base.value_head])
        self.flat = nn.Parameter(torch.stack([torch.cat([p.detach().reshape(-1) for p in policy.parameters()]) for policy in policies]))
        # The head's math (sampling, log-probs) on [S, n, ...] parameters; its weights live in
        # ``flat``. A plain attribute: the stack's only parameter is ``flat``.
        head = copy.deepcopy(base.action_head)
        head.linear = None
        if isinstance(head, GaussianHead):
            del head.log_std  # bound to this seed stack's view at each use (_head)
        object.__setattr__(self, "action_head", head)
        object.__setattr__(self, "_template", base)
        self.noise = SeedNoise(generators)

    def _views(self) -> dict[str, Tensor]:
        """Each parameter of the seeds' policies as a ``[S, *shape]`` view of ``flat``, from one
        split: its backward writes the gradient of ``flat`` in one concatenation, where a slice per
        parameter would each backpropagate a zero-filled ``[S, P]`` gradient, summed one by one
        (64-seed CartPole update on one core: 0.68-0.72 -> 0.64-0.65 s per iteration)."""
        parts = self.flat.split([math.prod(shape) for shape in self._shapes.values()], dim=1)
        return {name: part.view(self.seeds, *shape) for (name, shape), part in zip(self._shapes.items(), parts)}

    def _head(self, views: dict[str, Tensor]):
        if isinstance(self.action_head, GaussianHead):
            self.action_head.log_std = views["action_head.log_std"].unsqueeze(1)  # [S, 1, A]: broadcasts over rows
        return self.action_head

    def _mlp(self, x: Tensor, layers: list[tuple[str, str]], views: dict[str, Tensor], activate_last: bool = False) -> Tensor:
        for depth, (weight, bias) in enumerate(layers):
            x = torch.baddbmm(views[bias].unsqueeze(1), x, views[weight].transpose(1, 2))
            if activate_last or depth < len(layers) - 1:
                x = self._activation(x)
        return x

    def _features(self, obs: Tensor, views: dict[str, Tensor]) -> Tensor:
        """The heads' input for stacked ``obs``: the observation, or the shared trunk's output."""
        return self._mlp(obs.flatten(2).float(), self._trunk, views, activate_last=True)

    def forward(self, obs: Tensor, views: dict[str, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """(distribution parameters [S, n, ...], value [S, n]) for stacked ``obs`` [S, n, ...]."""
        views = self._views() if views is None else views
        x = self._features(obs, views)
        return self._mlp(x, self._actor, views), self._mlp(x, self._critic, views).squeeze(-1)

    def act(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The rollout step on flat rows: (action, logprob, value) per row."""
        stacked = obs.view(self.seeds, -1, *obs.shape[1:])
        views = self._views()
        params, value = self(stacked, views)
        mask = None if action_mask is None else action_mask.view(self.seeds, -1, *action_mask.shape[1:])
        action, logprob = self._head(views).sample(params, mask, self.noise)
        return action.flatten(0, 1), logprob.flatten(0, 1), value.flatten(0, 1)

    def get_value(self, obs: Tensor, state: Tensor | None = None) -> Tensor:
        views = self._views()
        x = self._features(obs.view(self.seeds, -1, *obs.shape[1:]), views)
        return self._mlp(x, self._critic, views).squeeze(-1).flatten(0, 1)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None, state: Tensor | None = None, keep: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The update's forward on stacked minibatch rows ``[S, n, ...]``: (logprob, entropy, value), each ``[S, n]``."""
        views = self._views()
        params, value = self(obs, views)
        logprob, entropy = self._head(views).logprob_entropy(params, action, action_mask)
        return logprob, entropy, value

    def initial_state(self, batch_size: int) -> None:
        return None

    @torch.no_grad()
    def unstack(self, index: int) -> ActorCritic:
        """Seed ``index``'s policy as an ordinary ``ActorCritic`` (a copy of its current weights)."""
        policy, views = copy.deepcopy(self._template), self._views()
        for name, p in policy.named_parameters():
            p.copy_(views[name][index])
        return policy


class SeedMinibatches:
    """The update's minibatches for a stack of seeds, from each seed's rows ``[S, R, ...]``
    (``RolloutBuffer.batch(seeds=S)``).

    Each seed does what its single run's update does: keep its valid rows (its reset rows out),
    shuffle them with its own generator (not at all for one minibatch), and cut them into
    minibatches whose sizes differ by at most one. Seeds have different numbers of reset rows, so
    minibatch i of each seed is padded to the longest and ``valid`` marks the real rows; the
    loss's per-seed masked means are then each seed's plain means.
    """

    def __init__(self, batch: dict[str, Tensor], noise: SeedNoise, num_minibatches: int):
        self.batch = {k: v for k, v in batch.items() if k != "valid"}
        self.noise, self.num_minibatches = noise, num_minibatches
        valid = batch["valid"]
        device = valid.device
        counts = valid.sum(1).tolist()  # the update's one host sync
        self.rows = valid.nonzero()[:, 1].split(counts)  # each seed's valid rows, in order
        # Each seed's minibatch bounds (its valid rows cut as its single run cuts them), the same every epoch.
        self.bounds = torch.tensor([[count * i // num_minibatches for i in range(num_minibatches + 1)] for count in counts], device=device)
        self.sizes = self.bounds[:, 1:] - self.bounds[:, :-1]
        self.steps = torch.arange(int(self.sizes.max()), device=device)
        self.seed_index = torch.arange(len(counts), device=device).unsqueeze(1)

    def epoch(self, active: list[bool] | None = None) -> Iterator[tuple[dict[str, Tensor], None]]:
        """One epoch's minibatches; a seed not ``active`` (its epochs stopped: ``update.ppo_update``)
        draws no permutation, as its single run, which has left the loop, draws none."""
        shuffle = self.num_minibatches > 1  # one minibatch: no permutation drawn, as in a single run
        orders = [
            rows[self.noise.randperm(len(rows), s, rows.device)] if shuffle and (active is None or active[s]) else rows for s, rows in enumerate(self.rows)
        ]
        return ((mb, None) for mb in self._cut(orders))

    def in_order(self) -> Iterator[dict[str, Tensor]]:
        """The minibatches of each seed's valid rows in rollout order (``update.kl_after_update``)."""
        return self._cut(self.rows)

    def _cut(self, orders: list[Tensor]) -> Iterator[dict[str, Tensor]]:
        padded = nn.utils.rnn.pad_sequence(orders, batch_first=True)  # [S, most valid rows]
        for i in range(self.num_minibatches):
            positions = (self.bounds[:, i : i + 1] + self.steps).clamp(max=padded.shape[1] - 1)  # [S, longest minibatch]
            index = padded.gather(1, positions)
            mb = {k: v[self.seed_index, index] for k, v in self.batch.items()}
            mb["valid"] = self.steps < self.sizes[:, i : i + 1]
            yield mb


# --- the trainer's side: build, split and save a stack -------------------------------------------


def check_seed_stack(config: Config) -> None:
    """What a stack of seeds cannot do, as one-line errors (each has the --workers way out; the
    policy's own limits are ``StackedActorCritic``'s). ``--target-kl`` and ``--objective kl`` work:
    each seed stops its epochs where its single run would (``update.ppo_update``, ``SeedAdam``) and
    adapts its own beta (the trainer's ``kl_beta``, one per seed, in each seed's checkpoints)."""
    refused = {
        "--backend tensor (the seeds' envs are rows of one tensor env)": config.env.backend != "tensor",
        "no --cudagraphs": config.run.cudagraphs,
        f"--device {', '.join(DEVICES)} or auto (each seed's Adam is torch's fused kernel)": config.run.device.split(":")[0] not in (*DEVICES, "auto"),
    }
    for need, broken in refused.items():
        if broken:
            raise FastPPOError(f"--seeds in one process needs {need}: change that, or add --workers K to train the seeds as separate processes")


def stacked_agent(config: Config, observation_space: gym.Space, action_space: gym.Space, device: torch.device, seeds: list[int]) -> Agent:
    """An Agent whose policy is the stack of each seed's single-run initial policy, with per-seed
    observation statistics."""
    policies, generators = zip(*(seed_policy(config, seed, observation_space, action_space, device) for seed in seeds))
    shape = observation_space.shape
    obs_rms = RunningMeanStd(shape, device, groups=len(seeds)) if config.env.normalize_obs else None
    return Agent(policy=StackedActorCritic(list(policies), list(generators)), config=config, obs_shape=tuple(shape), obs_rms=obs_rms)


def per_seed(values: dict[str, list[float] | float], seeds: int) -> list[dict[str, float]]:
    """Per-seed lists (``ppo_update``'s losses, a stack's ``kl_beta``) as one dict per seed (shared
    scalars repeated; a single run's plain dict is ``seeds=1``)."""
    return [{name: value[i] if isinstance(value, list) else value for name, value in values.items()} for i in range(seeds)]


def seed_columns(tensors: tuple[Tensor, ...], seeds: int) -> list[tuple[Tensor, ...]]:
    """Each seed's env columns of ``[T, seeds * N]`` tensors (a single run: ``seeds=1``, the tensors themselves)."""
    return list(zip(*(t.chunk(seeds, dim=1) for t in tensors)))


def episodes_by_seed(episodes: Episodes, seeds: list[int], envs_per_seed: int) -> list[Episodes]:
    """The finished episodes of each seed (by the env row they ran in)."""
    split: list[Episodes] = [Episodes([], []) for _ in seeds]
    for ret, length, row in zip(episodes.returns, episodes.lengths, episodes.rows or []):
        part = split[row // envs_per_seed]
        part.returns.append(ret)
        part.lengths.append(length)
    return split


def seed_agent(stack: Agent, index: int, directory: Path, history: list[dict[str, float]], episode_returns: list[float]) -> Agent:
    """Seed ``index`` of a stack as an ordinary Agent (a copy of its policy and observation
    statistics), with its run folder ``directory``."""
    obs_rms = None
    if stack.obs_rms is not None:
        obs_rms = RunningMeanStd(stack.obs_shape, stack.device)
        obs_rms.load_state_dict({"mean": stack.obs_rms.mean[index], "var": stack.obs_rms.var[index], "count": stack.obs_rms.count[index]})
    seed = int(directory.name.removeprefix("seed_"))
    config = replace(stack.config, run=replace(stack.config.run, seed=seed))
    agent = Agent(policy=stack.policy.unstack(index), config=config, obs_shape=stack.obs_shape, obs_rms=obs_rms, history=history, run_dir=directory)
    agent.episode_returns = list(episode_returns)
    agent.action_masks = stack.action_masks
    return agent


def save_seed_agent(stack: Agent, index: int, directory: Path, history: list[dict[str, float]], episode_returns: list[float]) -> Agent:
    """``seed_agent``, saved into ``directory``: fastppo eval/plot/load read it as any run."""
    agent = seed_agent(stack, index, directory, history, episode_returns)
    agent.save(directory)
    return agent


class SeedLoggers:
    """The trainer's logger for a stack: each seed's metrics to its own run folder's logger, and
    one progress bar (its own logger without a folder) fed with the means over the seeds."""

    def __init__(self, loggers: list[RunLogger], progress: RunLogger):
        self.loggers, self.progress = loggers, progress
        self.history = progress.history

    def log(self, step: int, metrics: list[dict[str, float]]) -> None:
        for logger, seed_metrics in zip(self.loggers, metrics):
            logger.log(step, seed_metrics)
        names = set.intersection(*(set(m) for m in metrics))
        means = {name: float(np.mean([m[name] for m in metrics])) for name in names}
        means["charts/SPS"] = means["charts/SPS"] * len(metrics)  # the stack's steps per second, all seeds
        self.progress.log(step, means)

    def message(self, text: str) -> None:
        self.progress.message(text)

    def close(self) -> None:
        for logger in (*self.loggers, self.progress):
            logger.close()


class SeedAdam(FusedAdam):
    """A stack's Adam: ``FusedAdam`` over the stack's one flat parameter (``[seeds * P]``,
    seed-major), each seed's row an Adam of its own, stepped as its single run's FusedAdam steps its
    flat parameter: as a tensor of its own (the fused kernel's rounding of an element depends on its
    position in its tensor) with a step count of its own (``state["step"]`` is ``[seeds]``), so that
    ``step(active)`` can leave out the seeds whose epochs ``--target-kl`` has stopped: their weights,
    moments and bias correction stay as they are."""

    def __init__(self, params: list[Tensor], seeds: int, lr: float, eps: float):
        super().__init__(params, lr=lr, eps=eps)
        self.seeds = seeds
        self._rows: list[tuple[Tensor, ...]] | None = None

    def step(self, active: list[bool] | None = None) -> None:
        """One Adam step of every seed, or of the seeds ``active`` marks."""
        with torch.no_grad():
            rows = self._rows or self._split()
            taken = rows if active is None else [row for row, going in zip(rows, active) if going]
            adam_step(self.param_groups[0], *map(list, zip(*taken)))

    def _split(self) -> list[tuple[Tensor, ...]]:
        """Each seed's (weights, gradient, moments, step count): views of the stacked tensors, made
        once (per state: ``load_state_dict`` replaces it)."""
        (p,) = self.param_groups[0]["params"]
        state = self._state(p)
        rows = (t.view(self.seeds, -1).unbind() for t in (p, p.grad, state["exp_avg"], state["exp_avg_sq"]))
        self._rows = list(zip(*rows, state["step"].unbind()))
        return self._rows

    def _state(self, p: Tensor) -> dict[str, Tensor]:
        fresh = not self.state[p]
        state = super()._state(p)
        if fresh:
            state["step"] = torch.zeros(self.seeds, dtype=torch.float32, device=p.device)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._rows = None


class _SeedOptimizer:
    """Seed ``index``'s row of a stack's ``SeedAdam``, as the state dict its single run's optimizer
    has (the stack's flat parameter row holds the seed's parameters in the single run's order)."""

    def __init__(self, optimizer: SeedAdam, index: int):
        self.optimizer, self.index = optimizer, index

    def state_dict(self) -> dict:
        state, seeds = self.optimizer.state_dict(), self.optimizer.seeds
        rows = {
            i: {slot: (value[self.index] if slot == "step" else value.view(seeds, -1)[self.index]).clone() for slot, value in slots.items()}
            for i, slots in state["state"].items()
        }
        return {"state": rows, "param_groups": state["param_groups"]}


def _rng_key(generator: torch.Generator) -> str:
    """The checkpoint key of the global RNG a seed's generator stands for in its single run."""
    return "rng.torch" if generator.device.type == "cpu" else f"rng.cuda.{generator.device.index or 0}"


def restore_seed_stack(state, envs, checkpoints: list) -> list[list[float]]:
    """Put each seed's checkpoint (as ``save_seed_checkpoints`` wrote it: its single run's) back into
    its row of the stack: weights, Adam moments and step count, statistics, env rows and their
    generator, its generator, counters, kl_beta. The inverse of ``save_seed_checkpoints``, so that ``fastppo train --resume
    RUN_DIR`` continues the whole stack as it would have gone on. Returns each seed's recent
    episode returns (a checkpoint keeps the last 100, as a single run's does)."""
    from fastppo.checkpoint import optimizer_from_tensors
    from fastppo.rollout import EnvCursor

    stack: StackedActorCritic = state.agent.policy
    first, device = checkpoints[0], state.agent.device

    def stacked(key: str) -> Tensor:  # one tensor of every seed's checkpoint, seed-major: [S, ...]
        return torch.stack([c.tensors[key] for c in checkpoints]).to(device)

    with torch.no_grad():
        stack.flat.copy_(torch.stack([torch.cat([p.reshape(-1) for p in c.agent.policy.parameters()]) for c in checkpoints]))
    if state.agent.obs_rms is not None:
        parts = [c.agent.obs_rms.state_dict() for c in checkpoints]
        state.agent.obs_rms.load_state_dict({k: torch.stack([torch.as_tensor(p[k]) for p in parts]) for k in ("mean", "var", "count")})
    # SeedAdam's state: each seed's moments a row of the flat ones, its step count an entry of [seeds].
    adam = {k: stacked(k).flatten() for k in first.tensors if k.startswith("optim.")}
    optimizer_from_tensors(state.optimizer, adam, first.param_groups)
    if state.reward_scaler is not None:
        scaler = {k.removeprefix("reward_scaler."): stacked(k) for k in first.tensors if k.startswith("reward_scaler.")}
        scaler["discounted_return"] = scaler["discounted_return"].flatten()
        state.reward_scaler.load_state_dict(scaler)
    for index, checkpoint in enumerate(checkpoints):
        envs.load_seed_block(index, {k.removeprefix("env."): v for k, v in checkpoint.tensors.items() if k.startswith("env.")})
        generator = stack.noise.generators[index]
        generator.set_state(checkpoint.tensors[_rng_key(generator)])
    mask = stacked("cursor.action_mask").flatten(0, 1) if "cursor.action_mask" in first.tensors else None
    state.cursor = EnvCursor(stacked("cursor.obs").flatten(0, 1), mask, stacked("cursor.valid").flatten())
    state.iteration, state.global_step, state.schedule_anchor = first.iteration, first.global_step, first.schedule_anchor
    state.kl_beta = [c.kl_beta for c in checkpoints]
    return [list(c.meta.get("episode_returns", [])) for c in checkpoints]


def save_seed_checkpoints(state, envs, seed_dirs: list[Path], seeds_returns: list[list[float]], keep: int) -> Path:
    """Checkpoint each seed of a stack into its run folder as the checkpoint of its single run
    (weights, Adam moments and step count, statistics, env rows and their generator, its generator
    as torch's RNG, its kl_beta): ``fastppo train --resume RUN_DIR/seed_<n>`` continues
    that seed alone, as its single run would. Returns the last folder written."""
    from fastppo.checkpoint import save_checkpoint
    from fastppo.rollout import EnvCursor

    stack: StackedActorCritic = state.agent.policy
    saved = None
    for index, (directory, returns) in enumerate(zip(seed_dirs, seeds_returns)):
        agent = seed_agent(state.agent, index, directory, [], returns)
        rows = slice(index * envs.num_envs // stack.seeds, (index + 1) * envs.num_envs // stack.seeds)
        scaler = None
        if state.reward_scaler is not None:
            scaler = RewardScaler(rows.stop - rows.start, state.reward_scaler.gamma, state.reward_scaler.clip, agent.device)
            rms = state.reward_scaler.return_rms
            scaler.load_state_dict(
                {"return_rms.mean": rms.mean[index], "return_rms.var": rms.var[index], "return_rms.count": rms.count[index], "discounted_return": state.reward_scaler.discounted_return[rows]}
            )
        cursor = state.cursor
        seed_cursor = EnvCursor(cursor.obs[rows], None if cursor.action_mask is None else cursor.action_mask[rows], cursor.valid[rows])
        seed_optimizer = _SeedOptimizer(state.optimizer, index)
        seed_state = replace(state, agent=agent, optimizer=seed_optimizer, reward_scaler=scaler, cursor=seed_cursor, kl_beta=state.kl_beta[index])
        generator = stack.noise.generators[index]
        saved = save_checkpoint(directory, seed_state, envs.seed_block(index), keep, {_rng_key(generator): generator.get_state()})
    return saved
