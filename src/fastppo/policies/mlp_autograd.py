"""Whole MLPs (hidden layers and output layer) as one autograd node, its backward written out.

Autograd records about five nodes per ``Linear`` + activation (addmm, transpose, activation, two
gradient accumulations) and walks them one by one in the backward; for the 64-unit networks of
classic-control and MuJoCo PPO on CPU that bookkeeping costs as much as the matmuls. ``mlps_one_node``
computes exactly what the ``nn.Sequential``s compute and returns the same gradients
(tests/policies/test_mlp_autograd.py checks them against autograd's in float64), as one node whose backward
is textbook backprop: per layer one matmul for the weight gradient, one sum for the bias, one
matmul and one activation derivative for the layer below. Each weight-gradient matmul also puts
the narrower side first: MKL's sgemm takes 27 µs for ``[64, 512] @ [512, 2]`` (autograd's
form for a 2-action output layer) and 4.6 µs for the same product as ``[2, 512] @ [512, 64]``.
A CartPole minibatch step of 512 rows (forward, backward, clip, Adam): 1 000 -> 910 µs
(benchmarks/README.md, "One autograd node per MLP pair"). A wide batch (a tensor env's 65 536
rows) runs forward and backward in blocks of rows that stay in cache (``row_blocks``).

The same node trains a stack of seeds (``fastppo.training.seed_stack``: ``[S, rows, in]`` rows, ``[S, out,
in]`` weights, batched matmuls). There each activation is an 8 MB tensor that the cache does not
keep, so the node also saves passes over memory: activations and their gradients are written over
the fresh products they come from, and a tanh layer's bias goes in with its activation
(``activations.tanh_of_sum_``); a 64-seed CartPole update 335 -> 239 ms (benchmarks/README.md).
"""

from __future__ import annotations

from typing import Protocol, TypeVar, cast

import torch
from torch import Tensor, nn

from fastppo.policies.activations import ACTIVATIONS, IN_PLACE_ACTIVATIONS, tanh_of_sum_

MIN_ROWS = 128
"""Below this many rows the Python cost of a custom node outweighs the autograd bookkeeping it
saves (a HalfCheetah minibatch of 64: 566 µs per step with the modules, 583 µs with one node;
CartPole at 128 rows: 656 -> 608 µs)."""


def one_node_pays(rows: Tensor) -> bool:
    """Whether the one node pays for ``rows`` (``[batch, in]``, or a stack's ``[S, batch, in]``):
    a CPU forward that records gradients (the update) on at least MIN_ROWS rows, outside
    compiled or traced code (GPUs and compiled code gain nothing from it)."""
    return (
        torch.is_grad_enabled()
        and rows.is_cpu
        and rows.shape[-2] >= MIN_ROWS
        and not (torch.compiler.is_compiling() or torch.jit.is_tracing())
    )


_ACTIVATION_NAMES = {module: name for name, module in ACTIVATIONS.items()}


def mlp_layers(encoder: nn.Module) -> tuple[list[nn.Linear], str | None] | None:
    """The Linear layers and activation name of a ``Flatten, (Linear, act)*`` MLP encoder (the
    activation is None when it has no hidden layer), or None for any other module."""
    modules = list(encoder) if isinstance(encoder, nn.Sequential) else [encoder]
    if not modules or not isinstance(modules[0], nn.Flatten):
        return None
    layers, activations = modules[1::2], modules[2::2]
    linears = [m for m in layers if isinstance(m, nn.Linear)]
    kinds = {type(m) for m in activations}
    if (
        len(layers) != len(activations)
        or len(linears) != len(layers)
        or len(kinds) > 1
        or not kinds <= _ACTIVATION_NAMES.keys()
    ):
        return None
    return linears, (_ACTIVATION_NAMES[kinds.pop()] if kinds else None)


def affine(bias: Tensor, x: Tensor, weight: Tensor, out: Tensor | None = None) -> Tensor:
    """x W^T + b in one op: ``[rows, in]`` with ``[out, in]`` weights, or a stack's ``[S, rows, in]``
    with ``[S, out, in]`` weights and ``[S, out]`` biases; written into ``out`` if given."""
    if x.dim() == 2:
        return torch.addmm(bias, x, weight.t(), out=out)
    return torch.baddbmm(bias.unsqueeze(-2), x, weight.mT, out=out)


ROW_BLOCK = 2048
"""Rows per block of a wide batch (see ``row_blocks``): a 64-unit layer's block of activations is
512 KB, which the L2 cache keeps between the matmul that writes it and the ops that read it."""


