"""Whole MLPs (hidden layers and output layer) as one autograd node, its backward written out.

Autograd records about five nodes per ``Linear`` + activation (addmm, transpose, activation, two
gradient accumulations) and walks them one by one in the backward; for the 64-unit networks of
classic-control and MuJoCo PPO on CPU that bookkeeping costs as much as the matmuls. ``mlps_one_node``
computes exactly what the ``nn.Sequential``s compute and returns the same gradients
(tests/test_mlp_autograd.py checks them against autograd's in float64), as one node whose backward
is textbook backprop: per layer one matmul for the weight gradient, one sum for the bias, one
matmul and one activation derivative for the layer below. Each weight-gradient matmul also puts
the narrower side first: MKL's sgemm takes 27 µs for ``[64, 512] @ [512, 2]`` (autograd's
form for a 2-action output layer) and 4.6 µs for the same product as ``[2, 512] @ [512, 64]``.
A CartPole minibatch step of 512 rows (forward, backward, clip, Adam): 1 000 -> 910 µs
(benchmarks/README.md, "One autograd node per MLP pair").

The same node trains a stack of seeds (``fastppo.training.seed_stack``: ``[S, rows, in]`` rows, ``[S, out,
in]`` weights, batched matmuls). There each activation is an 8 MB tensor that the cache does not
keep, so the node also saves passes over memory: activations and their gradients are written over
the fresh products they come from, and a tanh layer's bias goes in with its activation
(``activations.tanh_of_sum_``); a 64-seed CartPole update 335 -> 239 ms (benchmarks/README.md).
"""

from __future__ import annotations

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
    return torch.is_grad_enabled() and rows.is_cpu and rows.shape[-2] >= MIN_ROWS and not (torch.compiler.is_compiling() or torch.jit.is_tracing())


_ACTIVATION_NAMES = {module: name for name, module in ACTIVATIONS.items()}


def mlp_layers(encoder: nn.Module) -> tuple[list[nn.Linear], str | None] | None:
    """The Linear layers and activation name of a ``Flatten, (Linear, act)*`` MLP encoder (the
    activation is None when it has no hidden layer), or None for any other module."""
    modules = list(encoder) if isinstance(encoder, nn.Sequential) else [encoder]
    if not modules or not isinstance(modules[0], nn.Flatten):
        return None
    linears, activations = modules[1::2], modules[2::2]
    kinds = {type(m) for m in activations}
    if len(linears) != len(activations) or not all(isinstance(m, nn.Linear) for m in linears) or len(kinds) > 1 or not kinds <= _ACTIVATION_NAMES.keys():
        return None
    return linears, (_ACTIVATION_NAMES[kinds.pop()] if kinds else None)


def affine(bias: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """x W^T + b in one op: ``[rows, in]`` with ``[out, in]`` weights, or a stack's ``[S, rows, in]``
    with ``[S, out, in]`` weights and ``[S, out]`` biases."""
    if x.dim() == 2:
        return torch.addmm(bias, x, weight.t())
    return torch.baddbmm(bias.unsqueeze(-2), x, weight.mT)


def _hidden(bias: Tensor, x: Tensor, weight: Tensor, activation: str) -> Tensor:
    """act(x W^T + b), a hidden layer's output in one fresh tensor; a tanh layer's bias goes in
    with its activation (``activations.tanh_of_sum_``)."""
    if activation == "tanh":
        return tanh_of_sum_(torch.matmul(x, weight.mT), bias if x.dim() == 2 else bias.unsqueeze(-2))
    return IN_PLACE_ACTIVATIONS[activation](affine(bias, x, weight))


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


def _forward(activation: str | None, depths: tuple[int, ...], x: Tensor, weights_and_biases: tuple[Tensor, ...]) -> tuple[list[Tensor], list[Tensor]]:
    """The nets' outputs, and what their backward reads (each net's hidden activations, then its weights)."""
    outputs, saved, offset = [], [], 0
    for depth in depths:
        weights, biases = weights_and_biases[offset : offset + 2 * depth : 2], weights_and_biases[offset + 1 : offset + 2 * depth : 2]
        offset += 2 * depth
        h = x
        for weight, bias in zip(weights[:-1], biases[:-1]):
            h = _hidden(bias, h, weight, activation)
            saved.append(h)
        outputs.append(affine(biases[-1], h, weights[-1]))
        saved.extend(weights)
    return outputs, saved


class _MLPsFunction(torch.autograd.Function):
    """Several MLPs reading the same input, as one node (one node less of Python overhead per extra net)."""

    @staticmethod
    def forward(ctx, activation: str | None, depths: tuple[int, ...], x: Tensor, *weights_and_biases: Tensor) -> tuple[Tensor, ...]:
        outputs, saved = _forward(activation, depths, x, weights_and_biases)
        ctx.activation, ctx.depths = activation, depths
        ctx.save_for_backward(x, *saved)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_outputs: Tensor) -> tuple[Tensor | None, ...]:
        x, *saved = ctx.saved_tensors
        grads: list[Tensor] = []
        grad_x = None
        for depth, grad in zip(ctx.depths, grad_outputs):
            hidden, weights = saved[: depth - 1], saved[depth - 1 : 2 * depth - 1]
            saved = saved[2 * depth - 1 :]
            layer_inputs = [x, *hidden]
            net_grads: list[Tensor] = []
            for i in reversed(range(depth)):
                net_grads += [grad.sum(-2), _weight_grad(grad, layer_inputs[i])]  # bias, weight (reversed below)
                if i > 0:  # layer_inputs[i] = act(z_i): carry the gradient to z_i
                    grad = _activation_grad_(torch.matmul(grad, weights[i]), layer_inputs[i], ctx.activation)
                elif ctx.needs_input_grad[2]:
                    grad = torch.matmul(grad, weights[0])
                    grad_x = grad if grad_x is None else grad_x + grad
            grads.extend(reversed(net_grads))
        return (None, None, grad_x, *grads)


def mlps_one_node(x: Tensor, networks: list[list[nn.Linear]] | list[list[tuple[Tensor, Tensor]]], activation: str | None) -> tuple[Tensor, ...]:
    """``net[-1](act(... act(net[0](x))))`` for each net of ``networks``, all as one autograd node.
    Each layer is an ``nn.Linear`` or its (weight, bias): x ``[batch, in]`` and ``[out, in]``
    weights, or, for a stack of seeds, x ``[S, batch, in]`` and ``[S, out, in]`` weights with
    ``[S, out]`` biases. ``activation`` is "tanh" or "relu" (None only if no net has a hidden layer)."""
    if activation not in ACTIVATIONS and any(len(net) > 1 for net in networks):
        raise ValueError(f"unknown activation {activation!r}: choose one of {sorted(ACTIVATIONS)}")
    params = [p for net in networks for layer in net for p in ((layer.weight, layer.bias) if isinstance(layer, nn.Linear) else layer)]
    depths = tuple(len(net) for net in networks)
    if not torch.is_grad_enabled():  # a stack's rollout: the same forward without the node's bookkeeping
        return tuple(_forward(activation, depths, x, tuple(params))[0])
    return _MLPsFunction.apply(activation, depths, x, *params)
