"""The tensor envs against gymnasium's originals, and the TensorEnv bookkeeping they share.

Parity: gymnasium's env and the tensor env are put into the same states, given the same actions,
and must agree on next state, observation, reward, termination and (through ``gym.make``'s
``TimeLimit``) truncation. float64 mode runs the same formulas in the same order as gymnasium's
numpy code, so those checks are tight; float32 mode is checked to float32 tolerance.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import torch

from fastppo.envs.tensor import TENSOR_ENVS, TensorEnv, make_tensor_env
from fastppo.envs.vector import Episodes
from fastppo.errors import FastPPOError


class Case(NamedTuple):
    """How to exercise one env: a wide box of start states that reaches termination soon, the
    box the initial-state distribution lies in, and the float64 state tolerance."""

    state_low: list[float]
    state_high: list[float]
    reset_low: list[float]
    reset_high: list[float]
    state_atol: float


CASES = {
    "CartPole-v1": Case([-2.4, -2, -0.2, -2], [2.4, 2, 0.2, 2], [-0.05] * 4, [0.05] * 4, 1e-12),
    # CartPole's state and dynamics, observing [x, theta] only (gymnasium's: fastppo.envs.partial).
    "CartPoleNoVelocity-v1": Case([-2.4, -2, -0.2, -2], [2.4, 2, 0.2, 2], [-0.05] * 4, [0.05] * 4, 1e-12),
    "Acrobot-v1": Case(
        [-math.pi, -math.pi, -4 * math.pi, -9 * math.pi],
        [math.pi, math.pi, 4 * math.pi, 9 * math.pi],
        [-0.1] * 4,
        [0.1] * 4,
        1e-10,
    ),
    "MountainCar-v0": Case([-1.2, -0.07], [0.6, 0.07], [-0.6, 0.0], [-0.4, 0.0], 1e-12),
    # Angles beyond [-pi, pi] exercise angle_normalize. The looser tolerance is gymnasium's, not
    # ours: its torque terms (3.0 * u, 0.001 * u**2) are computed in float32 because u is.
    "Pendulum-v1": Case([-3 * math.pi, -8], [3 * math.pi, 8], [-math.pi, -1], [math.pi, 1], 1e-6),
}


def random_actions(env: TensorEnv, rng: np.random.Generator) -> np.ndarray:
    """Discrete: int64 [N]. Pendulum: float32 [N, 1] reaching past the torque bounds (clipping)."""
    space = env.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, size=env.num_envs)
    return rng.uniform(-3.0, 3.0, size=(env.num_envs, 1)).astype(np.float32)


def gym_state(env: gym.Env) -> np.ndarray:
    return np.asarray(env.unwrapped.state, dtype=np.float64)


def make_pair(env_id: str, num_envs: int, dtype: torch.dtype, seed: int) -> tuple[TensorEnv, np.random.Generator]:
    """A freshly reset tensor env whose state is overwritten with wide random states, and the
    numpy generator that drew them (for the actions that follow)."""
    case = CASES[env_id]
    rng = np.random.default_rng(seed)
    env = make_tensor_env(env_id, num_envs, seed=seed, dtype=dtype)
    env.reset()
    states = rng.uniform(case.state_low, case.state_high, size=(num_envs, len(case.state_low)))
    env.state = torch.as_tensor(states, dtype=dtype)
    return env, rng


@pytest.mark.parametrize("env_id", CASES)
def test_spaces_match_gymnasium(env_id: str) -> None:
    reference = gym.make(env_id)
    env = make_tensor_env(env_id, 3, seed=0)
    assert env.single_observation_space == reference.observation_space
    assert env.single_action_space == reference.action_space
    assert env.max_episode_steps == reference.spec.max_episode_steps
    assert env.num_envs == 3 and env.device == torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("env_id", CASES)
def test_one_step_matches_gymnasium(env_id: str, dtype: torch.dtype) -> None:
    """One batched step from 1000 random states against gymnasium's unwrapped env, state by state."""
    env, rng = make_pair(env_id, 1000, dtype, seed=1)
    start = env.state.double().numpy().copy()
    actions = random_actions(env, rng)
    result = env.step(torch.as_tensor(actions))

    reference = gym.make(env_id)  # with its wrappers: CartPoleNoVelocity's observes [x, theta]
    expected = [], [], [], []
    for state, action in zip(start, actions):
        reference.reset(seed=0)  # clears CartPole's steps_beyond_terminated
        reference.unwrapped.state = state.copy()
        obs, reward, terminated, _, _ = reference.step(action if action.ndim else int(action))
        for column, value in zip(expected, (gym_state(reference), obs, reward, terminated)):
            column.append(value)
    next_state, obs, reward, terminated = map(np.array, expected)

    if dtype == torch.float64:  # observations are float32 in gymnasium
        state_tol, obs_tol = {"rtol": 0.0, "atol": CASES[env_id].state_atol}, {"rtol": 1e-6, "atol": 1e-6}
    else:  # Acrobot's Runge-Kutta step amplifies float32 rounding to a few 1e-5
        state_tol = obs_tol = {"rtol": 1e-4, "atol": 1e-4}
    np.testing.assert_allclose(env.state.double().numpy(), next_state, **state_tol)
    np.testing.assert_allclose(result.obs.float().numpy(), obs, **obs_tol)
    np.testing.assert_allclose(result.reward.numpy(), reward, rtol=1e-6, atol=1e-4)
    np.testing.assert_array_equal(result.terminated.numpy(), terminated)
    assert not result.truncated.any()
    assert result.obs.dtype == dtype and result.reward.dtype == torch.float32
    if env_id != "Pendulum-v1":
        assert terminated.any(), "the start states should reach termination"


