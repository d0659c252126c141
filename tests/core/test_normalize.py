"""RunningMeanStd and RewardScaler against numpy over the concatenated stream."""

import numpy as np
import pytest
import torch

from fastppo.core import RewardScaler, RunningMeanStd


def test_running_mean_std_matches_numpy_over_all_batches():
    rng = np.random.default_rng(0)
    rms = RunningMeanStd(shape=(3,))
    batches = []
    for i in range(60):
        # batches of varying size, drifting mean and scale
        b = rng.normal(loc=[i * 0.1, -2.0, 5.0], scale=[1.0, 0.1 + i * 0.05, 3.0], size=(int(rng.integers(1, 40)), 3))
        batches.append(b)
        rms.update(torch.as_tensor(b, dtype=torch.float32))
    data = np.concatenate(batches)
    # the epsilon prior count (1e-4) is the only difference from the exact statistics
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rms.var.numpy(), data.var(axis=0), rtol=1e-5)
    assert rms.count == pytest.approx(len(data), abs=1e-3)
    assert rms.mean.dtype == torch.float64


def test_one_row_at_a_time_matches_numpy():
    # One env (MuJoCo) folds a single row each step: update's shortcut for n == 1.
    rng = np.random.default_rng(4)
    data = rng.normal(loc=[3.0, -1.0], scale=[2.0, 0.5], size=(500, 2))
    rms = RunningMeanStd(shape=(2,))
    for row in data:
        rms.update(torch.as_tensor(row[None]))
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(rms.var.numpy(), data.var(axis=0), rtol=1e-5)
    before = (rms.mean.clone(), rms.var.clone(), rms.count)
    rms.update(torch.tensor([[9.0, 9.0]]), mask=torch.tensor([False]))  # a reset row: no statistics
    assert torch.equal(rms.mean, before[0]) and torch.equal(rms.var, before[1]) and rms.count == before[2]
    rms.update(torch.tensor([[9.0, 9.0]]), mask=torch.tensor([True]))
    assert rms.count == before[2] + 1


def test_running_mean_std_scalar_shape():
    rng = np.random.default_rng(1)
    rms = RunningMeanStd()
    data = rng.exponential(2.0, size=1000)
    for chunk in np.split(data, 8):
        rms.update(torch.as_tensor(chunk))
    assert rms.mean.item() == pytest.approx(data.mean(), rel=1e-6)
    assert rms.var.item() == pytest.approx(data.var(), rel=1e-6)


def test_normalize_and_clip():
    rms = RunningMeanStd(shape=(2,), norm_epsilon=0.0)
    rms.load_state_dict(
        {
            "mean": torch.tensor([1.0, -1.0], dtype=torch.float64),
            "var": torch.tensor([4.0, 0.25], dtype=torch.float64),
            "count": torch.tensor(10.0, dtype=torch.float64),
        }
    )
    x = torch.tensor([[3.0, -1.5], [1.0, 10.0], [-100.0, -1.0]])
    out = rms.normalize(x, clip=5.0)
    expected = torch.tensor([[1.0, -1.0], [0.0, 5.0], [-5.0, 0.0]])  # (x - mean) / std, then clipped
    torch.testing.assert_close(out, expected)
    assert out.dtype == torch.float32
    # a large clip leaves the value alone
    assert rms.normalize(torch.tensor([[1.0, 10.0]]), clip=100.0)[0, 1].item() == pytest.approx(22.0)


def test_state_dict_round_trip():
    rng = np.random.default_rng(2)
    a = RunningMeanStd(shape=(4,))
    for _ in range(5):
        a.update(torch.as_tensor(rng.normal(size=(16, 4))))
    b = RunningMeanStd(shape=(4,))
    b.load_state_dict({k: v.clone() for k, v in a.state_dict().items()})
    x = torch.as_tensor(rng.normal(size=(3, 4)), dtype=torch.float32)
    torch.testing.assert_close(b.normalize(x, clip=10.0), a.normalize(x, clip=10.0))
    for k in ("mean", "var", "count"):
        torch.testing.assert_close(b.state_dict()[k], a.state_dict()[k])
    # they evolve identically and independently afterwards
    batch = torch.as_tensor(rng.normal(size=(8, 4)))
    a.update(batch)
    assert not torch.allclose(a.mean, b.mean)
    b.update(batch)
    torch.testing.assert_close(a.mean, b.mean)
    torch.testing.assert_close(a.var, b.var)


