"""The rollout's merged actor-critic forward gives what ``ActorCritic.act`` gives, for every head and trunk."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from fastppo.config import PolicyConfig
from fastppo.policies import ActorCritic
from fastppo.policies.fused import SPLIT_ROWS, FusedActorCritic, tanh_as_sigmoid
from tests.support.policies import ACTION_SPACES, OBS, POLICIES


def same_draws(fn, *args):
    torch.manual_seed(7)
    return fn(*args)


@pytest.mark.parametrize("cfg", list(POLICIES))
@pytest.mark.parametrize("space", list(ACTION_SPACES))
@pytest.mark.parametrize("rows", [9, SPLIT_ROWS])  # deeper hidden layers block-diagonal, then as their two halves
def test_fused_act_matches_policy_act(cfg, space, rows):
    torch.manual_seed(0)
    policy = ActorCritic(OBS, ACTION_SPACES[space][0], POLICIES[cfg])
    fused = FusedActorCritic.build(policy)
    fused.refresh()
    deeper_layers = len(POLICIES[cfg].hidden_sizes) - 1 if not POLICIES[cfg].shared_trunk else 0
    assert sum(halves is not None for halves in fused._halves) == max(deeper_layers, 0)
    obs = torch.randn(rows, 4)
    with torch.inference_mode():
        action, logprob, value = same_draws(fused, obs)
        ref_action, ref_logprob, ref_value = same_draws(policy.act, obs)
    # Gaussian actions are mean + std * noise: they inherit the means' rounding differences.
    torch.testing.assert_close(action, ref_action, rtol=0, atol=1e-6)
    torch.testing.assert_close(logprob, ref_logprob, rtol=0, atol=1e-5)
    torch.testing.assert_close(value, ref_value, rtol=0, atol=1e-6)


def test_fused_act_applies_the_action_mask():
    torch.manual_seed(0)
    policy = ActorCritic(OBS, gym.spaces.Discrete(3))
    fused = FusedActorCritic.build(policy)
    fused.refresh()
    mask = torch.tensor([[True, False, False], [False, False, True]]).repeat(50, 1)
    with torch.inference_mode():
        action, _, _ = fused(torch.randn(100, 4), mask)
    assert mask.gather(1, action.unsqueeze(1)).all()


def test_refresh_picks_up_new_weights():
    torch.manual_seed(0)
    policy = ActorCritic(OBS, gym.spaces.Discrete(2))
    fused = FusedActorCritic.build(policy)
    fused.refresh()
    obs = torch.randn(5, 4)
    with torch.no_grad():
        policy.value_head.bias += 1.0
    with torch.inference_mode():
        stale = fused(obs)[2]
        fused.refresh()
        fresh = fused(obs)[2]
        expected = policy.get_value(obs)
    torch.testing.assert_close(fresh, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(stale + 1.0, expected, rtol=0, atol=1e-6)


def test_cnn_policies_keep_the_module_forward():
    image = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert FusedActorCritic.build(ActorCritic(image, gym.spaces.Discrete(4), PolicyConfig(shared_trunk=True))) is None


def test_tanh_as_sigmoid_is_the_same_function():
    """Folding the tanh identity into the weights is exact algebra: float64 agrees to rounding."""
    torch.manual_seed(0)
    sizes = [4, 16, 8, 3]
    layers = [
        (torch.randn(i, o, dtype=torch.float64), torch.randn(o, dtype=torch.float64)) for i, o in zip(sizes, sizes[1:])
    ]
    x = torch.randn(32, 4, dtype=torch.float64)
    expected, folded = x, x
    for depth, ((w, b), (fw, fb)) in enumerate(zip(layers, tanh_as_sigmoid(layers))):
        last = depth == len(layers) - 1
        expected = torch.addmm(b, expected, w) if last else torch.tanh(torch.addmm(b, expected, w))
        folded = torch.addmm(fb, folded, fw) if last else torch.sigmoid(torch.addmm(fb, folded, fw))
    torch.testing.assert_close(folded, expected, rtol=0, atol=1e-12)
