"""Hidden-layer activations: ``nn.ReLU``, and ``Tanh``, nn.Tanh with a faster CPU path.

PyTorch's CPU ``tanh`` kernel runs at ~2 ns per element in the torch builds we measured, about 7x
its vectorised ``sigmoid`` (benchmarks/README.md, "tanh"). On the large minibatches of tensor-env
training that made tanh a sixth of the update. For large CPU tensors ``Tanh`` therefore computes
the identity tanh(x) = 2 sigmoid(2x) - 1 (float32 results within 2e-7 of ``torch.tanh``) and
backpropagates with tanh's own derivative, 1 - tanh(x)^2. Small tensors, GPUs, and code being
compiled or exported keep ``torch.tanh``, which is as fast or faster there.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

SIGMOID_TANH_MIN_ELEMENTS = 8192
"""Below this many elements the one-kernel torch.tanh is as fast (per-op overhead dominates)."""


def _sigmoid_tanh(x: Tensor) -> Tensor:
    # -1 + 2 sigmoid(x + x) with no Python-scalar operand: sigmoid(x * 2).mul_(2).sub_(1) paid 3
    # scalar-to-tensor wrappings, each about as costly as a small op on CPU (17.0 -> 13.8 us on a
    # 512x64 float32 tensor). Same rounding: x + x and 2 s are exact.
    return torch.add(x.new_full((), -1.0), torch.sigmoid(x + x), alpha=2)


class _SigmoidTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = _sigmoid_tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def tanh(x: Tensor) -> Tensor:
    """``torch.tanh(x)``, through the sigmoid identity where that is faster (see the module docstring)."""
    if not x.is_cpu or x.numel() < SIGMOID_TANH_MIN_ELEMENTS or torch.compiler.is_compiling() or torch.jit.is_tracing():
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _SigmoidTanh.apply(x)
    return _sigmoid_tanh(x)  # no graph to record (rollout, evaluation)


class Tanh(nn.Tanh):
    """``nn.Tanh`` computed by :func:`tanh`."""

    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": Tanh, "relu": nn.ReLU}
"""The hidden-layer activations a policy config can name (``policy.activation``)."""
