"""The PPO update: epochs of shuffled minibatches over one flattened rollout.

``ppo_update`` is the loop; ``MinibatchStep`` is one optimisation step (loss -> backward ->
grad-norm clip -> optimizer step), eager by default, with two opt-in speed layers that leave the
loop's shape alone (LeanRL's recipe): ``compile`` wraps the minibatch loss in ``torch.compile``
and ``cudagraphs`` captures a whole epoch, every minibatch's step with its optimizer included, in
one CUDA graph.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple, Protocol

import torch
from torch import Tensor, nn

from fastppo.config import PPOConfig
from fastppo.core import categorical_kl, kl_estimate, masked_mean, normalize_advantages, ppo_loss
from fastppo.errors import FastPPOError
from fastppo.games.magnet import MAGNET_LOG_PROBS
from fastppo.policies.distributions import CategoricalHead
from fastppo.policies.population import StackedActorCritic
from fastppo.training.cuda_graphs import COMPILE_MODE, capture_graph, check_cudagraphs, on_side_stream
from fastppo.training.distributed import LONE, World
from fastppo.training.optim import FusedAdam, Optimizer, flatten_parameters, fused_adam_available
from fastppo.training.rollout import TrainedPolicy
from fastppo.training.seed_stack import SeedMinibatches

MINIBATCH_KEYS = (
    "obs",
    "actions",
    "logprobs",
    "values",
    "advantages",
    "returns",
    "valid",
    "action_masks",
    "initial_state",
    MAGNET_LOG_PROBS,
)
"""The flattened rollout fields one minibatch step reads (rewards and flags are GAE's only)."""


@dataclass
class UpdateCoefficients:
    """This iteration's values of the scheduled/adapted coefficients."""

    clip_coef: float
    ent_coef: float
    kl_beta: float | list[float] | Tensor
    """A stack of seeds: each seed's (a list, which ``ppo_update`` puts on the device as ``[seeds]``)."""
    magnet_coef: float = 0.0
    """The weight of the exact KL to self-play's magnet (fastppo.games.magnet), where the batch
    holds its log-probabilities."""


def make_optimizer(
    policy: TrainedPolicy, lr: float, eps: float, device: torch.device, cudagraphs: bool = False
) -> torch.optim.Adam | FusedAdam:
    """Adam over the policy's parameters, flattened into one tensor (``flatten_parameters``).

    ``fused=True`` runs the whole Adam update as one kernel per dtype/device instead of ~10 small
    ops per parameter tensor. On CPU and CUDA that kernel runs through ``fastppo.training.optim.FusedAdam``
    (bit-identical, and without the ~1.3 s ``torch._dynamo`` import that ``torch.optim``'s first
    use costs a fresh process). With ``cudagraphs`` the step counter lives on the GPU
    (``capturable``) so that a captured step can be replayed: ``torch.optim.Adam`` does that. (A
    tensor lr would avoid recapturing when the lr schedule moves, but would not survive the JSON
    checkpoint of the param groups.) A stack of seeds gets one Adam per seed (``FusedAdam``'s ``members``).
    """
    if isinstance(policy, StackedActorCritic):
        return FusedAdam([flatten_parameters(policy)], lr=lr, eps=eps, members=policy.seeds)
    capturable = cudagraphs and device.type == "cuda"
    if not capturable and fused_adam_available(device):
        return FusedAdam([flatten_parameters(policy)], lr=lr, eps=eps)
    return torch.optim.Adam([flatten_parameters(policy)], lr=lr, eps=eps, fused=True, capturable=capturable)


def set_learning_rate(optimizer: Optimizer, lr: float) -> None:
    """Set every group's lr (a captured update step notices the change and recaptures)."""
    for group in optimizer.param_groups:
        group["lr"] = lr


class RankShare(NamedTuple):
    """Under torchrun, what a rank needs to know of the other ranks' parts of a minibatch
    (``rank_shares``)."""

    weight: Tensor
    """This rank's valid rows x ranks / every rank's valid rows: the ranks' mean of weight x
    (this rank's mean over its rows) is the mean over all the rows."""
    advantage_moments: Tensor
    """(count, sum, sum of squares) of the advantages on every rank's valid rows."""


def minibatch_loss(
    policy: TrainedPolicy,
    mb: dict[str, Tensor],
    cfg: PPOConfig,
    coefs: UpdateCoefficients,
    advantage_moments: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The PPO loss of one minibatch and its metrics (detached tensors, no host sync). Under
    torchrun ``advantage_moments`` normalise the advantages over every rank's part of the minibatch."""
    mask = mb.get("valid")  # None once ppo_update has dropped the reset rows
    kl_beta = coefs.kl_beta
    assert not isinstance(kl_beta, list)  # ppo_update puts a stack's betas on the device first
    magnet = mb.get(MAGNET_LOG_PROBS)
    if magnet is None:
        newlogprob, entropy, newvalue = policy.evaluate(
            mb["obs"], mb["actions"], mb.get("action_masks"), mb.get("initial_state"), mask
        )
    else:  # the KL to the magnet reads the policy's whole distribution, not the stored moves' alone
        head, masks = policy.action_head, mb.get("action_masks")
        assert isinstance(head, CategoricalHead)  # a game's moves (fastppo.envs.turn_based.check_game)
        params, newvalue = policy(mb["obs"])
        newlogprob, entropy = head.logprob_entropy(params, mb["actions"], masks)
        magnet_kl = masked_mean(categorical_kl(head.log_probs(params, masks), magnet, masks), mask)
    # A stack of seeds' minibatch is [seeds, rows] (fastppo.training.seed_stack): one loss per seed (their sum
    # is minimised, so each seed's weights get its own loss's gradient), one advantage normalisation per seed.
    dim = -1 if mb["advantages"].dim() == 2 else None
    mb_advantages = (
        normalize_advantages(mb["advantages"], mask, moments=advantage_moments, dim=dim)
        if cfg.norm_adv
        else mb["advantages"]
    )
    loss, metrics = ppo_loss(
        newlogprob,
        mb["logprobs"],
        mb_advantages,
        entropy,
        newvalue,
        mb["values"],
        mb["returns"],
        clip_coef=coefs.clip_coef,
        ent_coef=coefs.ent_coef,
        vf_coef=cfg.vf_coef,
        clip_vloss=cfg.clip_vloss,
        mask=mask,
        objective=cfg.objective,
        kl_beta=kl_beta,
        dim=dim,
    )
    if magnet is not None:
        loss = loss + coefs.magnet_coef * magnet_kl
        metrics["magnet_kl"] = magnet_kl.detach()
    return (loss if dim is None else loss.sum()), metrics


class EpochSums(NamedTuple):
    """What ``ppo_update`` keeps of one epoch (``MinibatchStep.epoch``)."""

    names: list[str]
    sums: Tensor
    """Each metric (in ``names``' order) summed over the update's steps so far, this epoch's
    included: ``[metrics]``, or a stack's ``[metrics, seeds]`` with 0 for the steps a seed sat out."""
    last_kl: Tensor
    """The last minibatch's approx_kl: target_kl's early-stop test (CleanRL's)."""
    share: RankShare | None
    """Under torchrun, this rank's share of the last minibatch."""
    steps: int


class MinibatchStep:
    """One optimisation step on one minibatch; returns its metrics (plus ``grad_norm``); ``epoch``
    runs one epoch of them.

    - eager: the reference path.
    - ``compile``: the loss (policy forward + PPO loss) runs under ``torch.compile``; backward goes
      through the compiled graph's AOT-autograd backward. The optimizer stays the fused Adam.
    - ``cudagraphs`` (CUDA only): after ``WARMUP_EPOCHS`` eager epochs on a side stream (real steps
      on real minibatches, as CUDA graphs require), a whole epoch — the shuffle's gathers, then for
      every minibatch forward, backward, clip and Adam, and the metrics' sums — is captured once
      and replayed: one launch an epoch instead of a copy and a launch per minibatch (tensor
      CartPole's update on an H100 was 20.3 of 36.7 ms an iteration with a graph per minibatch).
      Each update copies its batch into the graph's static inputs once and each epoch its
      permutation, drawn eagerly from the same generator as the eager path's. The learning rate
      and the coefficients are baked into the graph as constants, so a change of any of them (a
      schedule, PPO-KL's beta) recaptures: once per update at most.

    With a ``world`` of several ranks (torchrun), each rank holds part of every minibatch: the
    advantages are normalised over all the parts, and the gradient is all-reduced between backward
    and the clip, so every rank clips and applies the same gradient and the weights stay equal.

    ``minibatches`` makes the update's ``Minibatches`` from a batch: chosen here, once, for the
    policy (a stack of seeds: each seed's own) and the world (``minibatch_source``).
    """

    WARMUP_EPOCHS = 2

    def __init__(
        self,
        policy: TrainedPolicy,
        optimizer: Optimizer,
        cfg: PPOConfig,
        compile: bool = False,
        cudagraphs: bool = False,
        world: World = LONE,
    ):
        self.policy, self.optimizer, self.cfg, self.world = policy, optimizer, cfg, world
        # make_optimizer's one flat parameter: its gradient is every layer's gradient.
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if len(params) != 1 or params[0].grad is None:
            raise FastPPOError(
                "the PPO update needs the optimizer from fastppo.training.update.make_optimizer(policy, ...): one flat "
                "parameter with its gradient"
            )
        self.flat_parameter = params[0]
        # A stack of seeds' flat parameter is seed-major: one gradient-norm clip per seed.
        self.seeds = policy.seeds if isinstance(policy, StackedActorCritic) else None
        self.loss_fn: Callable[..., tuple[Tensor, dict[str, Tensor]]] = minibatch_loss
        if compile:
            self.loss_fn = torch.compile(minibatch_loss, mode=COMPILE_MODE)
        self.cudagraphs = cudagraphs
        if cudagraphs:
            check_cudagraphs(next(policy.parameters()).device)
            if world.size > 1:
                raise FastPPOError(
                    "--cudagraphs captures a one-process update: it does not run under torchrun, drop it"
                )
        self._epochs = 0
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_key: tuple | None = None
        self._graph_names: list[str] = []
        self._static_in: dict[str, Tensor] = {}
        self._static_out: dict[str, Tensor] = {}
        # The source whose batch the static inputs hold, weakly: the update's batch is freed
        # when the update ends (a dead reference is never the next source).
        self._fed: weakref.ref[RowMinibatches] | None = None
        self.minibatches = minibatch_source(policy, cfg, cudagraphs, world)

    def __call__(
        self,
        mb: dict[str, Tensor],
        coefs: UpdateCoefficients,
        share: RankShare | None = None,
        active: list[bool] | None = None,
    ) -> dict[str, Tensor]:
        """One step; ``share``: under torchrun, this rank's part of the minibatch (``rank_shares``);
        ``active``: of a stack of seeds, those that take it (None: all)."""
        loss, metrics = self.loss_fn(
            self.policy, mb, self.cfg, coefs, None if share is None else share.advantage_moments
        )
        grad = self.flat_parameter.grad
        grad.zero_()  # in place, never None: see flatten_parameters
        loss.backward()
        if share is not None:
            # The loss is this rank's mean over its valid rows: weighted, the ranks' mean is the
            # gradient of the mean over all their rows. The run's one collective per minibatch.
            self.world.mean_(grad.mul_(share.weight))
        # clip_grad_norm_'s formula on the one flat gradient, as 3 ops instead of its per-call
        # bookkeeping (a quarter of the optimizer's overhead on small MLPs).
        rows = grad.view(self.seeds or 1, -1)
        grad_norm = torch.linalg.vector_norm(rows, dim=-1)
        rows.mul_(torch.clamp(self.cfg.max_grad_norm / (grad_norm + 1e-6), max=1.0).unsqueeze(-1))
        metrics["grad_norm"] = grad_norm if self.seeds else grad_norm[0]
        if active is None:
            self.optimizer.step()
        else:  # a stack's seeds that have stopped sit the step out
            assert isinstance(self.optimizer, FusedAdam)
            self.optimizer.step(active)
        return metrics

    def epoch(
        self,
        source: Minibatches,
        coefs: UpdateCoefficients,
        active: list[bool] | None = None,
        sums: Tensor | None = None,
    ) -> EpochSums:
        """One epoch of ``source``'s minibatches, its metrics added to the update's ``sums`` so far;
        ``active``: of a stack of seeds, those whose epochs go on (None: all)."""
        if not self.cudagraphs:
            return self._run_epoch(source.epoch(active), coefs, active, sums)
        assert isinstance(source, RowMinibatches)  # --cudagraphs: one run in one process (refused otherwise)
        epoch = self._graphed_epoch(source, coefs)
        # a replay's outputs are overwritten by the next one: the first epoch's are copied
        return epoch._replace(sums=epoch.sums.clone() if sums is None else sums + epoch.sums)

    def _run_epoch(
        self,
        minibatches: Iterable[tuple[dict[str, Tensor], RankShare | None]],
        coefs: UpdateCoefficients,
        active: list[bool] | None = None,
        sums: Tensor | None = None,
    ) -> EpochSums:
        stopped = None if active is None else ~torch.tensor(active, device=self.flat_parameter.device)
        names: list[str] = []
        metrics: dict[str, Tensor] = {}
        share, steps = None, 0
        for mb, share in minibatches:
            metrics = self(mb, coefs, share, active)
            # All metrics in one stacked tensor: one add per minibatch, one host sync per update.
            names = names or list(metrics)
            values = torch.stack([metrics[name] for name in names])
            if stopped is not None:  # a stopped seed's metrics of a step it did not take
                values = values.masked_fill(stopped, 0.0)
            sums = values if sums is None else sums + values
            steps += 1
        assert sums is not None  # every epoch has a minibatch
        return EpochSums(names, sums, metrics["approx_kl"], share, steps)

    def _graphed_epoch(self, source: RowMinibatches, coefs: UpdateCoefficients) -> EpochSums:
        order = source.permutation()
        self._epochs += 1
        if self._epochs <= self.WARMUP_EPOCHS:
            return on_side_stream(self._run_epoch, source.epoch_from(source.batch, order), coefs)
        lrs = tuple(group["lr"] for group in self.optimizer.param_groups)
        shapes = tuple((k, v.shape) for k, v in source.batch.items())
        key = (lrs, coefs.clip_coef, coefs.ent_coef, coefs.kl_beta, coefs.magnet_coef, shapes)
        if key != self._graph_key:
            self._static_in = {k: v.clone() for k, v in source.batch.items()}
            if order is not None:
                self._static_in[ORDER] = order.clone()
            self._graph, self._static_out = capture_graph(partial(self._epoch_body, source), self._static_in, coefs)
            self._graph_key, self._fed = key, weakref.ref(source)
        if self._fed is None or self._fed() is not source:  # a new update's batch: copied in once, for its epochs
            for name, value in source.batch.items():
                self._static_in[name].copy_(value)
            self._fed = weakref.ref(source)
        if order is not None:
            self._static_in[ORDER].copy_(order)
        assert self._graph is not None  # captured by this call or an earlier one
        self._graph.replay()
        return EpochSums(self._graph_names, self._static_out["sums"], self._static_out["last_kl"], None, source.steps)

    def _epoch_body(
        self, source: RowMinibatches, static_in: dict[str, Tensor], coefs: UpdateCoefficients
    ) -> dict[str, Tensor]:
        """The captured epoch: ``source``'s cuts (fixed for the graph's shapes) of the static batch
        in the static order."""
        batch = {k: v for k, v in static_in.items() if k != ORDER}
        epoch = self._run_epoch(source.epoch_from(batch, static_in.get(ORDER)), coefs)
        self._graph_names = epoch.names
        return {"sums": epoch.sums, "last_kl": epoch.last_kl}


ORDER = "epoch_order"
"""The captured epoch's static input holding its permutation of the rows."""


def ppo_update(
    policy: TrainedPolicy,
    optimizer: Optimizer,
    batch: dict[str, Tensor],
    cfg: PPOConfig,
    coefs: UpdateCoefficients,
    step: MinibatchStep | None = None,
) -> dict[str, float]:
    """Run ``cfg.update_epochs`` epochs of ``cfg.num_minibatches`` shuffled minibatches; return the
    mean of each loss metric over the minibatches that ran, plus ``epochs`` (fewer than asked when
    target_kl stopped early).

    A stack of seeds (``StackedActorCritic``) returns a list per metric, one value per seed, and
    each seed stops where its single run would: once target_kl has stopped a seed, it sits out the
    remaining steps (no Adam step, no count of its own: ``FusedAdam``'s ``members``) and its means are over the
    steps it took, while the others go on.

    ``step`` is the minibatch step to use (compiled / CUDA-graph one from the trainer); eager by
    default. Its ``minibatches`` cut the batch (``Minibatches``).

    A recurrent policy's batch (``RolloutBuffer.batch``) holds [T, N, ...] fields and the
    rollout's ``initial_state``: its minibatches are then whole env sequences (all T rows of a
    random subset of the envs, CleanRL's env-major scheme), which the policy re-runs from their
    initial states with the resets the rollout saw, reset rows masked. Chosen over fixed-length
    chunks with stored mid-rollout states (sb3-contrib): nothing but the first state is stored,
    and the re-run gives the rollout's own log-probs, so the first ratio is 1.

    Under torchrun (``step.world``) every rank runs this on its own batch: minibatch i of the run is
    the union of the ranks' minibatches i, its advantages normalised over all of it and each rank's
    gradient weighted by its share of the valid rows (``rank_shares``); the target-KL decision and
    the returned metrics are the ranks' means.
    """
    step = step or MinibatchStep(policy, optimizer, cfg)
    source = step.minibatches({k: batch[k] for k in MINIBATCH_KEYS if k in batch})
    if isinstance(coefs.kl_beta, list):  # a stack's betas, on the device once per update
        coefs = replace(coefs, kl_beta=torch.tensor(coefs.kl_beta, device=batch["obs"].device))
    going = [True] * source.runs  # the runs (a stack's seeds) target_kl has not stopped yet
    minibatches, epochs = [0] * source.runs, [0] * source.runs  # each run's steps and epochs
    sums: Tensor | None = None
    names: list[str] = []
    for _ in range(cfg.update_epochs):
        epoch = step.epoch(source, coefs, None if all(going) else going, sums)
        names, sums = epoch.names, epoch.sums
        minibatches = [n + epoch.steps * g for n, g in zip(minibatches, going)]
        epochs = [n + g for n, g in zip(epochs, going)]
        # One host sync per epoch, for the early stop only (CleanRL checks the last minibatch).
        if cfg.target_kl is not None:
            approx_kl = source.across_ranks(epoch.last_kl, epoch.share)
            going = [g and kl <= cfg.target_kl for g, kl in zip(going, approx_kl.view(-1).tolist())]
            if not any(going):
                break
    assert sums is not None  # every update runs a first minibatch
    source.world.mean_(sums)
    means = dict(zip(names, (sums / torch.tensor(minibatches, device=sums.device)).tolist()))
    means["epochs"] = source.one_per_run([float(n) for n in epochs])
    if cfg.objective == "kl":
        means["kl_after_update"] = kl_after_update(policy, source.in_order(), source.world)
    return means


class Minibatches(Protocol):
    """What ``ppo_update`` cuts a batch with: one run's rows (``RowMinibatches``), a torchrun
    rank's part of them (``RankMinibatches``) or each seed's of a stack (``SeedMinibatches``)."""

    runs: int
    """The runs trained together: 1, or a stack's seeds."""
    world: World

    def epoch(self, active: list[bool] | None = None) -> Iterator[tuple[dict[str, Tensor], RankShare | None]]:
        """One epoch's minibatches, each with this rank's share of it (None alone); ``active``: the
        runs whose epochs go on (None: all)."""

    def in_order(self) -> Iterator[dict[str, Tensor]]:
        """The minibatches of the batch in rollout order (``kl_after_update``)."""

    def across_ranks(self, value: Tensor, share: RankShare | None) -> Tensor:
        """A minibatch's ``value`` over every rank's part of it."""

    def one_per_run(self, values: list[float]) -> float | list[float]:
        """Per-run figures as ``ppo_update`` returns them (one run: a plain float)."""


def minibatch_source(
    policy: TrainedPolicy, cfg: PPOConfig, cudagraphs: bool, world: World
) -> Callable[[dict[str, Tensor]], Minibatches]:
    """How the update of ``policy`` on ``world`` cuts its batches (chosen once, by ``MinibatchStep``)."""
    if isinstance(policy, StackedActorCritic):
        return partial(SeedMinibatches, noise=policy.noise, num_minibatches=cfg.num_minibatches)
    if world.size > 1:
        return partial(RankMinibatches, num_minibatches=cfg.num_minibatches, world=world)
    # CUDA graphs need fixed shapes: that path keeps the reset rows and masks them instead.
    return partial(RowMinibatches, num_minibatches=cfg.num_minibatches, drop_reset_rows=not cudagraphs)


class RowMinibatches:
    """One run's minibatches (rows, or env sequences) in a lone process, shuffled each epoch when
    there are several (one full-batch minibatch's mean loss does not depend on the order), sizes
    differing by at most one when the rows do not divide evenly."""

    runs = 1
    world: World = LONE

    def __init__(self, batch: dict[str, Tensor], num_minibatches: int, drop_reset_rows: bool = True):
        self.sequences = "initial_state" in batch
        if drop_reset_rows and not self.sequences:
            # Drop the NEXT_STEP reset rows once (one host sync per update): every minibatch is then
            # all valid and the loss takes plain means, ~10% cheaper than masked ones on small MLPs.
            # index_select with the rows' indices found once: a boolean mask would find them again
            # for every field (a 65 536-row batch: 2.5 -> 0.65 ms).
            rows = batch.pop("valid").nonzero().squeeze(1)
            batch = {k: v.index_select(0, rows) for k, v in batch.items()}
        batch_size = batch["initial_state"].shape[0] if self.sequences else batch["obs"].shape[0]  # envs or rows
        # Fewer decisions than minibatches (a tiny batch of a turn-based game, whose rows are
        # decisions on their seat's turns only): one row each, never an empty minibatch's NaN mean.
        num_minibatches = max(1, min(num_minibatches, batch_size))
        self.batch, self.shuffle = batch, num_minibatches > 1
        self.bounds = [batch_size * i // num_minibatches for i in range(num_minibatches + 1)]

    @property
    def steps(self) -> int:
        """Minibatches an epoch."""
        return sum(start < end for start, end in zip(self.bounds[:-1], self.bounds[1:]))

    def permutation(self) -> Tensor | None:
        """An epoch's order of the rows (or envs), from the global generator; None for one minibatch."""
        return torch.randperm(self.bounds[-1], device=self.batch["obs"].device) if self.shuffle else None

    def epoch(self, active: list[bool] | None = None) -> Iterator[tuple[dict[str, Tensor], RankShare | None]]:
        return self.epoch_from(self.batch, self.permutation())

    def epoch_from(
        self, batch: dict[str, Tensor], order: Tensor | None
    ) -> Iterator[tuple[dict[str, Tensor], RankShare | None]]:
        """The minibatches of ``batch`` (this source's fields and shapes) taken in ``order``."""
        if order is not None:
            # One gather per field per epoch, then contiguous slices: not one gather per minibatch.
            batch = {
                k: v.index_select(1 if self.sequences and k != "initial_state" else 0, order) for k, v in batch.items()
            }
        for (start, end), share in zip(zip(self.bounds[:-1], self.bounds[1:]), self.shares(batch)):
            if start < end:
                yield minibatch(batch, start, end, self.sequences), share

    def shares(self, batch: dict[str, Tensor]) -> Sequence[RankShare | None]:
        return [None] * (len(self.bounds) - 1)

    def in_order(self) -> Iterator[dict[str, Tensor]]:
        return (
            minibatch(self.batch, start, end, self.sequences) for start, end in zip(self.bounds[:-1], self.bounds[1:])
        )

    def across_ranks(self, value: Tensor, share: RankShare | None) -> Tensor:
        return value

    def one_per_run(self, values: list[float]) -> float:
        return values[0]


class RankMinibatches(RowMinibatches):
    """A torchrun rank's part of the run's minibatches: reset rows kept and masked (every rank must
    run as many minibatches as the others), each with this rank's ``RankShare``."""

    def __init__(self, batch: dict[str, Tensor], num_minibatches: int, world: World):
        super().__init__(batch, num_minibatches, drop_reset_rows=False)
        self.world = world

    def shares(self, batch: dict[str, Tensor]) -> list[RankShare]:
        return rank_shares(self.world, batch, self.bounds, self.sequences)

    def across_ranks(self, value: Tensor, share: RankShare | None) -> Tensor:
        assert share is not None  # a rank's minibatches each come with its share
        return self.world.mean_(value * share.weight)


def rank_shares(world: World, shuffled: dict[str, Tensor], bounds: list[int], sequences: bool) -> list[RankShare]:
    """This rank's ``RankShare`` of each minibatch of an epoch, from one all-reduce of every
    minibatch's (valid rows, advantages' sum, sum of squares); with equal valid rows on every rank
    each weight is exactly 1."""
    valid = shuffled["valid"]
    advantages = torch.where(valid, shuffled["advantages"].double(), 0.0)  # where: a reset row's value never leaks
    moments = torch.stack([valid.double(), advantages, advantages.square()], dim=-1)
    if sequences:  # [T, N, 3]: minibatches are sets of envs
        moments = moments.sum(0)
    ends = nn.functional.pad(moments.cumsum(0), (0, 0, 1, 0))[bounds]
    local = ends[1:] - ends[:-1]
    total = world.sum_(local.clone())
    weights = (local[:, 0] * world.size / total[:, 0].clamp_min(1)).float()
    return [RankShare(weight, everyone) for weight, everyone in zip(weights, total)]


def minibatch(batch: dict[str, Tensor], start: int, end: int, sequences: bool) -> dict[str, Tensor]:
    """Rows ``start:end`` of a flat batch, or envs ``start:end`` of a sequence batch with their
    T rows flattened time-major (row t * B + b, the order ``recurrent_forward`` reads)."""
    if not sequences:
        return {k: v[start:end] for k, v in batch.items()}
    return {k: v[start:end] if k == "initial_state" else v[:, start:end].flatten(0, 1) for k, v in batch.items()}


@torch.no_grad()
def kl_after_update(
    policy: TrainedPolicy, minibatches: Iterable[dict[str, Tensor]], world: World = LONE
) -> float | list[float]:
    """KL(old || new) over the whole batch once the epochs are done: the mean k3 estimate
    (``core.kl_estimate``) of the rollout's actions under the updated policy, one forward per
    minibatch of the batch in order. The adaptive-KL rule (Schulman et al. 2017, sec. 4) adapts
    beta from this KL; the per-minibatch ``approx_kl`` is measured before each step and runs
    several times lower. Under torchrun, over every rank's batch: each rank then adapts beta
    alike. A stack of seeds' minibatches (``[seeds, rows]``) give one KL per seed."""
    total = count = torch.zeros((), device=next(policy.parameters()).device)
    for mb in minibatches:
        newlogprob = policy.evaluate(
            mb["obs"], mb["actions"], mb.get("action_masks"), mb.get("initial_state"), mb.get("valid")
        )[0]
        kl = kl_estimate(mb["logprobs"], newlogprob, "k3")
        valid = mb.get("valid")  # only the CUDA-graph, sequence and stack paths keep reset rows in the batch
        total = total + (kl if valid is None else torch.where(valid, kl, 0.0)).sum(-1)
        count = count + (kl.shape[-1] if valid is None else valid.sum(-1))
    total, count = world.sum_(torch.stack([total, count]))
    return (total / count).tolist()
