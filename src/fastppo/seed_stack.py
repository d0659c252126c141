"""Many seeds of one config trained in one process as one batched computation (PureJaxRL's idea,
in PyTorch): ``fastppo train CartPole-v1 --backend tensor --seeds 1-64``.

The seeds enter the ordinary trainer as data. Their envs are rows of one tensor env, seed-major
(seed s owns rows ``s*N .. s*N+N-1``), each seed's block drawing its resets from its own
generator; their policies are one ``StackedActorCritic`` whose weights are one ``[seeds, P]``
parameter, each MLP layer (and LSTM/GRU cell) a batched matmul over the seeds; the update shuffles
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
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from fastppo.agent import Agent
from fastppo.config import Config
from fastppo.core.normalize import RewardScaler, RunningMeanStd
from fastppo.distributed import LONE
from fastppo.envs.vector import Episodes
from fastppo.errors import FastPPOError
from fastppo.logger import RunLogger
from fastppo.optim import DEVICES, FusedAdam, adam_step
from fastppo.policies import ActorCritic
from fastppo.policies.activations import IN_PLACE_ACTIVATIONS
from fastppo.policies.distributions import GaussianHead, Noise
from fastppo.policies.mlp_autograd import affine, mlp_layers, mlps_one_node, one_node_pays


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
    """S actor-critics as one module of batched matmuls: MLP encoders (one per head, or one trunk
    shared by both), an optional LSTM/GRU core after them, and the heads.

    Takes rows seed-major, flat (``[S * n, ...]``, the rollout's env rows) or stacked
    (``[S, n, ...]``, the update's minibatches), and returns per-row outputs of the same layout.
    All weights are views of one ``[S, P]`` parameter, seed s's row holding its policy's
    parameters in ``ActorCritic.parameters()`` order (so ``unstack`` can rebuild it).

    A recurrent stack's cores are ``torch.nn.LSTM``/``GRU`` cells written as batched matmuls (one
    weight per seed; nn.LSTM takes one), stepped over the time steps of a minibatch's sequences
    with the state zeroed after each row that is no real transition: the rule the single run's
    ``memory.Segments`` applies by cutting the rows into episodes.
    """

    def __init__(self, policies: list[ActorCritic], generators: list[torch.Generator]):
        super().__init__()
        base = policies[0]
        actor, critic = mlp_layers(base.actor_encoder), mlp_layers(base.critic_encoder)
        if actor is None or critic is None or actor[1] != critic[1]:
            raise FastPPOError("--seeds on tensor envs stacks MLP policies: drop --policy.encoder cnn, or train one run per seed on another --backend (sync, async)")
        self.seeds = len(policies)
        self._activation = actor[1]  # a name; None without hidden layers
        self._shapes = {name: p.shape for name, p in base.named_parameters()}
        names = {id(p): name for name, p in base.named_parameters()}

        def layers(modules: list[nn.Linear]) -> list[tuple[str, str]]:
            return [(names[id(m.weight)], names[id(m.bias)]) for m in modules]

        # A shared trunk (and its core) runs once and feeds both heads.
        shared = base.shared_trunk
        self._trunk = layers(actor[0]) if shared else []
        self._encoders = ([], []) if shared else (layers(actor[0]), layers(critic[0]))
        self._heads = (layers([base.action_head.linear]), layers([base.value_head]))
        self.recurrent, self.state_size = base.recurrent, base.state_size
        # Separate MLPs and their heads train as one autograd node on the CPU, as a single run's do.
        self._one_node = not shared and not base.recurrent
        self._cores: tuple[tuple[str, str, str, str], ...] = ()
        if base.recurrent:
            cores = (base.actor_memory,) if shared else (base.actor_memory, base.critic_memory)
            rnn = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
            self._cores = tuple(tuple(names[id(getattr(core.rnn, w))] for w in rnn) for core in cores)
            self._kind, self._hidden = base.actor_memory.kind, base.actor_memory.hidden_size
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

    def _mlp(self, x: Tensor, layers: list[tuple[str, str]], views: dict[str, Tensor], activate_last: bool) -> Tensor:
        for depth, (weight, bias) in enumerate(layers):
            x = affine(views[bias], x, views[weight])
            if activate_last or depth < len(layers) - 1:
                x = IN_PLACE_ACTIVATIONS[self._activation](x)  # over its fresh product
        return x

    def _features(self, obs: Tensor, views: dict[str, Tensor]) -> tuple[Tensor, ...]:
        """What the cores (or, without memory, the heads) read for stacked ``obs``: one tensor
        with a shared trunk, else the actor's and the critic's."""
        x = self._mlp(obs.flatten(2).float(), self._trunk, views, activate_last=True)
        if self._trunk:
            return (x,)
        return tuple(self._mlp(x, encoder, views, activate_last=True) for encoder in self._encoders)

    def _cell(self, gi: Tensor, h: Tensor, core: tuple[str, str, str, str], views: dict[str, Tensor]) -> Tensor:
        """One step of nn.LSTM/nn.GRU's cell (its gate order and formulas) for every seed:
        ``gi`` [S, B, gates] the input's part, ``h`` [S, B, state] the state (LSTM: h, c)."""
        gh = affine(views[core[3]], h[..., : self._hidden], views[core[1]])
        if self._kind == "lstm":
            i, f, g, o = (gi + gh).chunk(4, dim=-1)
            c = torch.sigmoid(f) * h[..., self._hidden :] + torch.sigmoid(i) * torch.tanh(g)
            return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], dim=-1)
        r_i, z_i, n_i = gi.chunk(3, dim=-1)
        r_h, z_h, n_h = gh.chunk(3, dim=-1)
        z = torch.sigmoid(z_i + z_h)
        n = torch.tanh(n_i + torch.sigmoid(r_i + r_h) * n_h)
        return n + z * (h - n)

    def _recurrent(self, obs: Tensor, state: Tensor, keep: Tensor | None, views: dict[str, Tensor]) -> tuple[tuple[Tensor, ...], Tensor]:
        """The cores' outputs ``[S, T * B, hidden]`` (one per core) for stacked rows ``obs`` that are
        T steps of B sequences in time-major order, from ``state`` [S, B, state_size], and the final
        state. With ``keep`` [S, T * B] the state is zeroed after each row it marks false."""
        batch = state.shape[1]
        width = self.state_size // len(self._cores)
        # The resets as one float tensor per time step, made once for every core: [S, B, 1] each.
        keeps = None if keep is None else keep.to(state.dtype).unsqueeze(-1).split(batch, dim=1)
        outputs, finals = [], []
        for x, core, h in zip(self._features(obs, views), self._cores, state.split(width, dim=-1)):
            gi = affine(views[core[2]], x, views[core[0]])  # every step's input part at once
            steps = []
            for t, gi_t in enumerate(gi.split(batch, dim=1)):
                h = self._cell(gi_t, h, core, views)
                steps.append(h[..., : self._hidden])
                if keeps is not None:
                    h = h * keeps[t]
            outputs.append(torch.cat(steps, dim=1))
            finals.append(h)
        return tuple(outputs), torch.cat(finals, dim=-1)

    def _outputs(self, obs: Tensor, views: dict[str, Tensor], state: Tensor | None = None, keep: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        """(distribution parameters [S, n, ...], value [S, n], final state or None)."""
        if state is None and self._one_node and one_node_pays(obs.flatten(2)):
            # The update's forward: mlp_autograd's one node, as a single run's (a stack's
            # activations are 8 MB tensors: the node works over them in place).
            nets = [[(views[w], views[b]) for w, b in encoder + head] for encoder, head in zip(self._encoders, self._heads)]
            params, value = mlps_one_node(obs.flatten(2).float(), nets, self._activation)
            return params, value.squeeze(-1), None
        features, final = (self._features(obs, views), None) if state is None else self._recurrent(obs, state, keep, views)
        actor, critic = features[0], features[-1]
        params = self._mlp(actor, self._heads[0], views, activate_last=False)
        return params, self._mlp(critic, self._heads[1], views, activate_last=False).squeeze(-1), final

    def _stacked(self, rows: Tensor | None) -> Tensor | None:
        return None if rows is None else rows.view(self.seeds, -1, *rows.shape[1:])

    def act(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The rollout step on flat rows: (action, logprob, value) per row."""
        return self.step(obs, None, action_mask)[:3]

    def step(self, obs: Tensor, state: Tensor | None, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """The rollout step on flat rows (and, recurrent, their states): (action, logprob, value, next state) per row."""
        views = self._views()
        params, value, state = self._outputs(self._stacked(obs), views, self._stacked(state))
        action, logprob = self._head(views).sample(params, self._stacked(action_mask), self.noise)
        return action.flatten(0, 1), logprob.flatten(0, 1), value.flatten(0, 1), None if state is None else state.flatten(0, 1)

    def get_value(self, obs: Tensor, state: Tensor | None = None) -> Tensor:
        views = self._views()
        if state is not None:
            return self._outputs(self._stacked(obs), views, self._stacked(state))[1].flatten(0, 1)
        critic = self._features(self._stacked(obs), views)[-1]
        return self._mlp(critic, self._heads[1], views, activate_last=False).squeeze(-1).flatten(0, 1)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None, state: Tensor | None = None, keep: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The update's forward on stacked minibatch rows ``[S, n, ...]`` (recurrent: time-major
        sequences from ``state`` [S, B, state_size], reset after the rows ``keep`` marks false):
        (logprob, entropy, value), each ``[S, n]``."""
        views = self._views()
        params, value, _ = self._outputs(obs, views, state, keep)
        logprob, entropy = self._head(views).logprob_entropy(params, action, action_mask)
        return logprob, entropy, value

    def initial_state(self, batch_size: int) -> Tensor | None:
        """Zeros for ``batch_size`` flat rows (None without memory)."""
        return torch.zeros(batch_size, self.state_size, device=self.flat.device) if self.recurrent else None

    def keep(self, indices: list[int]) -> None:
        """Keep only the seeds at ``indices`` (in that order): their rows of ``flat``, as a new
        parameter (the optimizer follows with ``SeedAdam.keep``), and their generators."""
        self.flat = nn.Parameter(self.flat.detach()[indices])
        self.seeds = len(indices)
        self.noise.generators = [self.noise.generators[i] for i in indices]

    @torch.no_grad()
    def unstack(self, index: int, into: ActorCritic | None = None) -> ActorCritic:
        """Seed ``index``'s policy as an ordinary ``ActorCritic`` (a copy of its current weights),
        written into ``into`` (an earlier ``unstack``'s: no new module, whose deepcopy costs ~1 ms)."""
        policy, views = into or copy.deepcopy(self._template), self._views()
        for name, p in policy.named_parameters():
            p.copy_(views[name][index])
        return policy


class SeedMinibatches:
    """The update's minibatches for a stack of seeds, from each seed's rows ``[S, R, ...]``
    (``RolloutBuffer.seed_batch(S)``), or a recurrent stack's env sequences ``[S, T, N, ...]``.

    Each seed does what its single run's update does: keep its valid rows (its reset rows out),
    shuffle them with its own generator (not at all for one minibatch), and cut them into
    minibatches whose sizes differ by at most one. Seeds have different numbers of reset rows, so
    minibatch i of each seed is padded to the longest and ``valid`` marks the real rows; the
    loss's per-seed masked means are then each seed's plain means. Sequences are cut by env, all T
    rows of each (time-major), reset rows kept and masked, as in a single run: every seed has N
    envs, so no padding.
    """

    world = LONE  # a stack trains in one process

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
        self.bounds = torch.tensor([[count * i // num_minibatches for i in range(num_minibatches + 1)] for count in counts], device=device)
        self.sizes = self.bounds[:, 1:] - self.bounds[:, :-1]
        self.steps = torch.arange(int(self.sizes.max()), device=device)

    def epoch(self, active: list[bool] | None = None) -> Iterator[tuple[dict[str, Tensor], None]]:
        """One epoch's minibatches; a seed not ``active`` (its epochs stopped: ``update.ppo_update``)
        draws no permutation, as its single run, which has left the loop, draws none."""
        shuffle = self.num_minibatches > 1  # one minibatch: no permutation drawn, as in a single run
        orders = [
            rows[self.noise.randperm(len(rows), s, rows.device)] if shuffle and (active is None or active[s]) else rows for s, rows in enumerate(self.rows)
        ]
        return ((mb, None) for mb in self._cut(orders))

    def in_order(self) -> Iterator[dict[str, Tensor]]:
        """The minibatches of each seed's valid rows (or envs) in rollout order (``update.kl_after_update``)."""
        return self._cut(self.rows)

    def across_ranks(self, value: Tensor, share: None) -> Tensor:
        return value

    def one_per_run(self, values: list[float]) -> list[float]:
        return values

    def _cut(self, orders: list[Tensor]) -> Iterator[dict[str, Tensor]]:
        if self.sequences:
            yield from self._cut_envs(torch.stack(orders))
            return
        padded = nn.utils.rnn.pad_sequence(orders, batch_first=True)  # [S, most valid rows]
        for i in range(self.num_minibatches):
            positions = (self.bounds[:, i : i + 1] + self.steps).clamp(max=padded.shape[1] - 1)  # [S, longest minibatch]
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
                yield {k: v[self.seed_index, index] if k == "initial_state" else v[self.seed_index, :, index].transpose(1, 2).flatten(1, 2) for k, v in self.batch.items()}


# --- the trainer's side: build, split and save a stack -------------------------------------------


def check_seed_stack(config: Config) -> None:
    """What a stack of seeds cannot do, as one-line errors (each with the way out: one run per
    seed, on another backend; the policy's own limits are ``StackedActorCritic``'s).
    ``--target-kl`` and ``--objective kl`` work: each seed stops its epochs where its single run
    would (``update.ppo_update``, ``SeedAdam``) and adapts its own beta (the trainer's ``kl_beta``,
    one per seed, in each seed's checkpoints)."""
    refused = {
        "--backend tensor (the seeds' envs are rows of one tensor env)": config.env.backend != "tensor",
        "no --cudagraphs": config.run.cudagraphs,
        f"--device {', '.join(DEVICES)} or auto (each seed's Adam is torch's fused kernel)": config.run.device.split(":")[0] not in (*DEVICES, "auto"),
    }
    for need, broken in refused.items():
        if broken:
            raise FastPPOError(f"--seeds on tensor envs trains stacks of seeds, which need {need}: change that, or train one run per seed on another --backend (sync, async)")


def stacked_agent(config: Config, observation_space: gym.Space, action_space: gym.Space, device: torch.device, seeds: list[int]) -> Agent:
    """An Agent whose policy is the stack of each seed's single-run initial policy, with per-seed
    observation statistics."""
    policies, generators = zip(*(seed_policy(config, seed, observation_space, action_space, device) for seed in seeds))
    shape = observation_space.shape
    obs_rms = RunningMeanStd(shape, device, groups=len(seeds)) if config.env.normalize_obs else None
    return Agent(policy=StackedActorCritic(list(policies), list(generators)), config=config, observation_space=observation_space, action_space=action_space, obs_rms=obs_rms)


def per_seed(values: dict[str, list[float] | float], seeds: int) -> list[dict[str, float]]:
    """Per-seed lists (``ppo_update``'s losses, a stack's ``kl_beta``) as one dict per seed (shared
    scalars repeated; a single run's plain dict is ``seeds=1``)."""
    return [{name: value[i] if isinstance(value, list) else value for name, value in values.items()} for i in range(seeds)]


def episodes_by_seed(episodes: Episodes, seeds: list[int], envs_per_seed: int) -> list[Episodes]:
    """The finished episodes of each seed (by the env row they ran in)."""
    split: list[Episodes] = [Episodes([], []) for _ in seeds]
    for ret, length, row in zip(episodes.returns, episodes.lengths, episodes.rows or []):
        part = split[row // envs_per_seed]
        part.returns.append(ret)
        part.lengths.append(length)
    return split


def seed_agent(
    stack: Agent, index: int, directory: Path, history: list[dict[str, float]], episode_returns: list[float], policy: ActorCritic | None = None
) -> Agent:
    """Seed ``index`` of a stack as an ordinary Agent (a copy of its policy, written into
    ``policy`` if given, and of its observation statistics), with its run folder ``directory``."""
    obs_rms = None
    if stack.obs_rms is not None:
        obs_rms = RunningMeanStd(stack.obs_shape, stack.device)
        obs_rms.load_state_dict({"mean": stack.obs_rms.mean[index], "var": stack.obs_rms.var[index], "count": stack.obs_rms.count[index]})
    seed = int(directory.name.removeprefix("seed_"))
    config = replace(stack.config, run=replace(stack.config.run, seed=seed))
    agent = Agent(
        policy=stack.policy.unstack(index, policy), config=config, observation_space=stack.observation_space, action_space=stack.action_space, obs_rms=obs_rms, history=history, run_dir=directory
    )
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

    def keep(self, indices: list[int], param: Tensor) -> None:
        """Keep only the seeds at ``indices``: their rows of the moments and step counts, now for
        ``param`` (the stack's new ``flat``, ``StackedActorCritic.keep``)."""
        group = self.param_groups[0]
        (old,) = group["params"]
        state = self.state.pop(old, {})
        group["params"] = [param]
        if state:
            self.state[param] = {slot: value[indices] if slot == "step" else value.view(self.seeds, -1)[indices].view_as(param) for slot, value in state.items()}
        self.seeds = len(indices)
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

    @property
    def param_groups(self) -> list[dict]:
        """The groups with the seed's row of each (flat) parameter: what its single run optimizes."""
        return [{**group, "params": [p.view(self.optimizer.seeds, -1)[self.index] for p in group["params"]]} for group in self.optimizer.param_groups]


def _rng_key(generator: torch.Generator) -> str:
    """The checkpoint key of the global RNG a seed's generator stands for in its single run."""
    return "rng.torch" if generator.device.type == "cpu" else f"rng.cuda.{generator.device.index or 0}"


def restore_seed_stack(state, envs, checkpoints: list) -> list[list[float]]:
    """Put each seed's checkpoint (as ``save_seed_checkpoints`` wrote it: its single run's) back into
    its row of the stack: weights, Adam moments and step count, statistics, env rows and their
    generator, a recurrent policy's live states, its generator, counters, kl_beta. The inverse of ``save_seed_checkpoints``, so that ``fastppo train --resume
    RUN_DIR`` continues the whole stack as it would have gone on. Returns each seed's recent
    episode returns (a checkpoint keeps the last 100, as a single run's does)."""
    from fastppo.checkpoint import check_fits_run, optimizer_from_tensors
    from fastppo.rollout import EnvCursor

    for index, checkpoint in enumerate(checkpoints):  # every seed's, before anything is restored
        check_fits_run(checkpoint, *_seed_run(state, envs, index))
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
    mask, memory = (stacked(key).flatten(0, 1) if key in first.tensors else None for key in ("cursor.action_mask", "cursor.state"))
    state.cursor = EnvCursor(stacked("cursor.obs").flatten(0, 1), mask, stacked("cursor.valid").flatten(), memory)
    state.iteration, state.global_step, state.schedule_anchor = first.iteration, first.global_step, first.schedule_anchor
    state.kl_beta = [c.kl_beta for c in checkpoints]
    return [list(c.meta.get("episode_returns", [])) for c in checkpoints]


def keep_seeds(state, envs, indices: list[int]) -> None:
    """Shrink a stack in place to the seeds at ``indices`` (in that order), at an iteration
    boundary: their weights, Adam state, generators, statistics, env rows, cursor rows and
    kl_betas, so that each goes on as it would have in the whole stack (nothing of a seed depends on
    the others) but for float rounding: the update's minibatches are padded to the longest seed's,
    and a sum over another padded length can round another way, as between a stack and its single
    runs (module docstring). The trainer rebuilds what holds the old parameter (its buffer and steps)."""
    from fastppo.rollout import EnvCursor
    from fastppo.update import flatten_parameters

    stack: StackedActorCritic = state.agent.policy
    seeds = stack.seeds
    stack.keep(indices)
    state.optimizer.keep(indices, flatten_parameters(stack))
    for statistics in (state.agent.obs_rms, state.reward_scaler):
        if statistics is not None:
            statistics.keep_groups(indices)
    envs.keep_seed_blocks(indices)
    cursor = state.cursor
    # Each seed's rows are a block: viewed [seeds, rows per seed, ...], the kept blocks in order.
    state.cursor = EnvCursor(*(None if t is None else t.unflatten(0, (seeds, -1))[indices].flatten(0, 1) for t in (cursor.obs, cursor.action_mask, cursor.valid, cursor.state)))
    state.kl_beta = [state.kl_beta[i] for i in indices]


def _seed_run(state, envs, index: int) -> tuple[Any, Any, dict[str, Tensor]]:
    """Seed ``index`` of a stack as its single run's state (its optimizer row, reward scaler, cursor
    rows and kl_beta; the agent is still the stack's), envs and generator (as torch's RNG): what its
    checkpoint holds."""
    from fastppo.rollout import EnvCursor

    stack: StackedActorCritic = state.agent.policy
    rows = slice(index * envs.num_envs // stack.seeds, (index + 1) * envs.num_envs // stack.seeds)
    scaler = None
    if state.reward_scaler is not None:
        scaler = RewardScaler(rows.stop - rows.start, state.reward_scaler.gamma, state.reward_scaler.clip, state.agent.device)
        rms = state.reward_scaler.return_rms
        scaler.load_state_dict(
            {"return_rms.mean": rms.mean[index], "return_rms.var": rms.var[index], "return_rms.count": rms.count[index], "discounted_return": state.reward_scaler.discounted_return[rows]}
        )
    cursor = state.cursor
    seed_cursor = EnvCursor(*(None if t is None else t[rows] for t in (cursor.obs, cursor.action_mask, cursor.valid, cursor.state)))
    seed_state = replace(state, optimizer=_SeedOptimizer(state.optimizer, index), reward_scaler=scaler, cursor=seed_cursor, kl_beta=state.kl_beta[index])
    generator = stack.noise.generators[index]
    return seed_state, envs.seed_block(index), {_rng_key(generator): generator.get_state()}


def save_seed_checkpoints(state, envs, seeds: list[int], seed_dirs: list[Path], seeds_returns: list[list[float]], keep: int, indices: list[int] | None = None) -> Path:
    """Checkpoint each seed of a stack (or those at ``indices``) into its run folder as the
    checkpoint of its single run (weights, Adam moments and step count, statistics, env rows and
    their generator, its generator as torch's RNG, its kl_beta): ``fastppo train --resume
    RUN_DIR/seed_<n>`` continues that seed alone, as its single run would. Each also names the
    ``seeds`` of its stack: a resume stacks the same seeds again, and a stack's float rounding
    depends on its width (so, bit for bit, does each seed's run). Returns the last folder written."""
    from fastppo.checkpoint import save_checkpoint

    saved, scratch = None, None  # one module takes each seed's weights in turn: written, not kept
    for index in range(len(seed_dirs)) if indices is None else indices:
        directory, returns = seed_dirs[index], seeds_returns[index]
        agent = seed_agent(state.agent, index, directory, [], returns, scratch)
        scratch = agent.policy
        seed_state, seed_envs, rng = _seed_run(state, envs, index)
        saved = save_checkpoint(directory, replace(seed_state, agent=agent), seed_envs, keep, rng, {"stack": seeds})
    return saved
