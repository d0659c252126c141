"""Hidden-layer activations: ``nn.ReLU``, and ``Tanh``, nn.Tanh with a faster CPU path.

PyTorch's CPU ``tanh`` kernel runs at ~2 ns per element in the torch builds we measured, about 7x
its vectorised ``sigmoid`` (benchmarks/README.md, "tanh"). On the large minibatches of tensor-env
training that made tanh a sixth of the update. For large CPU tensors ``Tanh`` therefore computes
the identity tanh(x) = 2 sigmoid(2x) - 1 (float32 results within 2e-7 of ``torch.tanh``) and
backpropagates with tanh's own derivative, 1 - tanh(x)^2. Small tensors, GPUs, and code being
compiled or exported keep ``torch.tanh``, which is as fast or faster there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.autograd.function import BackwardCFunction, FunctionCtx

SIGMOID_TANH_MIN_ELEMENTS = 8192
"""Below this many elements the one-kernel torch.tanh is as fast (per-op overhead dominates)."""


def _from_sigmoid_(s: Tensor) -> Tensor:
    """2s - 1 over s (2s is exact: one rounding), with no Python-scalar operand:
    s.mul_(2).sub_(1) paid scalar-to-tensor wrappings, each about as costly as a small op on CPU
    (17.0 -> 13.8 us for the whole tanh of a 512x64 float32 tensor). Under vmap (a population,
    ``policies.population``), which batches no ``out=`` op, the same sum into a new tensor."""
    if torch._C._functorch.is_batchedtensor(s):
        return torch.add(s.new_full((), -1.0), s, alpha=2)
    return torch.add(s.new_full((), -1.0), s, alpha=2, out=s)


def _sigmoid_tanh(x: Tensor) -> Tensor:
    # -1 + 2 sigmoid(x + x), the last op over the fresh sigmoid (x + x is exact too).
    return _from_sigmoid_(torch.sigmoid(x + x))


def _sigmoid_tanh_(x: Tensor) -> Tensor:
    # _sigmoid_tanh in x's own memory: the same ops, so the same rounding (2x is exact).
    return _from_sigmoid_(torch.sigmoid_(x.add_(x)))


def tanh_of_sum_(z: Tensor, bias: Tensor) -> Tensor:
    """tanh(z + bias) written over ``z``, a fresh matmul output no other op keeps (``bias``
    broadcasts over its rows): a hidden layer as matmul, then this. On the sigmoid path the bias
    joins the identity's first pass, 2z + 2b = 2 (z + b) to the bit, where addmm/baddbmm would
    first copy the bias into every row of their output: on a 64-seed stack's [64, 512, 64]
    activations a pass of 8 MB from memory (a 64-seed CartPole update: 5-9% less time,
    benchmarks/README.md). Equal to the bit to :func:`tanh` of the addmm where the BLAS adds
    the bias after the product (MKL, x86: tests/policies/test_activations.py)."""
    if not z.is_cpu or z.numel() < SIGMOID_TANH_MIN_ELEMENTS:
        return torch.tanh_(z.add_(bias))
    return _from_sigmoid_(torch.sigmoid_(torch.add(bias + bias, z, alpha=2, out=z)))


class _SigmoidTanh(torch.autograd.Function):
    generate_vmap_rule = True  # a population's members run it under vmap

    @staticmethod
    def forward(x: Tensor, in_place: bool) -> Tensor:
        return _sigmoid_tanh_(x) if in_place else _sigmoid_tanh(x)

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Tensor, bool], output: Tensor) -> None:
        if inputs[1]:
            ctx.mark_dirty(inputs[0])
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: BackwardCFunction, grad: Tensor) -> tuple[Tensor, None]:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y), None


def _elements(x: Tensor) -> int:
    """What a kernel over ``x`` runs on: under vmap (a population) every member's elements."""
    while torch._C._functorch.is_batchedtensor(x):
        x = torch._C._functorch.get_unwrapped(x)
    return x.numel()


def _tanh(x: Tensor, in_place: bool) -> Tensor:
    if (
        not x.is_cpu
        or _elements(x) < SIGMOID_TANH_MIN_ELEMENTS
        or torch.compiler.is_compiling()
        or torch.jit.is_tracing()
    ):
        return torch.tanh_(x) if in_place else torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _SigmoidTanh.apply(x, in_place)
    return _sigmoid_tanh_(x) if in_place else _sigmoid_tanh(x)  # no graph to record (rollout, evaluation)


def tanh(x: Tensor) -> Tensor:
    """``torch.tanh(x)``, through the sigmoid identity where that is faster (see the module docstring)."""
    return _tanh(x, in_place=False)


def tanh_(x: Tensor) -> Tensor:
    """:func:`tanh` in ``x``'s own memory (see ``IN_PLACE_ACTIVATIONS``)."""
    return _tanh(x, in_place=True)


class Tanh(nn.Tanh):
    """``nn.Tanh`` computed by :func:`tanh`."""

    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": Tanh, "relu": nn.ReLU}
"""The hidden-layer activations a policy config can name (``policy.activation``)."""

IN_PLACE_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"tanh": tanh_, "relu": torch.relu_}
"""The same activations written over their input, for code that applies them to a fresh
pre-activation which no other op keeps for its backward (a matmul's output): no new tensor per
layer, same values to the bit. On a 64-seed stack's ``[64, 512, 64]`` activations (8 MB each,
more than the cache keeps) that saved 5-9% of a CartPole update (benchmarks/README.md)."""