def row_blocks(x: Tensor) -> list[slice | None]:
    """The row blocks the node runs a batch in: blocks of ``ROW_BLOCK`` rows for a wide 2-D batch,
    else ``[None]``, the whole batch at once. Layer after layer over the whole of a wide batch
    streams every activation through main memory several times (a 65 536-row CartPole batch's
    are 16 MB each); block by block they stay in cache, and the matmuls run faster too: the MLP
    forward and backward of a 1 024 x 64 tensor-env CartPole update (65 536 rows, 64-64 actor and
    critic), 162 -> 99 ms of CPU time (median of 6, one thread, on a busy 2-core machine). A stack
    of seeds' ``[S, rows, in]`` batches keep one block (their blocks would be strided)."""
    rows = x.shape[0]
    if x.dim() != 2 or rows < 2 * ROW_BLOCK:
        return [None]
    return [slice(start, start + ROW_BLOCK) for start in range(0, rows, ROW_BLOCK)]


_MaybeTensor = TypeVar("_MaybeTensor", Tensor, Tensor | None)


def _rows(t: _MaybeTensor, block: slice | None) -> _MaybeTensor:
    """Rows ``block`` of ``t`` (all of it for the None block; no tensor stays none)."""
    return t if t is None or block is None else t[block]


def _hidden(bias: Tensor, x: Tensor, weight: Tensor, activation: str, out: Tensor | None = None) -> Tensor:
    """act(x W^T + b), a hidden layer's output, in a fresh tensor or written into ``out``; a tanh
    layer's bias goes in with its activation (``activations.tanh_of_sum_``)."""
    if activation == "tanh":
        return tanh_of_sum_(torch.matmul(x, weight.mT, out=out), bias if x.dim() == 2 else bias.unsqueeze(-2))
    return IN_PLACE_ACTIVATIONS[activation](affine(bias, x, weight, out))


def _activation_grad_(grad: Tensor, output: Tensor, activation: str) -> Tensor:
    """dL/dz from dL/dh and h = act(z), written over ``grad`` (a fresh product no one else holds):
    tanh' = 1 - h^2; relu' = [h > 0]."""
    if activation == "tanh":
        return torch.ops.aten.tanh_backward.grad_input(grad, output, grad_input=grad)
    return torch.ops.aten.threshold_backward.grad_input(grad, output, 0.0, grad_input=grad)


def _weight_grad(grad: Tensor, inputs: Tensor) -> Tensor:
    """grad^T @ inputs (``[out, in]``, or ``[S, out, in]`` for a stack), with the narrower side as
    the product's rows (see module doc: a 2-unit head's gradient is 6x cheaper so in MKL)."""
    if grad.shape[-1] <= inputs.shape[-1]:
        return torch.matmul(grad.mT, inputs)
    return torch.matmul(inputs.mT, grad).mT


def _accumulate(total: Tensor | None, part: Tensor) -> Tensor:
    """A parameter's gradient summed over the row blocks (the first block's is the sum so far)."""
    return part if total is None else total.add_(part)


def _split(
    depths: tuple[int, ...], weights_and_biases: tuple[Tensor, ...]
) -> list[tuple[tuple[Tensor, ...], tuple[Tensor, ...]]]:
    """Each net's (weights, biases) from the flat (weight, bias, weight, bias, ...) of all nets."""
    nets, offset = [], 0
    for depth in depths:
        layer = weights_and_biases[offset : offset + 2 * depth]
        nets.append((layer[0::2], layer[1::2]))
        offset += 2 * depth
    return nets


def _forward(
    activation: str | None, depths: tuple[int, ...], x: Tensor, weights_and_biases: tuple[Tensor, ...]
) -> tuple[list[Tensor], list[Tensor]]:
    """The nets' outputs, and what their backward reads (each net's hidden activations, then its
    weights): fresh tensors for a batch run whole, written block by block into tensors allocated
    first for a wide one (``row_blocks``)."""
    nets = _split(depths, weights_and_biases)
    blocks = row_blocks(x)
    whole = blocks == [None]
    hidden: list[list[Tensor | None]] = [
        [None if whole else x.new_empty(*x.shape[:-1], w.shape[-2]) for w in weights[:-1]] for weights, _ in nets
    ]
    outputs: list[Tensor | None] = [
        None if whole else x.new_empty(*x.shape[:-1], weights[-1].shape[-2]) for weights, _ in nets
    ]
    for block in blocks:
        for n, ((weights, biases), activations) in enumerate(zip(nets, hidden)):
            h = _rows(x, block)
            for j, (weight, bias) in enumerate(zip(weights[:-1], biases[:-1])):
                assert activation is not None  # a hidden layer has one (mlp_layers)
                h = _hidden(bias, h, weight, activation, _rows(activations[j], block))
                activations[j] = h if whole else activations[j]
            out = affine(biases[-1], h, weights[-1], _rows(outputs[n], block))
            outputs[n] = out if whole else outputs[n]
    # Every slot holds a tensor now: a whole batch's were assigned, a wide one's allocated first.
    written = cast(list[list[Tensor]], hidden)
    saved = [t for (weights, _), activations in zip(nets, written) for t in (*activations, *weights)]
    return cast(list[Tensor], outputs), saved


