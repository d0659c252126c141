"""fastppo's Tanh equals torch.tanh, forward and backward, on both of its paths; the in-place
activations equal the out-of-place ones to the bit."""

from __future__ import annotations

import pytest
import torch

from fastppo.policies.activations import (
    ACTIVATIONS,
    IN_PLACE_ACTIVATIONS,
    SIGMOID_TANH_MIN_ELEMENTS,
    Tanh,
    tanh,
    tanh_of_sum_,
)


@pytest.mark.parametrize("rows", [1, 3, SIGMOID_TANH_MIN_ELEMENTS // 64, 4 * SIGMOID_TANH_MIN_ELEMENTS // 64])
def test_tanh_matches_torch_tanh_and_its_gradient(rows):
    g = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, 64, generator=g) * 4).requires_grad_()
    upstream = torch.randn(rows, 64, generator=g)
    y = Tanh()(x)
    (grad,) = torch.autograd.grad(y, x, upstream)
    x_ref = x.detach().clone().requires_grad_()
    y_ref = torch.tanh(x_ref)
    (grad_ref,) = torch.autograd.grad(y_ref, x_ref, upstream)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=3e-7)
    torch.testing.assert_close(grad, grad_ref, rtol=0, atol=1e-6 * upstream.abs().max().item())


def test_tanh_without_grad_and_at_the_extremes():
    x = torch.cat(
        [
            torch.linspace(-30, 30, SIGMOID_TANH_MIN_ELEMENTS),
            torch.tensor([0.0, -0.0, 1e-30, float("inf"), -float("inf")]),
        ]
    )
    with torch.inference_mode():
        y = Tanh()(x)
    torch.testing.assert_close(y, torch.tanh(x), rtol=0, atol=3e-7)
    assert y[-2] == 1.0 and y[-1] == -1.0 and y.abs().max() <= 1.0


@pytest.mark.parametrize("name", sorted(IN_PLACE_ACTIVATIONS))
@pytest.mark.parametrize("rows", [3, 4 * SIGMOID_TANH_MIN_ELEMENTS // 64])
def test_in_place_activation_equals_its_module_forward_and_backward(name, rows):
    """Applied to a matmul's output as the stacked seeds and the one-node MLPs apply them: the
    values and the gradients are the module's, exactly, and the output is the input's memory."""
    g = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 8, generator=g), (torch.randn(8, 64, generator=g) * 2).requires_grad_()
    upstream = torch.randn(rows, 64, generator=g)
    z = x @ w
    y = IN_PLACE_ACTIVATIONS[name](z)
    assert y.data_ptr() == z.data_ptr()
    (grad,) = torch.autograd.grad(y, w, upstream)
    w_ref = w.detach().clone().requires_grad_()
    y_ref = ACTIVATIONS[name]()(x @ w_ref)
    (grad_ref,) = torch.autograd.grad(y_ref, w_ref, upstream)
    assert torch.equal(y, y_ref) and torch.equal(grad, grad_ref)
    with torch.no_grad():
        assert torch.equal(IN_PLACE_ACTIVATIONS[name](x @ w), y_ref)


@pytest.mark.parametrize("seeds", [None, 3])
@pytest.mark.parametrize("rows", [3, 4 * SIGMOID_TANH_MIN_ELEMENTS // 64])
def test_tanh_of_sum_equals_tanh_of_the_affine_map_to_the_bit(seeds, rows):
    """A hidden layer as matmul then tanh_of_sum_ (the bias inside the activation's first pass)
    is addmm (or a stack's baddbmm) then tanh, bit for bit, on both of tanh's paths."""
    g = torch.Generator().manual_seed(rows)
    lead = () if seeds is None else (seeds,)
    x, w, b = (
        torch.randn(*lead, rows, 8, generator=g),
        torch.randn(*lead, 64, 8, generator=g),
        torch.randn(*lead, 64, generator=g),
    )
    if seeds is None:
        expected, got = tanh(torch.addmm(b, x, w.t())), tanh_of_sum_(x @ w.t(), b)
    else:
        expected, got = tanh(torch.baddbmm(b.unsqueeze(1), x, w.mT)), tanh_of_sum_(x @ w.mT, b.unsqueeze(1))
    assert torch.equal(got, expected)