@pytest.mark.parametrize("env_id", CASES)
def test_trajectories_match_gymnasium_with_autoreset(env_id: str) -> None:
    """Step past the time limit beside ``gym.make`` envs (with their TimeLimit): every transition
    matches, every reset row follows NEXT_STEP, and pop_episodes matches a hand count.

    After each step gymnasium is put back into the tensor env's exact state, so each comparison is
    from identical states and float64 rounding differences cannot grow chaotically (Acrobot).
    """
    num_envs = 16
    case = CASES[env_id]
    env, rng = make_pair(env_id, num_envs, torch.float64, seed=2)
    references = [gym.make(env_id, disable_env_checker=True) for _ in range(num_envs)]
    for reference, state in zip(references, env.state.numpy()):
        reference.reset(seed=0)
        reference.unwrapped.state = state.copy()

    ended = np.zeros(num_envs, dtype=bool)
    running_return = np.zeros(num_envs)
    running_length = np.zeros(num_envs, dtype=int)
    expected_returns: list[float] = []
    expected_lengths: list[int] = []
    reset_rows = terminations = truncations = 0
    for _ in range(env.max_episode_steps + 20):
        actions = random_actions(env, rng)
        result = env.step(torch.as_tensor(actions))
        state = env.state.numpy()
        for i, reference in enumerate(references):
            if ended[i]:  # reset row: the action is ignored, a new episode starts
                reset_rows += 1
                assert result.reward[i] == 0 and not result.terminated[i] and not result.truncated[i]
                assert np.all(state[i] >= case.reset_low) and np.all(state[i] <= case.reset_high)
                reference.reset()
                reference.unwrapped.state = state[i].copy()
                running_return[i], running_length[i] = 0.0, 0
                continue
            action = actions[i] if actions[i].ndim else int(actions[i])
            obs, reward, terminated, truncated, _ = reference.step(action)
            np.testing.assert_allclose(state[i], gym_state(reference), rtol=0, atol=case.state_atol)
            np.testing.assert_allclose(result.obs[i].float().numpy(), obs, rtol=1e-6, atol=1e-6)
            assert result.reward[i].item() == pytest.approx(reward, rel=1e-6, abs=1e-6)
            assert (result.terminated[i].item(), result.truncated[i].item()) == (terminated, truncated)
            reference.unwrapped.state = state[i].copy()
            running_return[i] += reward
            running_length[i] += 1
            if terminated or truncated:
                terminations += terminated
                truncations += truncated
                expected_returns.append(running_return[i])
                expected_lengths.append(running_length[i])
        ended = (result.terminated | result.truncated).numpy()

    episodes = env.pop_episodes()
    assert episodes.lengths == expected_lengths
    np.testing.assert_allclose(episodes.returns, expected_returns, rtol=1e-5)
    assert env.pop_episodes() == Episodes([], []), "popped episodes are forgotten"
    assert reset_rows == len(expected_lengths) - int(ended.sum())
    if env_id != "Pendulum-v1":
        assert terminations > 0, "the start states should reach termination"
    if not env_id.startswith("CartPole"):  # random actions never keep the pole up for 500 steps
        assert truncations > 0, "the run should reach the time limit"


