"""The fast paths compute what the plain ones do: reset rows dropped once, per-epoch gathering,
full-batch minibatches, stacked metric sums, fused Adam; and the tensor backend picks its own preset."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest
import torch
from torch import nn

from fastppo.config import PPOConfig
from fastppo.core import normalize_advantages, ppo_loss
from fastppo.envs.env_config import make_config
from fastppo.policies import ActorCritic
from fastppo.training.optim import flatten_parameters
from fastppo.training.update import UpdateCoefficients, make_optimizer, ppo_update, set_learning_rate


def reference_update(policy, optimizer, batch, cfg, coefs):
    """The plain loop: the valid rows, a permutation per epoch, one gather per field per
    minibatch (num_minibatches near-equal slices), float sums."""
    valid = batch["valid"].nonzero().squeeze(1)
    n = valid.numel()
    bounds = [n * i // cfg.num_minibatches for i in range(cfg.num_minibatches + 1)]
    sums, count = {}, 0
    for _ in range(cfg.update_epochs):
        perm = valid[torch.randperm(n)] if cfg.num_minibatches > 1 else valid
        for start, end in zip(bounds[:-1], bounds[1:]):
            mb = perm[start:end]
            logprob, entropy, value = policy.evaluate(batch["obs"][mb], batch["actions"][mb])
            adv = normalize_advantages(batch["advantages"][mb])
            loss, metrics = ppo_loss(
                logprob,
                batch["logprobs"][mb],
                adv,
                entropy,
                value,
                batch["values"][mb],
                batch["returns"][mb],
                clip_coef=coefs.clip_coef,
                ent_coef=coefs.ent_coef,
                vf_coef=cfg.vf_coef,
            )
            optimizer.zero_grad()
            loss.backward()
            metrics["grad_norm"] = nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            optimizer.step()
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v.item()
            count += 1
    return {k: v / count for k, v in sums.items()}


def make_batch(n: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return dict(
        obs=torch.randn(n, 4, generator=g),
        actions=torch.randint(0, 2, (n,), generator=g),
        logprobs=torch.full((n,), -0.69),
        values=torch.randn(n, generator=g),
        advantages=torch.randn(n, generator=g),
        returns=torch.randn(n, generator=g),
        valid=torch.rand(n, generator=g) > 0.1,
        rewards=torch.zeros(n),
        terminated=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
    )


@pytest.mark.parametrize("num_minibatches", [1, 4])
def test_ppo_update_matches_the_plain_loop(num_minibatches):
    cfg = PPOConfig(update_epochs=3, num_minibatches=num_minibatches)
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    twin = copy.deepcopy(policy)
    batch, coefs = make_batch(64), UpdateCoefficients(clip_coef=0.2, ent_coef=0.01, kl_beta=1.0)
    torch.manual_seed(1)
    ours = ppo_update(policy, make_optimizer(policy, 1e-3, 1e-5, torch.device("cpu")), batch, cfg, coefs)
    torch.manual_seed(1)
    ref = reference_update(twin, torch.optim.Adam(twin.parameters(), lr=1e-3, eps=1e-5), batch, cfg, coefs)
    assert {k: ours[k] for k in ref} == pytest.approx(ref, rel=1e-4, abs=1e-6)
    for a, b in zip(policy.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_optimizer_is_fused_and_lr_is_set():
    opt = make_optimizer(nn.Linear(3, 1), 1e-3, 1e-5, torch.device("cpu"))
    assert opt.defaults["fused"] and not opt.defaults["capturable"]
    set_learning_rate(opt, 5e-4)
    assert opt.param_groups[0]["lr"] == 5e-4


def test_tensor_backend_keeps_the_envs_own_preset():
    sync, tensor = make_config("CartPole-v1"), make_config("CartPole-v1", overrides={"backend": "tensor"})
    assert (sync.env.backend, tensor.env.backend) == ("sync", "tensor")
    tensor.env.backend = "sync"
    assert tensor.to_dict() == sync.to_dict()  # the same tuned hyperparameters on either backend


def test_flattened_parameters_are_views_of_one_buffer_with_one_gradient():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    flat = flatten_parameters(net)
    assert flat.numel() == sum(v.numel() for v in before.values())
    assert all(torch.equal(net.state_dict()[k], v) for k, v in before.items())  # same values, same names
    x = torch.randn(5, 3)
    net(x).square().sum().backward()
    # autograd accumulated every layer's gradient into the flat one
    expected = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    assert torch.equal(flat.grad, expected) and flat.grad.abs().sum() > 0
    with torch.no_grad():
        flat.add_(1.0)  # an optimizer step on the flat tensor moves the module's weights
    assert torch.equal(net[0].bias, before["0.bias"] + 1.0)
    net.load_state_dict(before)  # loading copies into the views: the buffer stays shared
    assert torch.equal(flat[: net[0].weight.numel()], before["0.weight"].reshape(-1))


def test_an_optimizer_not_from_make_optimizer_is_a_clear_error():
    from fastppo.errors import FastPPOError
    from fastppo.training.update import MinibatchStep

    policy = ActorCritic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    with pytest.raises(FastPPOError, match="make_optimizer"):
        MinibatchStep(policy, torch.optim.Adam(policy.parameters()), PPOConfig())


def test_kl_objective_measures_the_kl_of_the_whole_batch_after_the_epochs():
    """Schulman et al. 2017, sec. 4 adapts beta from KL(old || new) after the update: the k3 mean
    over every valid row under the final weights, not the mean of the pre-step minibatch KLs."""
    cfg = PPOConfig(update_epochs=4, num_minibatches=4, objective="kl")
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    batch = make_batch(64)
    with torch.no_grad():
        batch["logprobs"] = policy.evaluate(batch["obs"], batch["actions"])[0]  # the rollout policy's own
    ours = ppo_update(
        policy, make_optimizer(policy, 3e-3, 1e-5, torch.device("cpu")), batch, cfg, UpdateCoefficients(0.2, 0.0, 1.0)
    )
    valid = batch["valid"]
    with torch.no_grad():
        newlogprob = policy.evaluate(batch["obs"][valid], batch["actions"][valid])[0]
    ratio = torch.exp(newlogprob - batch["logprobs"][valid])
    expected = float(((ratio - 1) - torch.log(ratio)).mean())
    assert ours["kl_after_update"] == pytest.approx(expected, rel=1e-5)
    assert ours["kl_after_update"] > 1.5 * ours["approx_kl"]  # the pre-step minibatch mean runs lower
