"""categorical_logprob_entropy against values worked out by hand."""

import math

import torch

from fastppo.core import categorical_logprob_entropy


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