@pytest.mark.parametrize("env_id", ["MountainCar-v0", "Pendulum-v1"])
def test_truncation_at_time_limit_then_reset_row(env_id: str) -> None:
    """Episodes that never terminate are truncated at exactly max_episode_steps, all at once."""
    env = make_tensor_env(env_id, 8, seed=0)
    env.reset()
    # MountainCar coasting from the valley never reaches the flag; Pendulum never terminates.
    actions = torch.ones(8, dtype=torch.int64) if env_id == "MountainCar-v0" else torch.zeros(8, 1)
    for t in range(1, env.max_episode_steps + 1):
        result = env.step(actions)
        assert not result.terminated.any()
        assert torch.equal(result.truncated, torch.full((8,), t == env.max_episode_steps))
    final_obs = result.obs
    result = env.step(actions)
    assert not (result.terminated | result.truncated).any() and (result.reward == 0).all()
    assert not torch.equal(result.obs, final_obs)
    episodes = env.pop_episodes()
    assert episodes.lengths == [env.max_episode_steps] * 8
    if env_id == "MountainCar-v0":
        assert episodes.returns == [-200.0] * 8


def test_final_observation_is_returned_on_the_ending_step() -> None:
    """CartPole's ending step returns the out-of-bounds observation, not the next reset one."""
    env = make_tensor_env("CartPole-v1", 256, seed=3)
    env.reset()
    generator = torch.Generator().manual_seed(3)
    ended_any = False
    for _ in range(100):
        result = env.step(torch.randint(0, 2, (256,), generator=generator))
        out = (result.obs[:, 0].abs() > 2.4) | (result.obs[:, 2].abs() > 12 * 2 * math.pi / 360)
        assert torch.equal(out, result.terminated)
        ended_any |= bool(result.terminated.any())
    assert ended_any


def test_episode_records_survive_compaction() -> None:
    """Compacting pending records (bounded memory) changes nothing in what pop_episodes returns."""
    compacting = make_tensor_env("CartPole-v1", 64, seed=4)
    compacting.pending_steps_limit = 3
    plain = make_tensor_env("CartPole-v1", 64, seed=4)
    generator = torch.Generator().manual_seed(4)
    for _ in range(50):
        actions = torch.randint(0, 2, (64,), generator=generator)
        compacting.step(actions)
        plain.step(actions)
    episodes = plain.pop_episodes()
    assert len(episodes.lengths) > 64
    assert compacting.pop_episodes() == episodes


class Countdown(TensorEnv):
    """A user-defined env through the plug-in interface: an episode terminates after as many steps
    as its initial state says (1 to 5); the reward is the action."""

    single_observation_space = gym.spaces.Box(0.0, 5.0, shape=(1,))
    single_action_space = gym.spaces.Discrete(3)
    max_episode_steps = 100

    def _reset_state(self) -> torch.Tensor:
        return self._uniform(1.0, 6.0).floor()

    def _dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        next_state = state - 1
        return next_state, actions.to(state.dtype), next_state[:, 0] <= 0

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.clone()


