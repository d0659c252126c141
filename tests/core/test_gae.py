"""GAE against hand-computed numbers and a plain Python reference loop."""

import pytest
import torch

from fastppo.core import compute_gae, shift_values


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """The recursion written out per env and per step on Python floats."""
    T, N = len(rewards), len(rewards[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            term = bool(terminated[t][n])
            done = term or bool(truncated[t][n])
            bootstrap = 0.0 if term else next_values[t][n]
            delta = rewards[t][n] + gamma * bootstrap - values[t][n]
            running = delta + (0.0 if done else gamma * lam * running)
            adv[t][n] = running
    return adv


def tensors(*rows, dtype=torch.float64):
    return [torch.tensor(r, dtype=dtype) for r in rows]


def test_matches_reference_loop_on_random_rollout():
    g = torch.Generator().manual_seed(0)
    T, N = 17, 5
    rewards = torch.randn(T, N, generator=g, dtype=torch.float64)
    values = torch.randn(T, N, generator=g, dtype=torch.float64)
    next_values = torch.randn(T, N, generator=g, dtype=torch.float64)
    terminated = torch.rand(T, N, generator=g) < 0.15
    truncated = (torch.rand(T, N, generator=g) < 0.15) & ~terminated
    assert terminated.any() and truncated.any()
    gamma, lam = 0.97, 0.9
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    expected = reference_gae(
        rewards.tolist(), values.tolist(), next_values.tolist(), terminated.tolist(), truncated.tolist(), gamma, lam
    )
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(ret, adv + values)
    assert adv.shape == ret.shape == (T, N)
    assert not adv.requires_grad


def test_accepts_float_done_flags_like_bool():
    g = torch.Generator().manual_seed(1)
    r, v, nv = (torch.randn(6, 3, generator=g) for _ in range(3))
    term = torch.rand(6, 3, generator=g) < 0.3
    trunc = (torch.rand(6, 3, generator=g) < 0.3) & ~term
    a_bool, _ = compute_gae(r, v, nv, term, trunc, 0.99, 0.95)
    a_float, _ = compute_gae(r, v, nv, term.float(), trunc.float(), 0.99, 0.95)
    torch.testing.assert_close(a_bool, a_float)


def test_hand_computed_three_steps():
    # One env, no episode end, gamma = 0.5, lambda = 0.5 (gamma * lambda = 0.25).
    rewards, values, next_values = tensors([[1.0], [2.0], [3.0]], [[0.5], [1.0], [1.5]], [[1.0], [1.5], [2.0]])
    flags = torch.zeros(3, 1, dtype=torch.bool)
    # deltas: 1 + 0.5*1.0 - 0.5 = 1.0 ; 2 + 0.5*1.5 - 1.0 = 1.75 ; 3 + 0.5*2.0 - 1.5 = 2.5
    # A2 = 2.5 ; A1 = 1.75 + 0.25*2.5 = 2.375 ; A0 = 1.0 + 0.25*2.375 = 1.59375
    adv, ret = compute_gae(rewards, values, next_values, flags, flags, gamma=0.5, gae_lambda=0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.59375], [2.375], [2.5]], dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor([[2.09375], [3.375], [4.0]], dtype=torch.float64))


def test_truncation_bootstraps_and_termination_does_not():
    # Two envs with identical data; the last step of env 0 is truncated, of env 1 terminated.
    rewards, values, next_values = tensors(
        [[1.0, 1.0], [1.0, 1.0]], [[2.0, 2.0], [3.0, 3.0]], [[3.0, 3.0], [10.0, 10.0]]
    )
    terminated = torch.tensor([[False, False], [False, True]])
    truncated = torch.tensor([[False, False], [True, False]])
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, gamma=0.9, gae_lambda=0.8)
    # truncated: delta1 = 1 + 0.9*10 - 3 = 7 ; terminated: delta1 = 1 - 3 = -2
    # delta0 = 1 + 0.9*3 - 2 = 1.7 for both ; A0 = 1.7 + 0.72 * A1
    torch.testing.assert_close(adv[1], torch.tensor([7.0, -2.0], dtype=torch.float64))
    torch.testing.assert_close(adv[0], torch.tensor([1.7 + 0.72 * 7.0, 1.7 + 0.72 * -2.0], dtype=torch.float64))
    torch.testing.assert_close(ret, adv + values)


def test_episode_end_stops_credit_flowing_backwards():
    # Step 0 ends an episode (terminated or truncated); whatever happens afterwards leaves A_0 alone.
    for terminated, truncated in ((True, False), (False, True)):
        term = torch.tensor([[terminated], [False], [False]])
        trunc = torch.tensor([[truncated], [False], [False]])
        r = torch.tensor([[1.0], [5.0], [7.0]])
        v = torch.tensor([[0.5], [2.0], [-1.0]])
        nv = torch.tensor([[4.0], [3.0], [2.0]])
        a, _ = compute_gae(r, v, nv, term, trunc, 0.99, 0.95)
        r2, v2, nv2 = r.clone(), v.clone(), nv.clone()
        r2[1:] += 100.0
        v2[1:] -= 50.0
        nv2[1:] += 30.0
        a2, _ = compute_gae(r2, v2, nv2, term, trunc, 0.99, 0.95)
        expected0 = 1.0 + (0.0 if terminated else 0.99 * 4.0) - 0.5
        assert a[0, 0].item() == pytest.approx(expected0)
        assert a2[0, 0].item() == pytest.approx(expected0)
        assert a2[1, 0].item() != pytest.approx(a[1, 0].item())


