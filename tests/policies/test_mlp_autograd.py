"""The one-node MLP gives the nn.Sequential's outputs and autograd's gradients, and the policy uses it
for the CPU update only where it applies."""

import pytest
import torch
from torch import nn

from fastppo.config import PolicyConfig
from fastppo.policies import ActorCritic, mlp_autograd
from fastppo.policies.activations import Tanh
from fastppo.policies.mlp_autograd import mlp_layers, mlps_one_node, row_blocks
from tests.support.policies import ACTION_SPACES, OBS, POLICIES

ACTIVATION_MODULES = {"tanh": Tanh, "relu": nn.ReLU}


def reference_mlp(widths: list[int], activation: str) -> tuple[nn.Sequential, list[nn.Linear]]:
    linears = [nn.Linear(a, b).double() for a, b in zip(widths[:-1], widths[1:])]
    modules: list[nn.Module] = []
    for i, linear in enumerate(linears):
        modules.append(linear)
        if i < len(linears) - 1:
            modules.append(ACTIVATION_MODULES[activation]())
    return nn.Sequential(*modules), linears


# Widths chosen so that weight gradients take both matmul orientations (narrow input, narrow
# output) and batches of 300 x 64 run activations.tanh's sigmoid path as well as torch.tanh.
@pytest.mark.parametrize("widths", [[4, 64, 64, 2], [17, 64, 64, 1], [3, 8, 5, 7, 6], [5, 3]])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("batch", [7, 300])
def test_outputs_and_gradients_match_autograd(widths, activation, batch):
    torch.manual_seed(0)
    net, linears = reference_mlp(widths, activation)
    params = list(net.parameters())
    x = torch.randn(batch, widths[0], dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(batch, widths[-1], dtype=torch.float64)

    expected = net(x)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), [x, *params])
    (got,) = mlps_one_node(x, [linears], activation if len(linears) > 1 else None)
    got_grads = torch.autograd.grad((got * upstream).sum(), [x, *params])

    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    for g, e in zip(got_grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)


def test_several_networks_on_one_input():
    """Nets of different depths in one node: each output and every gradient, the input's summed."""
    torch.manual_seed(0)
    nets = [reference_mlp([5, 16, 3], "relu"), reference_mlp([5, 8, 8, 8, 1], "relu")]
    params = [p for net, _ in nets for p in net.parameters()]
    x = torch.randn(40, 5, dtype=torch.float64, requires_grad=True)
    upstream = [torch.randn(40, 3, dtype=torch.float64), torch.randn(40, 1, dtype=torch.float64)]

    expected = [net(x) for net, _ in nets]
    expected_grads = torch.autograd.grad(sum((e * u).sum() for e, u in zip(expected, upstream)), [x, *params])
    got = mlps_one_node(x, [linears for _, linears in nets], "relu")
    got_grads = torch.autograd.grad(sum((g * u).sum() for g, u in zip(got, upstream)), [x, *params])
    for g, e in zip([*got, *got_grads], [*expected, *expected_grads]):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)


def test_a_wide_batch_runs_in_row_blocks_with_autograds_outputs_and_gradients(monkeypatch):
    """Blocks of 16 rows (the last one short) over two nets of different depths, the input's
    gradient included: the same outputs and gradients as the modules through autograd."""
    monkeypatch.setattr(mlp_autograd, "ROW_BLOCK", 16)
    torch.manual_seed(0)
    nets = [reference_mlp([5, 16, 16, 3], "tanh"), reference_mlp([5, 8, 1], "tanh")]
    params = [p for net, _ in nets for p in net.parameters()]
    x = torch.randn(300, 5, dtype=torch.float64, requires_grad=True)
    assert [(b.start, b.stop) for b in row_blocks(x)][-2:] == [(272, 288), (288, 304)]
    upstream = [torch.randn(300, 3, dtype=torch.float64), torch.randn(300, 1, dtype=torch.float64)]

    expected = [net(x) for net, _ in nets]
    expected_grads = torch.autograd.grad(sum((e * u).sum() for e, u in zip(expected, upstream)), [x, *params])
    got = mlps_one_node(x, [linears for _, linears in nets], "tanh")
    got_grads = torch.autograd.grad(sum((g * u).sum() for g, u in zip(got, upstream)), [x, *params])
    for g, e in zip([*got, *got_grads], [*expected, *expected_grads]):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)