def reference_reward_scaling(rewards, dones, gamma, clip, eps=1e-8):
    """Gymnasium/CleanRL NormalizeReward semantics on plain numpy: the std of all discounted
    returns seen so far (including the current step's), returns reset after a done."""
    T, N = rewards.shape
    ret = np.zeros(N)
    seen = []
    out = np.zeros_like(rewards)
    for t in range(T):
        ret = ret * gamma + rewards[t]
        seen.extend(ret.tolist())
        out[t] = np.clip(rewards[t] / np.sqrt(np.var(seen) + eps), -clip, clip)
        ret = np.where(dones[t], 0.0, ret)
    return out


def test_reward_scaler_matches_reference_loop():
    rng = np.random.default_rng(3)
    T, N, gamma = 200, 4, 0.99
    rewards = rng.normal(1.0, 2.0, size=(T, N))
    dones = rng.random((T, N)) < 0.05
    scaler = RewardScaler(N, gamma, clip=10.0)
    out = np.stack([scaler(torch.as_tensor(rewards[t]), torch.as_tensor(dones[t])).numpy() for t in range(T)])
    expected = reference_reward_scaling(rewards, dones, gamma, clip=10.0)
    # early steps differ slightly through the epsilon prior count; compare once it is negligible
    np.testing.assert_allclose(out[5:], expected[5:], rtol=1e-4)


def test_reward_scaler_clips():
    scaler = RewardScaler(2, 0.99, clip=1.0)
    rng = np.random.default_rng(4)
    for _ in range(50):
        scaler(torch.as_tensor(rng.normal(size=2)), torch.zeros(2, dtype=torch.bool))
    out = scaler(torch.tensor([1e6, -1e6]), torch.zeros(2, dtype=torch.bool), update=False)
    torch.testing.assert_close(out, torch.tensor([1.0, -1.0]))


def test_reward_scaler_resets_on_done_and_update_false_freezes():
    scaler = RewardScaler(2, gamma=0.5, clip=100.0)
    scaler(torch.tensor([1.0, 1.0]), torch.tensor([False, False]))
    scaler(torch.tensor([2.0, 2.0]), torch.tensor([True, False]))
    # env 0 ended: its return restarts; env 1 keeps accumulating: 1 * 0.5 + 2 = 2.5
    torch.testing.assert_close(scaler.discounted_return, torch.tensor([0.0, 2.5], dtype=torch.float64))
    scaler(torch.tensor([4.0, 4.0]), torch.tensor([False, False]))
    torch.testing.assert_close(scaler.discounted_return, torch.tensor([4.0, 5.25], dtype=torch.float64))

    state = {k: v.clone() for k, v in scaler.state_dict().items()}
    scaler(torch.tensor([3.0, 3.0]), torch.tensor([False, False]), update=False)
    for k, v in scaler.state_dict().items():
        torch.testing.assert_close(v, state[k])

    other = RewardScaler(2, gamma=0.5, clip=100.0)
    other.load_state_dict(state)
    r = torch.tensor([0.7, -0.3])
    torch.testing.assert_close(other(r, torch.zeros(2, dtype=torch.bool)), scaler(r, torch.zeros(2, dtype=torch.bool)))


def test_masked_update_equals_an_update_with_the_true_rows_only():
    rng = np.random.default_rng(3)
    masked, reference = RunningMeanStd(shape=(2,)), RunningMeanStd(shape=(2,))
    for _ in range(20):
        batch = torch.as_tensor(rng.normal(size=(8, 2)))
        mask = torch.as_tensor(rng.random(8) < 0.6)
        masked.update(batch, mask)
        if mask.any():
            reference.update(batch[mask])
    masked.update(torch.ones(3, 2), torch.zeros(3, dtype=torch.bool))  # no true row: nothing changes
    torch.testing.assert_close(masked.mean, reference.mean)
    torch.testing.assert_close(masked.var, reference.var)
    assert float(masked.count) == pytest.approx(reference.count)


