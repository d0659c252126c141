"""fastppo.training.optim.FusedAdam is torch.optim.Adam(fused=True), bit for bit (without torch._dynamo:
tests/cli/test_cold_start.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from fastppo.training.optim import FusedAdam
from fastppo.training.update import make_optimizer


def steps(opt, param, grads, lrs):
    for grad, lr in zip(grads, lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        param.grad = grad.clone()
        opt.step()


def test_fused_adam_is_torch_fused_adam_bit_for_bit_and_shares_its_state_dict():
    torch.manual_seed(0)
    ours, ref = torch.nn.Parameter(torch.randn(1000)), torch.nn.Parameter(torch.zeros(1000))
    ref.data.copy_(ours.data)
    grads, lrs = [torch.randn(1000) for _ in range(30)], [1e-2 * (1 - i / 30) for i in range(30)]
    ours_opt, ref_opt = FusedAdam([ours], lr=1e-2, eps=1e-5), torch.optim.Adam([ref], lr=1e-2, eps=1e-5, fused=True)
    steps(ours_opt, ours, grads[:20], lrs[:20])
    steps(ref_opt, ref, grads[:20], lrs[:20])
    assert torch.equal(ours, ref)
    a, b = ours_opt.state_dict(), ref_opt.state_dict()
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    for slot, value in b["state"][0].items():
        assert torch.equal(a["state"][0][slot], value) and a["state"][0][slot].dtype == value.dtype
    # a state saved by either continues in the other exactly
    swapped_ours, swapped_ref = torch.nn.Parameter(ours.detach().clone()), torch.nn.Parameter(ref.detach().clone())
    into_ours, into_ref = FusedAdam([swapped_ours], lr=1.0), torch.optim.Adam([swapped_ref], lr=1.0, fused=True)
    into_ours.load_state_dict(copy.deepcopy(b))  # copies: torch's load_state_dict keeps same-device tensors as they are
    into_ref.load_state_dict(copy.deepcopy(a))
    for opt, param in ((ours_opt, ours), (ref_opt, ref), (into_ours, swapped_ours), (into_ref, swapped_ref)):
        steps(opt, param, grads[20:], lrs[20:])
    assert torch.equal(ours, ref) and torch.equal(swapped_ours, ref) and torch.equal(swapped_ref, ref)


def test_make_optimizer_picks_fused_adam_except_for_cuda_graphs():
    opt = make_optimizer(torch.nn.Linear(3, 1), 1e-3, 1e-5, torch.device("cpu"))
    assert isinstance(opt, FusedAdam) and opt.defaults["fused"] and not opt.defaults["capturable"]
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})
