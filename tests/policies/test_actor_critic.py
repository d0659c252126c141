"""ActorCritic: initialisation, trunks, shapes per action space, act/evaluate/predict agreement."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from fastppo.config import PolicyConfig
from fastppo.errors import FastPPOError
from fastppo.policies import ActorCritic
from tests.support.policies import ACTION_SPACES, OBS


def linears(module):
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def assert_orthogonal_with_gain(layer: nn.Linear, gain: float):
    # An orthogonal (semi-orthogonal when rectangular) matrix scaled by g has all singular values g.
    sv = torch.linalg.svdvals(layer.weight.detach().double())
    torch.testing.assert_close(sv, torch.full_like(sv, gain), rtol=1e-5, atol=1e-7)
    assert (layer.bias == 0).all()


@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_orthogonal_init_gains(name):
    torch.manual_seed(0)
    policy = ActorCritic(OBS, ACTION_SPACES[name][0])
    hidden = linears(policy.actor_encoder) + linears(policy.critic_encoder)
    assert len(hidden) == 4  # two 64-wide layers per trunk
    for layer in hidden:
        assert_orthogonal_with_gain(layer, math.sqrt(2))
    assert_orthogonal_with_gain(policy.action_head.linear, 0.01)
    assert_orthogonal_with_gain(policy.value_head, 1.0)


def test_gaussian_log_std_starts_at_init_value_and_is_learned():
    policy = ActorCritic(OBS, ACTION_SPACES["box"][0], PolicyConfig(init_log_std=-0.5))
    torch.testing.assert_close(policy.action_head.log_std.detach(), torch.full((2,), -0.5))
    assert any(p is policy.action_head.log_std for p in policy.parameters())


def count(module):
    return sum(p.numel() for p in module.parameters())


def test_separate_trunks_parameter_count_and_identity():
    policy = ActorCritic(OBS, gym.spaces.Discrete(2))
    # CleanRL's CartPole agent: two 4-64-64 trunks, a 64->2 actor head, a 64->1 critic head
    trunk = (4 * 64 + 64) + (64 * 64 + 64)
    assert count(policy) == 2 * trunk + (64 * 2 + 2) + (64 + 1) == 9155
    assert policy.actor_encoder is not policy.critic_encoder
    a, c = linears(policy.actor_encoder)[0].weight, linears(policy.critic_encoder)[0].weight
    assert a.data_ptr() != c.data_ptr() and not torch.equal(a, c)


def test_shared_trunk_parameter_count_and_identity():
    policy = ActorCritic(OBS, gym.spaces.Discrete(2), PolicyConfig(shared_trunk=True))
    trunk = (4 * 64 + 64) + (64 * 64 + 64)
    assert count(policy) == trunk + (64 * 2 + 2) + (64 + 1)
    assert policy.actor_encoder is policy.critic_encoder


@pytest.mark.parametrize("shared", [False, True])
def test_value_gradient_reaches_the_actor_trunk_only_when_shared(shared):
    torch.manual_seed(1)
    policy = ActorCritic(OBS, gym.spaces.Discrete(2), PolicyConfig(shared_trunk=shared))
    policy.get_value(torch.randn(8, 4)).sum().backward()
    actor_grad = linears(policy.actor_encoder)[0].weight.grad
    if shared:
        assert actor_grad is not None and actor_grad.abs().sum() > 0
    else:
        assert actor_grad is None or (actor_grad == 0).all()
    assert policy.action_head.linear.weight.grad is None


def test_hidden_sizes_and_activation_are_configurable():
    policy = ActorCritic(OBS, gym.spaces.Discrete(2), PolicyConfig(hidden_sizes=(32, 16, 8), activation="relu"))
    widths = [layer.out_features for layer in linears(policy.actor_encoder)]
    assert widths == [32, 16, 8]
    assert sum(isinstance(m, nn.ReLU) for m in policy.actor_encoder.modules()) == 3
    assert not any(isinstance(m, nn.Tanh) for m in policy.modules())
    assert policy.value_head.in_features == 8
    # no hidden layers: linear heads on the raw observation
    linear = ActorCritic(OBS, gym.spaces.Discrete(2), PolicyConfig(hidden_sizes=()))
    assert count(linear) == (4 * 2 + 2) + (4 + 1)
    with pytest.raises(FastPPOError, match="sigmoid"):
        ActorCritic(OBS, gym.spaces.Discrete(2), PolicyConfig(activation="sigmoid"))


def test_default_is_64_64_tanh():
    policy = ActorCritic(OBS, gym.spaces.Discrete(2))
    assert [layer.out_features for layer in linears(policy.actor_encoder)] == [64, 64]
    assert sum(isinstance(m, nn.Tanh) for m in policy.actor_encoder.modules()) == 2


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_shapes_and_act_evaluate_agree(name, shared):
    torch.manual_seed(2)
    space, action_shape = ACTION_SPACES[name]
    policy = ActorCritic(OBS, space, PolicyConfig(shared_trunk=shared))
    B = 6
    obs = torch.randn(B, 4)
    action, logprob, value = policy.act(obs)
    assert action.shape == (B, *action_shape)
    assert logprob.shape == value.shape == (B,)
    # sampled actions lie in the space (Box samples are raw Gaussian draws, so only their shape)
    if name != "box":
        for a in action.numpy():
            assert space.contains(a.astype(space.dtype) if action_shape else int(a)), a
    newlogprob, entropy, newvalue = policy.evaluate(obs, action)
    assert newlogprob.shape == entropy.shape == newvalue.shape == (B,)
    torch.testing.assert_close(newlogprob, logprob)
    torch.testing.assert_close(newvalue, value)
    torch.testing.assert_close(policy.get_value(obs), value)
    assert torch.isfinite(entropy).all()


def test_act_evaluate_agree_with_action_mask():
    torch.manual_seed(3)
    policy = ActorCritic(OBS, gym.spaces.Discrete(4))
    obs = torch.randn(64, 4)
    mask = torch.rand(64, 4) < 0.5
    mask[:, 3] = True
    action, logprob, _ = policy.act(obs, mask)
    assert mask.gather(1, action.unsqueeze(1)).all()
    newlogprob, entropy, _ = policy.evaluate(obs, action, mask)
    torch.testing.assert_close(newlogprob, logprob)
    # with only one allowed action its probability is 1 and the entropy 0
    only = torch.zeros(64, 4, dtype=torch.bool)
    only[:, 1] = True
    action, logprob, _ = policy.act(obs, only)
    assert (action == 1).all()
    torch.testing.assert_close(logprob, torch.zeros(64), atol=1e-6, rtol=0)
    torch.testing.assert_close(policy.evaluate(obs, action, only)[1], torch.zeros(64), atol=1e-6, rtol=0)


def test_predict_deterministic_is_the_mode():
    torch.manual_seed(4)
    obs = torch.randn(32, 4)
    # Discrete: the most probable action
    policy = ActorCritic(OBS, gym.spaces.Discrete(3))
    with torch.no_grad():
        policy.action_head.linear.weight.mul_(300.0)  # make the argmax well separated
        logits, _ = policy(obs)
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(policy.predict(obs, deterministic=True)[0], probs.argmax(-1))
    # with a mask that forbids the argmax, the best allowed one
    mask = torch.ones(32, 3, dtype=torch.bool).scatter(1, probs.argmax(-1, keepdim=True), False)
    masked_probs = probs.masked_fill(~mask, -1.0)
    torch.testing.assert_close(policy.predict(obs, mask, deterministic=True)[0], masked_probs.argmax(-1))
    # Box: the Gaussian mean, the same on every call; stochastic predictions differ from it
    box = ActorCritic(OBS, ACTION_SPACES["box"][0])
    with torch.no_grad():
        mean, _ = box(obs)
    torch.testing.assert_close(box.predict(obs, deterministic=True)[0], mean)
    torch.testing.assert_close(box.predict(obs, deterministic=True)[0], box.predict(obs, deterministic=True)[0])
    assert not torch.allclose(box.predict(obs)[0], mean)


def test_unsupported_observation_space_names_it():
    with pytest.raises(FastPPOError, match="Text"):
        ActorCritic(gym.spaces.Text(5), gym.spaces.Discrete(2))


def test_unsupported_action_space_names_it():
    with pytest.raises(FastPPOError, match="Text"):
        ActorCritic(OBS, gym.spaces.Text(5))
    with pytest.raises(FastPPOError, match="Box"):
        ActorCritic(OBS, gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32))
