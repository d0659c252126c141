"""Adam for the PPO update, without torch.optim's first-use cost.

``torch.optim.Optimizer`` imports ``torch._dynamo`` the first time an optimizer is built or
stepped (its ``__init__``, ``step``, ``state_dict`` and ``load_state_dict`` go through
``torch._disable_dynamo`` or a dynamo graph break): ~1.3 s on the reference machine (2 CPU
cores), more than a third of a fresh ``fastppo train CartPole-v1``'s time to solve, for a module
the eager update never uses (benchmarks/README.md, "Cold start").

``FusedAdam`` runs the kernel ``torch.optim.Adam(fused=True)`` runs (``torch._fused_adam_``) on
the same state (``step`` as a float32 tensor on the parameter's device, ``exp_avg``,
``exp_avg_sq``), so the same seed gives bit-identical weights, and its ``state_dict`` has
``torch.optim.Adam``'s layout, so checkpoints written by either load into the other. It covers
what the PPO update uses (no amsgrad, maximize, weight-decay variants or hooks); anything else,
and CUDA-graph capture (``capturable``), uses ``torch.optim.Adam`` (``update.make_optimizer``).
"""

from __future__ import annotations

from collections import defaultdict
from copy import deepcopy
from typing import Any, Protocol

import torch
from torch import Tensor, nn

DEVICES = ("cpu", "cuda")
"""Devices FusedAdam is used on (torch has a fused Adam kernel for both)."""


class Optimizer(Protocol):
    """The optimizer a run trains with (``update.make_optimizer``: ``torch.optim.Adam`` or
    ``FusedAdam``, a stack's with one Adam per seed), as the update, the schedules and checkpoints use it."""

    param_groups: list[dict[str, Any]]

    def step(self) -> object: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def fused_adam_available(device: torch.device) -> bool:
    """Whether ``FusedAdam`` can run on ``device`` with this torch build."""
    return device.type in DEVICES and hasattr(torch, "_fused_adam_")


def adam_step(
    group: dict[str, Any],
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    steps: list[Tensor],
) -> None:
    """One Adam step of each tensor of ``params`` with ``group``'s settings, as torch.optim.Adam's
    fused path makes it: count the steps, then one fused kernel."""
    beta1, beta2 = group["betas"]
    torch._foreach_add_(steps, 1)
    torch._fused_adam_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        amsgrad=False,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


