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
    """The optimizer a run trains with (``update.make_optimizer``: ``torch.optim.Adam``,
    ``FusedAdam`` or a stack's ``SeedAdam``), as the update, the schedules and checkpoints use it."""

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
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
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

    def step(self) -> None:
        """One Adam step on every parameter with a gradient (torch.optim.Adam's fused path)."""
        with torch.no_grad():
            for group in self.param_groups:
                # (parameter, gradient) of each parameter with a gradient, by device and dtype
                by_kind: dict[tuple[torch.device, torch.dtype], list[tuple[Tensor, Tensor]]] = defaultdict(list)
                for p in group["params"]:
                    if p.grad is not None:
                        by_kind[(p.device, p.dtype)].append((p, p.grad))
                for pairs in by_kind.values():
                    same = [p for p, _ in pairs]
                    states = [self._state(p) for p in same]
                    adam_step(
                        group,
                        same,
                        [grad for _, grad in pairs],
                        [s["exp_avg"] for s in states],
                        [s["exp_avg_sq"] for s in states],
                        [s["step"] for s in states],
                    )

    def _state(self, p: Tensor) -> dict[str, Tensor]:
        state = self.state[p]
        if not state:  # lazily, at the first step, as torch.optim.Adam
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

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