def test_reward_scaler_leaves_reset_rows_out_of_the_return_statistics():
    # Env 0 ends an episode at step 1; step 2 is its NEXT_STEP reset row (reward 0, not a transition).
    rewards = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 1.0]), torch.tensor([0.0, 4.0]), torch.tensor([5.0, 1.0])]
    done = [
        torch.tensor([False, False]),
        torch.tensor([True, False]),
        torch.tensor([False, False]),
        torch.tensor([False, False]),
    ]
    valid = [
        torch.tensor([True, True]),
        torch.tensor([True, True]),
        torch.tensor([False, True]),
        torch.tensor([True, True]),
    ]
    scaler = RewardScaler(2, gamma=0.5, clip=10.0)
    for r, d, v in zip(rewards, done, valid):
        scaler(r, d, valid=v)
    # The discounted returns of the real transitions only: env 0: 1, 3.5, (reset row), 5; env 1: 2, 2, 5, 3.5.
    seen = np.array([1.0, 2.0, 3.5, 2.0, 5.0, 5.0, 3.5])
    assert float(scaler.return_rms.count) == pytest.approx(len(seen), abs=1e-3)
    assert scaler.return_rms.var.item() == pytest.approx(seen.var(), rel=1e-4)


def test_moments_of_several_processes_fold_into_the_statistics_of_all_their_batches():
    # Data-parallel ranks (fastppo.training.distributed.SyncedStatistics): each starts from the same base,
    # folds in its own batches (masked ones too), and the summed moments_since fold back into the
    # statistics one process gets from the base's data plus every rank's batches.
    rng = np.random.default_rng(7)
    reference = RunningMeanStd(shape=(3,))
    reference.update(torch.as_tensor(rng.normal(5.0, 2.0, size=(1000, 3))))  # the shared history
    base = reference.snapshot()
    copies, batches = [], []
    for rank in range(3):
        rms = RunningMeanStd(shape=(3,))
        rms.load_state_dict(reference.state_dict())
        if rank == 2:  # a tensor count, as a masked update on a GPU keeps it (on the CPU it stays a float)
            rms.count = torch.as_tensor(rms.count, dtype=torch.float64)
        for _ in range(4):
            batch = torch.as_tensor(rng.normal(rank, 1.0 + rank, size=(16, 3)))
            mask = torch.as_tensor(rng.random(16) < 0.7) if rank == 2 else None
            rms.update(batch, mask)
            batches.append(batch if mask is None else batch[mask])
        copies.append(rms)
    total = sum(rms.moments_since(base) for rms in copies)
    for batch in batches:
        reference.update(batch)
    for rms in copies:
        rms.fold_moments(base, total.clone())
        torch.testing.assert_close(rms.mean, reference.mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rms.var, reference.var, rtol=1e-10, atol=1e-12)
        assert float(rms.count) == pytest.approx(reference.count, rel=1e-12)
        torch.testing.assert_close(rms.inv_std32, reference.inv_std32)
    assert isinstance(copies[0].count, float) and isinstance(
        copies[2].count, torch.Tensor
    )  # each keeps its update path


def test_a_masked_update_on_the_cpu_is_an_update_with_the_kept_rows_and_keeps_a_float_count():
    rng = np.random.default_rng(3)
    masked, selected = RunningMeanStd(shape=(2,)), RunningMeanStd(shape=(2,))
    for _ in range(5):
        batch = torch.as_tensor(rng.normal(1.0, 3.0, size=(8, 2)))
        mask = torch.as_tensor(rng.random(8) < 0.5)
        masked.update(batch, mask)
        selected.update(batch[mask])
    masked.update(batch, torch.zeros(8, dtype=torch.bool))  # nothing kept: nothing changes
    assert isinstance(masked.count, float) and masked.count == selected.count
    assert torch.equal(masked.mean, selected.mean) and torch.equal(masked.var, selected.var)