@pytest.mark.parametrize("max_episode_steps", [100, 3])
def test_user_defined_env_bookkeeping(max_episode_steps: int) -> None:
    """Lengths and returns from the base class's bookkeeping equal the hand count; a time limit
    that coincides with termination sets both flags, as gymnasium's TimeLimit does."""
    env = Countdown(6, seed=0, max_episode_steps=max_episode_steps)
    generator = torch.Generator().manual_seed(0)
    budget = env.reset().obs[:, 0].long().tolist()
    running = [0.0] * 6
    expected: list[tuple[float, int]] = []
    both_flags = 0
    ended = [False] * 6
    for _ in range(40):
        actions = torch.randint(0, 3, (6,), generator=generator)
        result = env.step(actions)
        for i in range(6):
            if ended[i]:
                assert result.reward[i] == 0
                budget[i] = int(result.obs[i, 0])
                running[i] = 0.0
                continue
            running[i] += float(actions[i])
            length = budget[i] - int(result.obs[i, 0])
            assert bool(result.terminated[i]) == (int(result.obs[i, 0]) == 0)
            assert bool(result.truncated[i]) == (length == max_episode_steps)
            both_flags += bool(result.terminated[i] & result.truncated[i])
            if result.terminated[i] or result.truncated[i]:
                expected.append((running[i], length))
        ended = (result.terminated | result.truncated).tolist()
    episodes = env.pop_episodes()
    assert list(zip(episodes.returns, episodes.lengths)) == expected
    assert len(expected) > 6
    assert (both_flags > 0) == (max_episode_steps == 3)


def rollout(env: TensorEnv, seed: int, steps: int = 60) -> torch.Tensor:
    result = env.reset(seed=seed)
    generator = torch.Generator().manual_seed(0)
    observations = [result.obs]
    for _ in range(steps):
        space = env.single_action_space
        if isinstance(space, gym.spaces.Discrete):
            actions = torch.randint(0, int(space.n), (env.num_envs,), generator=generator)
        else:
            actions = torch.rand(env.num_envs, 1, generator=generator) * 4 - 2
        observations.append(env.step(actions).obs)
    return torch.stack(observations)


@pytest.mark.parametrize("env_id", CASES)
def test_seeding(env_id: str) -> None:
    env = make_tensor_env(env_id, 32)
    first = rollout(env, seed=7)
    assert torch.equal(rollout(env, seed=7), first), "reset(seed) reproduces the run"
    assert torch.equal(rollout(make_tensor_env(env_id, 32), seed=7), first), "across instances"
    assert not torch.equal(rollout(env, seed=8), first)
    initial = first[0]
    assert not torch.equal(initial[0], initial[1]), "envs in one batch get different states"


def test_unseeded_envs_differ() -> None:
    first, second = (make_tensor_env("CartPole-v1", 4).reset().obs for _ in range(2))
    assert not torch.equal(first, second)


def test_unknown_env_id_names_the_available_ones() -> None:
    with pytest.raises(FastPPOError, match="no tensor env for 'Humanoid-v5'") as error:
        make_tensor_env("Humanoid-v5", 4)
    for env_id in TENSOR_ENVS:
        assert env_id in str(error.value)
    with pytest.raises(FastPPOError, match="num_envs"):
        make_tensor_env("CartPole-v1", 0)


@pytest.mark.gpu
@pytest.mark.parametrize("env_id", CASES)
def test_cuda_steps_without_host_sync_and_matches_cpu(env_id: str) -> None:
    env, rng = make_pair(env_id, 256, torch.float64, seed=5)
    cuda_env = make_tensor_env(env_id, 256, device="cuda", seed=5, dtype=torch.float64)
    cuda_env.reset()
    cuda_env.state = env.state.cuda()
    actions = torch.as_tensor(random_actions(env, rng))
    expected = env.step(actions)
    cuda_actions = actions.cuda()
    torch.cuda.set_sync_debug_mode("error")
    try:
        result = cuda_env.step(cuda_actions)
        for _ in range(20):
            cuda_env.step(cuda_actions)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(result.obs.cpu(), expected.obs, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(result.reward.cpu(), expected.reward)
    assert torch.equal(result.terminated.cpu(), expected.terminated)
    assert cuda_env.pop_episodes() is not None


def test_tensor_envs_have_no_host_copies_to_time():
    import fastppo

    agent = fastppo.train("CartPole-v1", backend="tensor", total_timesteps=2048, progress=False, tensorboard=False)
    assert all("time/copy" not in row and row["time/env"] > 0 for row in agent.history)