def test_narrow_batches_and_stacks_of_seeds_run_as_one_block():
    assert row_blocks(torch.zeros(2 * mlp_autograd.ROW_BLOCK - 1, 4)) == [None]
    assert len(row_blocks(torch.zeros(2 * mlp_autograd.ROW_BLOCK, 4))) == 2
    assert row_blocks(torch.zeros(3, 2 * mlp_autograd.ROW_BLOCK, 4)) == [None]


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_a_stack_of_seeds_equals_each_seeds_own_network(activation):
    """[S, batch, in] rows with [S, out, in] weights and [S, out] biases (a seed stack's update):
    seed s's outputs and gradients are its own network's, through autograd, two nets per node."""
    torch.manual_seed(0)
    seeds, batch = 3, 300
    nets = [[reference_mlp(widths, activation) for widths in ([4, 64, 64, 2], [4, 64, 64, 1])] for _ in range(seeds)]

    def stacked_leaf(n: int, i: int, name: str) -> torch.Tensor:  # layer i of net n, every seed's
        return torch.stack([getattr(nets[s][n][1][i], name) for s in range(seeds)]).detach().requires_grad_()

    stacked = [[(stacked_leaf(n, i, "weight"), stacked_leaf(n, i, "bias")) for i in range(3)] for n in range(2)]
    leaves = [t for net in stacked for layer in net for t in layer]
    x = torch.randn(seeds, batch, 4, dtype=torch.float64)
    upstream = [torch.randn(seeds, batch, 2, dtype=torch.float64), torch.randn(seeds, batch, 1, dtype=torch.float64)]

    got = mlps_one_node(x, stacked, activation)
    got_grads = torch.autograd.grad(sum((g * u).sum() for g, u in zip(got, upstream)), leaves)
    for s in range(seeds):
        params = [p for net, _ in nets[s] for p in net.parameters()]
        expected = [net(x[s]) for net, _ in nets[s]]
        expected_grads = torch.autograd.grad(sum((e * u[s]).sum() for e, u in zip(expected, upstream)), params)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g[s], e, rtol=0, atol=1e-12)
        for g, e in zip(got_grads, expected_grads):
            torch.testing.assert_close(g[s], e, rtol=0, atol=1e-12)


def test_no_input_gradient_when_the_input_needs_none():
    net, linears = reference_mlp([4, 8, 2], "tanh")
    x = torch.randn(5, 4, dtype=torch.float64)
    (out,) = mlps_one_node(x, [linears], "tanh")
    out.sum().backward()
    assert x.grad is None and all(p.grad is not None for p in net.parameters())


def test_unknown_activation_is_refused():
    _, linears = reference_mlp([4, 8, 2], "tanh")
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        mlps_one_node(torch.randn(2, 4, dtype=torch.float64), [linears], "gelu")


def test_mlp_layers_recognises_only_plain_mlps():
    assert mlp_layers(nn.Sequential(nn.Flatten(), nn.Linear(4, 8), Tanh(), nn.Linear(8, 8), Tanh()))[1] == "tanh"
    assert mlp_layers(nn.Flatten()) == ([], None)
    assert mlp_layers(nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.GELU())) is None  # unknown activation
    assert mlp_layers(nn.Sequential(nn.Linear(4, 8), Tanh())) is None  # no Flatten first


@pytest.mark.parametrize("cfg", list(POLICIES))
@pytest.mark.parametrize("space", list(ACTION_SPACES))
def test_policy_update_forward_matches_the_module_forward(cfg, space):
    """``evaluate`` with gradients (one-node path where it applies) equals the module forward."""
    torch.manual_seed(0)
    policy = ActorCritic(OBS, ACTION_SPACES[space][0], POLICIES[cfg]).double()
    assert (policy._mlps is None) == POLICIES[cfg].shared_trunk  # every separate-trunk MLP qualifies
    obs = torch.randn(300, 4, dtype=torch.float64)
    params, value = policy(obs)
    assert ("MLPsFunction" in type(params.grad_fn).__name__) == (policy._mlps is not None)
    loss = params.square().sum() + value.square().sum()
    grads = torch.autograd.grad(loss, list(policy.parameters()), allow_unused=True)  # a Gaussian's log_std is unused

    # The module path: the encoders and heads called one by one, recorded by autograd.
    ref_params = policy.action_head(policy.actor_encoder(obs))
    ref_value = policy.value_head(policy.critic_encoder(obs)).squeeze(-1)
    ref_grads = torch.autograd.grad(
        ref_params.square().sum() + ref_value.square().sum(), list(policy.parameters()), allow_unused=True
    )
    torch.testing.assert_close(params, ref_params, rtol=0, atol=1e-12)
    torch.testing.assert_close(value, ref_value, rtol=0, atol=1e-12)
    for g, e in zip(grads, ref_grads):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e, rtol=0, atol=1e-10)


def test_small_batches_and_no_grad_keep_the_module_forward():
    policy = ActorCritic(OBS, ACTION_SPACES["discrete"][0])
    assert "MLPsFunction" not in type(policy(torch.randn(8, 4))[0].grad_fn).__name__
    with torch.no_grad():
        assert policy(torch.randn(300, 4))[0].grad_fn is None


def test_cnn_policies_keep_the_module_forward():
    import gymnasium as gym
    import numpy as np

    images = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    policy = ActorCritic(images, gym.spaces.Discrete(3), PolicyConfig())
    assert policy._mlps is None