@pytest.mark.parametrize("end", ["truncated", "terminated"])
def test_next_step_reset_row_does_not_leak_into_earlier_rows(end):
    # Gymnasium NEXT_STEP autoreset: the episode ends at t = 2 (a truncated end bootstraps from
    # next_values[2] = V(final obs), a terminated one does not); row 3 is a reset row with no real
    # transition.
    T = 6
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(T, 1, generator=g, dtype=torch.float64)
    values = torch.randn(T, 1, generator=g, dtype=torch.float64)
    last_value = torch.randn(1, generator=g, dtype=torch.float64)
    next_values = shift_values(values, last_value)
    terminated = torch.zeros(T, 1, dtype=torch.bool)
    truncated = torch.zeros(T, 1, dtype=torch.bool)
    (truncated if end == "truncated" else terminated)[2, 0] = True
    gamma, lam = 0.99, 0.95
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, gamma, lam)

    # Perturb everything the reset row owns: its reward, its value and its own next value.
    r2, v2, nv2 = rewards.clone(), values.clone(), next_values.clone()
    r2[3] += 11.0
    v2[3] -= 7.0
    nv2[3] += 5.0
    adv2, ret2 = compute_gae(r2, v2, nv2, terminated, truncated, gamma, lam)
    torch.testing.assert_close(adv2[:3], adv[:3])
    torch.testing.assert_close(ret2[:3], ret[:3])
    assert not torch.allclose(adv2[3], adv[3])
    torch.testing.assert_close(ret2, adv2 + v2)

    # Rows 0..2 equal GAE over the first episode alone (bootstrapped from V(final obs) if truncated).
    expected = reference_gae(
        rewards[:3].tolist(),
        values[:3].tolist(),
        next_values[:3].tolist(),
        terminated[:3].tolist(),
        truncated[:3].tolist(),
        gamma,
        lam,
    )
    bootstrap = gamma * next_values[2, 0].item() if end == "truncated" else 0.0
    assert adv[2, 0].item() == pytest.approx(rewards[2, 0].item() + bootstrap - values[2, 0].item())
    torch.testing.assert_close(adv[:3], torch.tensor(expected, dtype=torch.float64))


def test_lambda_zero_is_one_step_td():
    g = torch.Generator().manual_seed(4)
    r, v, nv = (torch.randn(8, 3, generator=g, dtype=torch.float64) for _ in range(3))
    term = torch.rand(8, 3, generator=g) < 0.2
    trunc = torch.zeros(8, 3, dtype=torch.bool)
    adv, _ = compute_gae(r, v, nv, term, trunc, gamma=0.9, gae_lambda=0.0)
    torch.testing.assert_close(adv, r + 0.9 * nv * (~term) - v)


def test_lambda_one_is_discounted_monte_carlo_minus_value():
    # One episode that terminates at the last step: A_t = sum_k gamma^k r_{t+k} - V(s_t).
    g = torch.Generator().manual_seed(5)
    T, gamma = 7, 0.8
    r = torch.randn(T, 1, generator=g, dtype=torch.float64)
    v = torch.randn(T, 1, generator=g, dtype=torch.float64)
    nv = shift_values(v, torch.tensor([123.0], dtype=torch.float64))  # the last one must be ignored
    term = torch.zeros(T, 1, dtype=torch.bool)
    term[-1] = True
    adv, ret = compute_gae(r, v, nv, term, torch.zeros_like(term), gamma, gae_lambda=1.0)
    mc = [sum(gamma**k * r[t + k, 0].item() for k in range(T - t)) for t in range(T)]
    torch.testing.assert_close(ret[:, 0], torch.tensor(mc, dtype=torch.float64))
    torch.testing.assert_close(adv[:, 0], torch.tensor(mc, dtype=torch.float64) - v[:, 0])


def test_gamma_zero_is_reward_minus_value():
    r, v, nv = tensors([[1.0, -2.0], [3.0, 0.5]], [[0.2, 0.1], [-0.3, 0.4]], [[9.0, 9.0], [9.0, 9.0]])
    flags = torch.zeros(2, 2, dtype=torch.bool)
    adv, _ = compute_gae(r, v, nv, flags, flags, gamma=0.0, gae_lambda=0.95)
    torch.testing.assert_close(adv, r - v)


def test_shift_values():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    last = torch.tensor([7.0, 8.0])
    torch.testing.assert_close(shift_values(values, last), torch.tensor([[3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]))
    one = shift_values(torch.tensor([[1.0, 2.0]]), last)
    torch.testing.assert_close(one, torch.tensor([[7.0, 8.0]]))
