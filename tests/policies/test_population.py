"""The population axis (fastppo.policies.population): member i of a stack or of agent groups is
ActorCritic i on the same rows, up to float summation order."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest
import torch

from fastppo.config import PolicyConfig
from fastppo.envs.layout import ObservationLayout
from fastppo.policies.actor_critic import ActorCritic
from fastppo.policies.memory import RecurrentCore, Segments
from fastppo.policies.population import GroupedActorCritic, StackedActorCritic

OBS = gym.spaces.Box(-1, 1, (5,))
DISCRETE, BOX = gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))
SEEDS, ENVS, STEPS = 3, 4, 6


def stack_of(cfg: PolicyConfig, action_space: gym.Space) -> tuple[StackedActorCritic, list[ActorCritic]]:
    policies = []
    for seed in range(SEEDS):
        torch.manual_seed(seed)
        policies.append(ActorCritic(OBS, action_space, cfg))
        if isinstance(action_space, gym.spaces.Box):  # members' log-stds differ, as after training
            policies[-1].action_head.log_std.data.uniform_(-1, 0)
    return StackedActorCritic(
        copy.deepcopy(policies), [torch.Generator().manual_seed(s) for s in range(SEEDS)]
    ), policies


def actions_of(space: gym.Space, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(0, 3, shape) if isinstance(space, gym.spaces.Discrete) else torch.randn(*shape, 2)


CONFIGS = {
    "mlp": PolicyConfig(),
    "shared-trunk": PolicyConfig(shared_trunk=True),
    "relu-3-layers": PolicyConfig(hidden_sizes=(16, 16, 8), activation="relu"),
    "lstm": PolicyConfig(memory="lstm", memory_size=8),
    "gru-shared": PolicyConfig(memory="gru", memory_size=8, shared_trunk=True),
}


@pytest.mark.parametrize("space", [DISCRETE, BOX], ids=["discrete", "box"])
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize(
    "rows", [16, 256], ids=["rollout-size", "update-size"]
)  # 256: the one-node layer's side of MIN_ROWS
def test_each_stacked_seed_scores_as_its_actor_critic(name, space, rows):
    cfg = CONFIGS[name]
    stack, policies = stack_of(cfg, space)
    torch.manual_seed(7)
    obs, action = torch.randn(SEEDS, rows, 5), actions_of(space, (SEEDS, rows))
    mask = torch.rand(SEEDS, rows, 3) > 0.3 if space is DISCRETE else None
    if mask is not None:
        mask[..., 0] = True
    state = keep = None
    if stack.recurrent:  # rows are rows / ENVS steps of ENVS sequences, time-major, with episode ends
        state, keep = torch.randn(SEEDS, ENVS, stack.state_size), torch.rand(SEEDS, rows) > 0.2
    logprob, entropy, value = stack.evaluate(obs, action, mask, state, keep)
    for i, policy in enumerate(policies):
        expected = policy.evaluate(
            obs[i],
            action[i],
            None if mask is None else mask[i],
            None if state is None else state[i],
            None if keep is None else keep[i],
        )
        for got, want in zip((logprob[i], entropy[i], value[i]), expected):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # and the gradient of each seed's row of ``flat`` is its policy's gradient
    (logprob.sum() + value.sum() + entropy.sum()).backward()
    for i, policy in enumerate(policies):
        ours = policy.evaluate(
            obs[i],
            action[i],
            None if mask is None else mask[i],
            None if state is None else state[i],
            None if keep is None else keep[i],
        )
        sum(t.sum() for t in ours).backward()
        torch.testing.assert_close(
            stack.flat.grad[i], torch.cat([p.grad.flatten() for p in policy.parameters()]), rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("name", CONFIGS)
def test_a_stacked_rollout_step_draws_what_each_seeds_single_run_draws(name):
    """Sampling stays outside vmap: seed s's rows draw from seed s's generator what its single
    run draws from torch's global one, and a recurrent step returns each seed's next state."""
    stack, policies = stack_of(CONFIGS[name], BOX)
    obs = torch.randn(SEEDS * ENVS, 5)
    state = None if not stack.recurrent else torch.randn(SEEDS * ENVS, stack.state_size)
    with torch.no_grad():
        action, logprob, value, next_state = stack.step(obs, state)
        for i, policy in enumerate(policies):
            rows = slice(i * ENVS, (i + 1) * ENVS)
            torch.manual_seed(i)
            want = policy.step(obs[rows], state[rows]) if stack.recurrent else (*policy.act(obs[rows]), None)
            for got, expected in zip(
                (action[rows], logprob[rows], value[rows], None if next_state is None else next_state[rows]), want
            ):
                if expected is not None:
                    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_cell_steps_are_nn_rnn_cut_at_episode_ends(kind):
    """RecurrentCore.cell_steps (what a population vmaps) equals nn.LSTM/GRU run over the
    episode pieces Segments cuts, the state zeroed after each row keep marks false."""
    torch.manual_seed(0)
    core = RecurrentCore(kind, 5, 8)
    x, state = torch.randn(STEPS * ENVS, 5), torch.randn(ENVS, core.state_size)
    keep = torch.rand(STEPS * ENVS) > 0.3
    out, final = core.cell_steps(x, state, keep)
    torch.testing.assert_close(
        out, core.sequences(x, state, Segments.from_keep(keep.view(STEPS, ENVS))), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        core.cell_steps(x, state)[0], core(x.view(STEPS, ENVS, 5), state)[0].reshape(-1, 8), rtol=1e-5, atol=1e-6
    )
    assert not torch.allclose(out, core.cell_steps(x, state)[0])  # the resets matter


def grouped(
    cfg: PolicyConfig, groups: tuple[int, ...], space: gym.Space = DISCRETE
) -> tuple[GroupedActorCritic, torch.Tensor]:
    """A grouped policy over rows [observation | agent one-hot] of len(groups) agents, and such rows."""
    agents = len(groups)
    torch.manual_seed(0)
    policy = GroupedActorCritic(
        gym.spaces.Box(-1, 1, (5 + agents,)), space, cfg, ObservationLayout(raw=agents, groups=groups)
    )
    rows = STEPS * ENVS * agents
    ids = torch.eye(agents)[torch.arange(rows) % agents]
    return policy, torch.cat([torch.randn(rows, 5), ids], dim=1)


@pytest.mark.parametrize("space", [DISCRETE, BOX], ids=["discrete", "box"])
@pytest.mark.parametrize("name", CONFIGS)
def test_each_row_of_a_grouped_policy_is_scored_by_its_groups_actor_critic(name, space):
    policy, obs = grouped(CONFIGS[name], (0, 1, 1), space)
    for member in policy.policies:
        if space is BOX:
            member.action_head.log_std.data.uniform_(-1, 0)
    action = actions_of(space, (obs.shape[0],))
    state = keep = None
    if policy.recurrent:
        state, keep = torch.randn(ENVS * 3, policy.state_size), torch.rand(obs.shape[0]) > 0.2
    logprob, entropy, value = policy.evaluate(obs, action, None, state, keep)
    group = torch.tensor([0, 1, 1])[torch.arange(obs.shape[0]) % 3]
    for g, member in enumerate(policy.policies):
        expected = member.evaluate(obs, action, None, state, keep)
        for got, want in zip((logprob, entropy, value), expected):
            torch.testing.assert_close(got[group == g], want[group == g], rtol=1e-5, atol=1e-5)
    if policy.recurrent:  # each sequence's next state is its group's
        _, _, _, next_state = policy.step(obs[: ENVS * 3], state)
        for g, member in enumerate(policy.policies):
            want = member.step(obs[: ENVS * 3], state)[3]
            torch.testing.assert_close(
                next_state[group[: ENVS * 3] == g], want[group[: ENVS * 3] == g], rtol=1e-5, atol=1e-6
            )


def test_a_single_group_is_its_actor_critic_bit_for_bit():
    """A population of one does not go through vmap: its ActorCritic's speed layers, its draws."""
    policy, obs = grouped(PolicyConfig(), (0, 0, 0))
    member = policy.policies[0]
    action = torch.randint(0, 3, (obs.shape[0],))
    for got, want in zip(policy.evaluate(obs, action), member.evaluate(obs, action)):
        assert torch.equal(got, want)
    torch.manual_seed(3)
    got = policy.act(obs)
    torch.manual_seed(3)
    for a, b in zip(got, member.act(obs)):
        assert torch.equal(a, b)


