"""Data-parallel RLHF and DPO under torchrun: ``torchrun --nproc-per-node N -m fastppo rlhf|dpo ...``.

Every rank runs the whole trainer on its own share of each step's prompts (or preference pairs) and
samples with its own seed; the ranks meet in the collectives of ``Ranks``. The gradients are averaged
by one explicit all-reduce per optimizer step (``Ranks.average_gradients``), not by wrapping the
models in torch's DistributedDataParallel: an optimizer step here accumulates micro-batches and an
RLHF step is mostly generation, so DDP's overlap of the all-reduce with the backward pass would hide
little, while its wrapper would stand between the trainer and what it calls on the models besides
their forward (``generate``, peft's ``disable_adapter``, ``save_pretrained``, the shared critic's
head read from the policy's hidden states), and need ``no_sync`` around every accumulating
micro-batch. It is also how the Gymnasium trainer averages its gradient (:mod:`fastppo.training.distributed`).

With ``--fsdp`` the policy, the reference and the critic are sharded instead (FSDP2's
``fully_shard``, i.e. FULL_SHARD: each transformer block its own unit, all-gathered for its forward
and backward only, gradients reduce-scattered), so a model needs 1/N of its weights, gradients and
AdamW state per device; FSDP averages the gradients itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch import Tensor, nn

from fastppo.rlhf.config import ModelConfig
from fastppo.training.distributed import World

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from fastppo.rlhf.models import Models

T = TypeVar("T")

BUCKET_BYTES = 25 << 20
"""Gradients are all-reduced in flat buckets of about this size (DDP's default): few collectives,
and at most one bucket of extra memory."""


@dataclass(frozen=True)
class Ranks:
    """This process's part in an RLHF/DPO run: a rank of ``world`` under torchrun, or the only
    process (``world`` None), for which every method below is the identity or nothing at all."""

    world: World | None = None
    fsdp: bool = False

    @property
    def size(self) -> int:
        return 1 if self.world is None else self.world.size

    @property
    def rank(self) -> int:
        return 0 if self.world is None else self.world.rank

    @property
    def main(self) -> bool:
        """Rank 0: the one that logs, shows progress and writes checkpoints."""
        return self.rank == 0

    def load_config(self, model: ModelConfig) -> ModelConfig:
        """``model`` loaded onto this rank's device (cuda:LOCAL_RANK for ``--device cuda``); with FSDP
        onto the CPU, from where ``prepare`` moves each rank's shard to the device."""
        if self.world is None:
            return model
        return replace(model, device="cpu" if self.fsdp else str(self.world.device))

    def reseed(self, seed: int) -> None:
        """Under torchrun, rank r samples with ``seed + r`` from here on (the models were
        initialised alike from ``seed``); one process keeps its stream."""
        if self.world is not None:
            torch.manual_seed(self.world.seed(seed, 1))

    def share(self, items: list[int]) -> list[int]:
        """This rank's consecutive part of a step's ``items`` (every rank's together)."""
        per_rank = len(items) // self.size
        return items[self.rank * per_rank : (self.rank + 1) * per_rank]

    def gather(self, tensor: Tensor) -> Tensor:
        """Every rank's rows (the same number on each), rank 0's first."""
        return tensor if self.world is None else self.world.gather(tensor)

    def own(self, tensor: Tensor) -> Tensor:
        """This rank's rows of a ``gather``-ed tensor."""
        return tensor.chunk(self.size)[self.rank]

    def sum(self, tensor: Tensor) -> Tensor:
        return tensor if self.world is None else self.world.sum_(tensor.clone())

    def mean_metrics(self, metrics: dict[str, Tensor]) -> dict[str, Tensor]:
        """Scalar metrics averaged over the ranks (each rank's over the same number of items)."""
        if self.world is None or not metrics:
            return metrics
        means = self.world.mean_(
            torch.stack(
                [torch.as_tensor(value, dtype=torch.float32, device=self.world.device) for value in metrics.values()]
            )
        )
        return dict(zip(metrics, means))

    def advantage_moments(self, advantages: Tensor, mask: Tensor) -> Tensor | None:
        """(count, sum, sum of squares) of the valid advantages of every rank, for whitening over
        the whole batch; None in one process (whitened over its own batch)."""
        if self.world is None:
            return None
        valid = torch.where(mask, advantages.double(), 0.0)
        return self.world.sum_(torch.stack([mask.sum().double(), valid.sum(), valid.square().sum()]))

    def prepare(self, models: Models) -> None:
        """The same start on every rank: rank 0's trainable weights broadcast, or with FSDP every
        model sharded over the ranks (build the optimizer after this, on the sharded parameters)."""
        if self.world is None:
            return
        if not self.fsdp:
            self.world.broadcast_(p.data for p in models.trainable_parameters())
            return
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(self.world.device.type, (self.size,))
        trunk = models.critic.trunk if models.critic is not None else None
        for model in (models.policy, models.reference, trunk):
            if model is not None:
                _shard(model, mesh)
        # Generation stops when every row has ended, at a different step on each rank: transformers'
        # synced_gpus keeps the ranks' forward passes (and so FSDP's all-gathers) in step.
        # (torch's Module types any attribute it does not declare as Tensor | Module)
        models.policy._is_fsdp_managed_module = True  # type: ignore[assignment]

        if models.critic is not None:
            _shard(models.critic.head, mesh)

    def average_gradients(self, params: list[nn.Parameter]) -> None:
        """Each gradient replaced by its mean over the ranks: the gradient of the joined batch,
        since every rank accumulates as many micro-batches of the same size. Called between the
        last backward and the (un)scale/clip/step, so every rank steps alike, fp16's skipped
        steps included. FSDP has reduced the gradients itself."""
        if self.world is None or self.fsdp:
            return
        for bucket in _buckets([p.grad for p in params if p.grad is not None]):
            flat = self.world.mean_(torch.cat([grad.reshape(-1) for grad in bucket]))
            for grad, part in zip(bucket, flat.split([grad.numel() for grad in bucket])):
                grad.copy_(part.view_as(grad))

    def gather_objects(self, value: T) -> list[T]:
        # every rank passes a value of the same type
        return [value] if self.world is None else cast(list[T], self.world.gather_objects(value))

    def full_state(self, module: nn.Module) -> dict[str, Tensor] | None:
        """Under FSDP, ``module``'s whole state dict gathered on rank 0 (in CPU memory), None on the
        other ranks; every rank must call it. Without FSDP, None: the module holds its full weights."""
        if not self.fsdp:
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # a full state dict's values are the tensors (torch annotates any nested state)
        state = cast(
            dict[str, Tensor],
            get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True)),
        )
        if not self.main:
            return None
        # A tied weight (GPT-2's lm_head is wte) comes back as two copies, which save_pretrained
        # would write twice: keep its first name only, as the unsharded model's state dict does.
        first: dict[int, str] = {}
        aliases = [
            name for name, p in module.named_parameters(remove_duplicate=False) if first.setdefault(id(p), name) != name
        ]
        return {name: value for name, value in state.items() if name not in aliases}

    def full_optimizer_state(self, models: Models, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state dict with whole tensors, as one process's: indexed by the position
        of each parameter in the optimizer (rank 0's; empty on the others under FSDP)."""
        if not self.fsdp:
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        # torch's nested ValueType does not narrow by key: read it as the optimizer's state dict it is
        state = cast(
            dict[str, Any],
            get_optimizer_state_dict(
                _trained(models), optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            ),
        )
        if not self.main:
            return {"state": {}, "param_groups": []}
        names = [name for group in state["param_groups"] for name in group["params"]]
        index = {name: i for i, name in enumerate(names)}
        groups = [{**group, "params": [index[name] for name in group["params"]]} for group in state["param_groups"]]
        return {"state": {index[name]: slots for name, slots in state["state"].items()}, "param_groups": groups}

    def load_optimizer_state(self, models: Models, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """``optimizer.load_state_dict`` of a ``full_optimizer_state``; under FSDP each rank keeps its shard."""
        if not self.fsdp:
            optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import (
            OptimizerStateType,
            StateDictOptions,
            set_optimizer_state_dict,
        )

        modules = _trained(models)
        names = {param: name for name, param in modules.named_parameters()}
        order = [names[param] for group in optimizer.param_groups for param in group["params"]]
        groups = [{**group, "params": [order[i] for i in group["params"]]} for group in state["param_groups"]]
        full = {"state": {order[i]: slots for i, slots in state["state"].items()}, "param_groups": groups}
        set_optimizer_state_dict(
            modules, optimizer, cast(OptimizerStateType, full), options=StateDictOptions(full_state_dict=True)
        )


ONE_PROCESS = Ranks()
"""The ranks of a run without torchrun: the default of every function that takes ``ranks``."""


def _trained(models: Models) -> nn.ModuleDict:
    """The modules the optimizer trains, as one module: FSDP's state-dict functions name its
    parameters by their path in it."""
    return nn.ModuleDict({"policy": models.policy} | ({"critic": models.critic} if models.critic is not None else {}))


def _shard(model: nn.Module, mesh: DeviceMesh) -> None:
    """FULL_SHARD ``model``: each of its transformer blocks (the classes transformers never splits
    across devices, ``_no_split_modules``) an FSDP unit, the rest (embeddings, head) the root's."""
    from torch.distributed.fsdp import fully_shard

    blocks = {name for module in model.modules() for name in (getattr(module, "_no_split_modules", None) or ())}
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _buckets(grads: list[Tensor]) -> Iterator[list[Tensor]]:
    bucket: list[Tensor] = []
    size = 0
    for grad in grads:
        bucket.append(grad)
        size += grad.numel() * grad.element_size()
        if size >= BUCKET_BYTES:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket
