"""GAE over each seat's own decisions (turn-based games): hand-computed values, and a plain
per-column reference loop."""

import pytest
import torch

from fastppo.core import compute_decision_gae, compute_gae, open_decisions, shift_values

GAMMA, LAMBDA = 0.9, 0.8


def test_a_two_player_game_by_hand():
    # Seat A is column 0, seat B column 1. A moves at t0 and t2, B at t1 and t3; B's move at t3
    # wins: A gets -1 and B +1 on that step, both terminated. t4 is the reset row; A opens the
    # next game at t5. Values at rows that are no decision are junk (9) and must not matter.
    decisions = torch.tensor([[1, 0], [0, 1], [1, 0], [0, 1], [0, 0], [1, 0]], dtype=torch.bool)
    values = torch.tensor([[0.1, 9], [9, 0.4], [0.2, 9], [9, 0.5], [9, 9], [0.3, 9]])
    rewards = torch.zeros(6, 2)
    rewards[3] = torch.tensor([-1.0, 1.0])
    terminated = torch.zeros(6, 2, dtype=torch.bool)
    terminated[3] = True
    truncated = torch.zeros(6, 2, dtype=torch.bool)
    last_value = torch.tensor([0.7, 0.8])
    adv, ret = compute_decision_gae(
        rewards, values, shift_values(values, last_value), terminated, truncated, decisions, GAMMA, LAMBDA
    )
    a5 = 0.0 + GAMMA * 0.7 - 0.3  # bootstraps from the rollout's last value
    a2 = -1.0 - 0.2  # B's winning move is A's last transition: terminated, no bootstrap
    a0 = (GAMMA * 0.2 - 0.1) + GAMMA * LAMBDA * a2
    b3 = 1.0 - 0.5
    b1 = (GAMMA * 0.5 - 0.4) + GAMMA * LAMBDA * b3
    expected = torch.tensor([[a0, 0], [0, b1], [a2, 0], [0, b3], [0, 0], [a5, 0]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret[decisions], (expected + values)[decisions])


def test_truncation_bootstraps_from_the_final_value_and_rewards_between_turns_add_up():
    # One seat: decides at t0, the opponent's moves at t1 and t2 bring +0.5 and +0.25, and the
    # game is truncated at t2 with V(final) = 2.
    decisions = torch.tensor([[1], [0], [0]], dtype=torch.bool)
    values = torch.tensor([[1.0], [5.0], [6.0]])
    rewards = torch.tensor([[0.0], [0.5], [0.25]])
    truncated = torch.tensor([[0], [0], [1]], dtype=torch.bool)
    next_values = torch.tensor([[5.0], [6.0], [2.0]])
    adv, _ = compute_decision_gae(
        rewards, values, next_values, torch.zeros_like(truncated), truncated, decisions, GAMMA, LAMBDA
    )
    torch.testing.assert_close(adv, torch.tensor([[0.75 + GAMMA * 2.0 - 1.0], [0.0], [0.0]]))


def reference(rewards, values, next_values, terminated, truncated, decisions, gamma, lam, at_turn=None):
    """Each column's decisions as a plain list of transitions, then textbook GAE over it; a
    transition that ends off the column's turn (``at_turn``: truncated, or past the rollout's
    end) has no target: 0, and the one before bootstraps from its value alone."""
    T, N = values.shape
    at_turn = torch.ones(T, N, dtype=torch.bool) if at_turn is None else at_turn
    out = torch.zeros(T, N, dtype=torch.float64)
    for n in range(N):
        steps = [t for t in range(T) if decisions[t, n]]
        transitions = []  # (t, reward, bootstrap value, terminated, done, has a target)
        for i, t in enumerate(steps):
            end = steps[i + 1] if i + 1 < len(steps) else T
            total, boot, term, done, target = 0.0, None, False, False, True
            for u in range(t, end):
                total += float(rewards[u, n])
                if terminated[u, n] or truncated[u, n]:
                    boot, term, done = float(next_values[u, n]), bool(terminated[u, n]), True
                    target = term or bool(at_turn[u, n])
                    break
            if boot is None:
                boot = float(values[end, n]) if end < T else float(next_values[T - 1, n])
                target = end < T or bool(at_turn[T - 1, n])
            transitions.append((t, total, boot, term, done, target))
        following = 0.0
        for t, total, boot, term, done, target in reversed(transitions):
            delta = total + gamma * (0.0 if term else boot) - float(values[t, n])
            following = delta + gamma * lam * (0.0 if done else following) if target else 0.0
            out[t, n] = following
    return out


@pytest.mark.parametrize("seed", range(5))
def test_matches_a_plain_reference_loop(seed):
    g = torch.Generator().manual_seed(seed)
    T, N = 40, 6
    rewards, values = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    next_values = torch.randn(T, N, generator=g)
    terminated = torch.rand(T, N, generator=g) < 0.1
    truncated = (torch.rand(T, N, generator=g) < 0.05) & ~terminated
    decisions = torch.rand(T, N, generator=g) < 0.5
    adv, _ = compute_decision_gae(rewards, values, next_values, terminated, truncated, decisions, GAMMA, LAMBDA)
    torch.testing.assert_close(
        adv.double(),
        reference(rewards, values, next_values, terminated, truncated, decisions, GAMMA, LAMBDA),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("seed", range(5))
def test_transitions_that_end_off_the_columns_turn_match_the_reference_loop(seed):
    g = torch.Generator().manual_seed(100 + seed)
    T, N = 40, 6
    rewards, values = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    next_values = torch.randn(T, N, generator=g)
    terminated = torch.rand(T, N, generator=g) < 0.1
    truncated = (torch.rand(T, N, generator=g) < 0.1) & ~terminated
    decisions = torch.rand(T, N, generator=g) < 0.5
    at_turn = torch.rand(T, N, generator=g) < 0.5
    adv, _ = compute_decision_gae(
        rewards, values, next_values, terminated, truncated, decisions, GAMMA, LAMBDA, at_turn
    )
    expected = reference(rewards, values, next_values, terminated, truncated, decisions, GAMMA, LAMBDA, at_turn)
    torch.testing.assert_close(adv.double(), expected, rtol=1e-5, atol=1e-5)
    unresolved = open_decisions(decisions, terminated, truncated, at_turn)
    assert unresolved.any() and not (unresolved & ~decisions).any()
    assert not adv[unresolved].any()  # no target: 0


def test_a_decision_open_at_the_end_leaves_the_one_before_its_value_alone():
    # One column: decisions at t0 and t2, rewards 0.5 at t1 and 0.25 at t3; the rollout ends
    # with another seat to move (at_turn false at t3), whose value (7) is not the column's.
    decisions = torch.tensor([[1], [0], [1], [0]], dtype=torch.bool)
    values = torch.tensor([[1.0], [9.0], [2.0], [9.0]])
    rewards = torch.tensor([[0.0], [0.5], [0.0], [0.25]])
    no = torch.zeros(4, 1, dtype=torch.bool)
    next_values = shift_values(values, torch.tensor([7.0]))
    at_turn = torch.tensor([[0], [1], [0], [0]], dtype=torch.bool)
    adv, ret = compute_decision_gae(rewards, values, next_values, no, no, decisions, GAMMA, LAMBDA, at_turn)
    torch.testing.assert_close(adv, torch.tensor([[0.5 + GAMMA * 2.0 - 1.0], [0.0], [0.0], [0.0]]))
    assert open_decisions(decisions, no, no, at_turn).flatten().tolist() == [False, False, True, False]
    at_turn[-1] = True  # the rollout ends on the column's turn: 7 is its own value
    adv, _ = compute_decision_gae(rewards, values, next_values, no, no, decisions, GAMMA, LAMBDA, at_turn)
    a2 = 0.25 + GAMMA * 7.0 - 2.0
    torch.testing.assert_close(adv, torch.tensor([[0.5 + GAMMA * 2.0 - 1.0 + GAMMA * LAMBDA * a2], [0.0], [a2], [0.0]]))


def test_all_decisions_is_plain_gae():
    g = torch.Generator().manual_seed(7)
    T, N = 30, 4
    rewards, values, last = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g), torch.randn(N, generator=g)
    terminated = torch.rand(T, N, generator=g) < 0.1
    truncated = (torch.rand(T, N, generator=g) < 0.05) & ~terminated
    next_values = shift_values(values, last)
    plain, _ = compute_gae(rewards, values, next_values, terminated, truncated, GAMMA, LAMBDA)
    ours, _ = compute_decision_gae(
        rewards, values, next_values, terminated, truncated, torch.ones(T, N, dtype=torch.bool), GAMMA, LAMBDA
    )
    torch.testing.assert_close(ours, plain)


def test_one_advantage_normalises_to_zero_not_nan():
    from fastppo.core.masked import normalize_advantages

    assert normalize_advantages(torch.tensor([0.7])).tolist() == [0.0]
    torch.testing.assert_close(
        normalize_advantages(torch.tensor([1.0, 3.0])), torch.tensor([-1.0, 1.0]) / 2**0.5
    )  # std sqrt(2)