def test_grouped_state_dict_keys_are_each_groups_actor_critic():
    """policy.safetensors and checkpoints keep ``policies.<k>.<name>``: folders written before load."""
    policy, _ = grouped(PolicyConfig(), (0, 1, 1))
    names = [name for name, _ in ActorCritic(gym.spaces.Box(-1, 1, (8,)), DISCRETE).named_parameters()]
    assert sorted(policy.state_dict()) == sorted(
        ["agent_group", *(f"policies.{k}.{n}" for k in range(2) for n in names)]
    )


@pytest.mark.parametrize("name", ["lstm", "gru-shared"])
def test_a_recurrent_stack_runs_other_encoders_under_vmap_to_the_same_figures(name):
    """Encoders other than MLPs (a CNN, a centralised critic's) run under vmap around the cores:
    the same outputs and gradients as the MLP encoders' batched matmuls."""
    stack, _ = stack_of(CONFIGS[name], DISCRETE)
    torch.manual_seed(7)
    obs, action = torch.randn(SEEDS, STEPS * ENVS, 5), torch.randint(0, 3, (SEEDS, STEPS * ENVS))
    state, keep = torch.randn(SEEDS, ENVS, stack.state_size), torch.rand(SEEDS, STEPS * ENVS) > 0.2
    results = []
    for around_cores in (stack._around_cores, None):
        stack._around_cores, stack.flat.grad = around_cores, None
        outputs = stack.evaluate(obs, action, None, state, keep)
        sum(t.sum() for t in outputs).backward()
        results.append((*outputs, stack.flat.grad))
    assert results[0][0].shape == (SEEDS, STEPS * ENVS)
    for layered, vmapped in zip(*results):
        torch.testing.assert_close(layered, vmapped, rtol=1e-5, atol=1e-6)
