"""categorical_logprob_entropy against values worked out by hand."""

import math

import pytest
import torch

from fastppo.core import categorical_logprob_entropy
from fastppo.core.categorical import log_softmax


def test_logprob_and_entropy_by_hand():
    # logits (0, ln 3) are probabilities (1/4, 3/4); a uniform row over 4 has entropy ln 4.
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])
    logprob, entropy = categorical_logprob_entropy(logits, torch.tensor([1, 0]))
    expected_entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(logprob, torch.tensor([math.log(0.75), math.log(0.25)]))
    torch.testing.assert_close(entropy, torch.tensor([expected_entropy, expected_entropy]))
    _, uniform = categorical_logprob_entropy(torch.zeros(4), torch.tensor(2))
    torch.testing.assert_close(uniform, torch.tensor(math.log(4.0)))


def test_leading_dims_and_a_masked_logit():
    """[B, L, V] token logits work as [B, K] do; a logit at the float minimum counts for nothing."""
    masked = torch.finfo(torch.float32).min
    logits = torch.tensor([[[0.0, 0.0, masked], [2.0, 2.0, 2.0]]])
    logprob, entropy = categorical_logprob_entropy(logits, torch.tensor([[0, 2]]))
    torch.testing.assert_close(logprob, torch.tensor([[math.log(0.5), math.log(1 / 3)]]))
    torch.testing.assert_close(entropy, torch.tensor([[math.log(2.0), math.log(3.0)]]))


@pytest.mark.parametrize("categories", [2, 3, 8, 9, 50])
def test_log_softmax_over_few_categories_is_torchs(categories):
    """A few categories take the leading-dim path: torch.log_softmax's values over the last dim
    (to a float32 rounding), forward and backward (rows of a minibatch, a stack's [seeds, rows])."""
    torch.manual_seed(0)
    for shape in [(1000, categories), (3, 100, categories)]:
        logits = (torch.randn(shape) * 5).requires_grad_()
        upstream = torch.randn(shape)
        got = log_softmax(logits)
        expected = torch.log_softmax(logits, dim=-1)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(
            *(torch.autograd.grad(out, logits, upstream)[0] for out in (got, expected)), rtol=0, atol=1e-6
        )