class _Context(Protocol):
    """What ``_MLPsFunction``'s ctx carries from its forward to its backward."""

    activation: str | None
    depths: tuple[int, ...]
    saved_tensors: tuple[Tensor, ...]
    needs_input_grad: tuple[bool, ...]

    def save_for_backward(self, *tensors: Tensor) -> None: ...


class _MLPsFunction(torch.autograd.Function):
    """Several MLPs reading the same input, as one node (one node less of Python overhead per extra net)."""

    @staticmethod
    def forward(
        ctx: _Context, activation: str | None, depths: tuple[int, ...], x: Tensor, *weights_and_biases: Tensor
    ) -> tuple[Tensor, ...]:
        outputs, saved = _forward(activation, depths, x, weights_and_biases)
        ctx.activation, ctx.depths = activation, depths
        ctx.save_for_backward(x, *saved)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: _Context, *grad_outputs: Tensor) -> tuple[Tensor | None, ...]:
        x, *saved = ctx.saved_tensors
        nets, offset = [], 0  # each net's (hidden activations, weights)
        for depth in ctx.depths:
            nets.append((saved[offset : offset + depth - 1], saved[offset + depth - 1 : offset + 2 * depth - 1]))
            offset += 2 * depth - 1
        grads: list[list[Tensor | None]] = [[None] * (2 * depth) for depth in ctx.depths]  # weight, bias, ... per net
        blocks = row_blocks(x)
        grad_x = x.new_zeros(x.shape) if ctx.needs_input_grad[2] and blocks != [None] else None
        for block in blocks:
            for (hidden, weights), grad_output, net_grads in zip(nets, grad_outputs, grads):
                grad = _rows(grad_output, block)
                layer_inputs = [_rows(x, block), *(_rows(h, block) for h in hidden)]
                for i in reversed(range(len(weights))):
                    net_grads[2 * i + 1] = _accumulate(net_grads[2 * i + 1], grad.sum(-2))
                    net_grads[2 * i] = _accumulate(net_grads[2 * i], _weight_grad(grad, layer_inputs[i]))
                    if i > 0:  # layer_inputs[i] = act(z_i): carry the gradient to z_i
                        assert ctx.activation is not None  # a hidden layer has one (mlp_layers)
                        grad = _activation_grad_(torch.matmul(grad, weights[i]), layer_inputs[i], ctx.activation)
                    elif ctx.needs_input_grad[2]:  # the input's gradient, summed over the nets
                        part = torch.matmul(grad, weights[0])
                        if block is None:
                            grad_x = part if grad_x is None else grad_x + part
                        else:
                            assert grad_x is not None  # allocated whole for row blocks
                            grad_x[block] += part
        return (None, None, grad_x, *(g for net_grads in grads for g in net_grads))


def mlps_one_node(
    x: Tensor, networks: list[list[nn.Linear]] | list[list[tuple[Tensor, Tensor]]], activation: str | None
) -> tuple[Tensor, ...]:
    """``net[-1](act(... act(net[0](x))))`` for each net of ``networks``, all as one autograd node.
    Each layer is an ``nn.Linear`` or its (weight, bias): x ``[batch, in]`` and ``[out, in]``
    weights, or, for a stack of seeds, x ``[S, batch, in]`` and ``[S, out, in]`` weights with
    ``[S, out]`` biases. ``activation`` is "tanh" or "relu" (None only if no net has a hidden layer)."""
    if activation not in ACTIVATIONS and any(len(net) > 1 for net in networks):
        raise ValueError(f"unknown activation {activation!r}: choose one of {sorted(ACTIVATIONS)}")
    params = [
        p
        for net in networks
        for layer in net
        for p in ((layer.weight, layer.bias) if isinstance(layer, nn.Linear) else layer)
    ]
    depths = tuple(len(net) for net in networks)
    if not torch.is_grad_enabled():  # a stack's rollout: the same forward without the node's bookkeeping
        return tuple(_forward(activation, depths, x, tuple(params))[0])
    return _MLPsFunction.apply(activation, depths, x, *params)