class FusedAdam:
    """Adam (Kingma & Ba 2015) as ``torch.optim.Adam(params, lr, betas, eps, fused=True)``.

    Exposes what code written for a torch optimizer reads: ``param_groups`` (set ``lr`` there),
    ``state``, ``defaults``, ``step()``, ``zero_grad()``, ``state_dict()``, ``load_state_dict()``.

    With ``members`` (a population of networks: a stack of seeds' one flat ``[members * P]``
    parameter, member-major), each member's row is an Adam of its own, stepped as its single run's
    FusedAdam steps its flat parameter: as a tensor of its own (the fused kernel's rounding of an
    element depends on its position in its tensor) with a step count of its own (``state["step"]``
    is ``[members]``), so that ``step(active)`` can leave out the members whose epochs
    ``--target-kl`` has stopped: their weights, moments and bias correction stay as they are.
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        members: int | None = None,
    ):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        for p in params:
            if not (isinstance(p, Tensor) and p.is_floating_point() and p.device.type in DEVICES):
                raise ValueError(f"FusedAdam needs floating-point parameters on {' or '.join(DEVICES)}")
        # The keys and order of torch.optim.Adam(fused=True)'s param group: identical state_dicts.
        self.defaults: dict[str, Any] = {
            "lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "amsgrad": False,
            "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": True,
            "decoupled_weight_decay": False,
        }  # fmt: skip
        self.param_groups: list[dict[str, Any]] = [{**self.defaults, "params": params}]
        self.state: defaultdict[Tensor, dict[str, Tensor]] = defaultdict(dict)
        self.members = members
        self._rows: dict[Tensor, list[tuple[Tensor, ...]]] = {}  # a population's per-member views, made once

    def step(self, active: list[bool] | None = None) -> None:
        """One Adam step on every parameter with a gradient (torch.optim.Adam's fused path); of a
        population, of every member or of the members ``active`` marks."""
        with torch.no_grad():
            for group in self.param_groups:
                # (weights, gradient, moments, step count) of each parameter (member) with a gradient, by kind
                by_kind: dict[tuple[torch.device, torch.dtype], list[tuple[Tensor, ...]]] = defaultdict(list)
                for p in group["params"]:
                    if p.grad is not None:
                        by_kind[(p.device, p.dtype)] += self._member_rows(p)
                for rows in by_kind.values():
                    taken = rows if active is None else [row for row, going in zip(rows, active) if going]
                    adam_step(group, *map(list, zip(*taken)))

    def _member_rows(self, p: Tensor) -> list[tuple[Tensor, ...]]:
        """(weights, gradient, moments, step count) of ``p``, or of each member's row of it: views
        of its tensors, made once (per state: ``load_state_dict`` and ``keep`` replace it)."""
        state, grad = self._state(p), p.grad
        assert grad is not None  # step takes the parameters with a gradient
        if self.members is None:
            return [(p, grad, state["exp_avg"], state["exp_avg_sq"], state["step"])]
        if p not in self._rows:
            rows = (t.view(self.members, -1).unbind() for t in (p, grad, state["exp_avg"], state["exp_avg_sq"]))
            self._rows[p] = list(zip(*rows, state["step"].unbind()))
        return self._rows[p]

    def _state(self, p: Tensor) -> dict[str, Tensor]:
        state = self.state[p]
        if not state:  # lazily, at the first step, as torch.optim.Adam
            steps = () if self.members is None else (self.members,)
            state["step"] = torch.zeros(steps, dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def keep(self, indices: list[int], param: Tensor) -> None:
        """Of a population over one parameter, keep only the members at ``indices``: their rows of
        the moments and step counts, now for ``param`` (the stack's new ``flat``,
        ``StackedActorCritic.keep``)."""
        assert self.members is not None  # a population's
        group = self.param_groups[0]
        (old,) = group["params"]
        state = self.state.pop(old, {})
        group["params"] = [param]
        if state:
            self.state[param] = {
                slot: value[indices] if slot == "step" else value.view(self.members, -1)[indices].view_as(param)
                for slot, value in state.items()
            }
        self.members = len(indices)
        self._rows = {}

    def zero_grad(self) -> None:
        """Zero the gradients in place (never None: ``optim.flatten_parameters`` needs them kept)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Optimizer.state_dict``'s layout: parameters numbered in group order."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            groups.append(
                {**{k: v for k, v in group.items() if k != "params"}, "params": [index[id(p)] for p in group["params"]]}
            )
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state from ``state_dict`` (this class's or ``torch.optim.Adam``'s), with torch's
        checks and casts: moments to the parameter's dtype and device, ``step`` to float32."""
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(self.param_groups, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
            )
        id_map = {i: p for g, s in zip(self.param_groups, saved_groups) for i, p in zip(s["params"], g["params"])}
        self.state = defaultdict(dict)
        for i, slots in state_dict["state"].items():
            if i in id_map:
                p = id_map[i]
                dtype = {"step": torch.float32}
                self.state[p] = {
                    k: v.to(dtype=dtype.get(k, p.dtype), device=p.device, copy=True) for k, v in slots.items()
                }
        self.param_groups = [{**s, "params": g["params"]} for g, s in zip(self.param_groups, saved_groups)]
        self._rows = {}


def flatten_parameters(module: nn.Module) -> nn.Parameter:
    """Move every parameter of ``module``, and its gradient, into one contiguous buffer.

    Each parameter keeps its name and shape but becomes a view of one flat tensor, and its
    ``.grad`` a view of one flat gradient that autograd accumulates into in place. The returned
    Parameter is that flat tensor, with the flat gradient as its ``.grad``: zeroing, norm
    clipping and Adam then each touch one tensor instead of one per layer: ~15% of a 64-64 MLP's
    minibatch step on CPU in isolation, ~7% of a whole CartPole update (benchmarks/README.md),
    since per-tensor dispatch there costs more than the arithmetic. Gradients must then be
    zeroed, never set to None: None would cut a parameter's gradient loose from the flat one.
    """
    params = list(module.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        p.grad = grad[offset : offset + n].view_as(p)
        offset += n
    flat_parameter = nn.Parameter(flat)
    flat_parameter.grad = grad
    return flat_parameter
