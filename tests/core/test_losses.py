"""PPO objectives against hand-computed numbers and the properties the seeds ask for."""

import math

import pytest
import torch

from fastppo.core import policy_loss, ppo_loss, reference_kl_penalty, value_loss

F64 = torch.float64

# Five samples covering every case of the clipped objective with eps = 0.2:
#   A > 0, ratio above 1+eps (clipped to 1.2); A > 0, ratio below 1-eps (unclipped, the min keeps r A);
#   A < 0, ratio above 1+eps (unclipped); A < 0, ratio below 1-eps (clipped to 0.8); A > 0 inside.
RATIOS = [1.5, 0.5, 1.5, 0.5, 1.1]
ADVANTAGES = [1.0, 1.0, -1.0, -1.0, 2.0]
# per-sample objective min(r A, clip(r) A): 1.2, 0.5, -1.5, -0.8, 2.2  -> mean 0.32
CLIPPED_OBJECTIVE = [1.2, 0.5, -1.5, -0.8, 2.2]


def logprobs_for(ratios, old=None):
    old = torch.zeros(len(ratios), dtype=F64) if old is None else old
    return old + torch.log(torch.tensor(ratios, dtype=F64)), old


def test_clipped_surrogate_hand_computed():
    new, old = logprobs_for(RATIOS)
    loss, m = policy_loss(new, old, torch.tensor(ADVANTAGES, dtype=F64), clip_coef=0.2)
    assert loss.item() == pytest.approx(-sum(CLIPPED_OBJECTIVE) / 5)
    assert loss.item() == pytest.approx(-0.32)
    assert m["pg_loss"].item() == pytest.approx(-0.32)
    # |r - 1| > 0.2 for the first four samples only
    assert m["clipfrac"].item() == pytest.approx(0.8)
    assert m["approx_kl"].item() == pytest.approx(sum((r - 1) - math.log(r) for r in RATIOS) / 5)
    assert m["old_approx_kl"].item() == pytest.approx(sum(-math.log(r) for r in RATIOS) / 5)
    mean_r = sum(RATIOS) / 5
    std_r = math.sqrt(sum((r - mean_r) ** 2 for r in RATIOS) / 4)
    assert m["ratio_mean"].item() == pytest.approx(mean_r)
    assert m["ratio_std"].item() == pytest.approx(std_r)


def test_clipped_surrogate_single_cases():
    cases = [
        # (ratio, advantage, expected per-sample loss)
        (1.0, 3.0, -3.0),
        (1.3, 2.0, -2.4),  # clipped at 1.2
        (0.7, 2.0, -1.4),  # below the range with A > 0: pessimistic min keeps 0.7 * 2
        (1.3, -2.0, 2.6),  # above the range with A < 0: keeps 1.3 * -2
        (0.7, -2.0, 1.6),  # clipped at 0.8
        (0.9, -1.0, 0.9),  # inside
    ]
    for ratio, adv, expected in cases:
        # two identical samples: the mean is the per-sample value (and the ratio std is defined)
        new, old = logprobs_for([ratio, ratio])
        loss, _ = policy_loss(new, old, torch.tensor([adv, adv], dtype=F64), clip_coef=0.2)
        assert loss.item() == pytest.approx(expected), (ratio, adv)


def test_clipped_region_has_zero_gradient():
    # A > 0 with ratio above 1+eps, and A < 0 with ratio below 1-eps: the clipped term is constant.
    # The third sample (A > 0, ratio below 1-eps) is on the unclipped side and still pushes.
    new = torch.log(torch.tensor([1.5, 0.5, 0.5], dtype=F64)).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0, 1.0], dtype=F64)
    loss, _ = policy_loss(new, torch.zeros(3, dtype=F64), adv, clip_coef=0.2)
    loss.backward()
    assert new.grad[0].item() == 0.0 and new.grad[1].item() == 0.0
    assert new.grad[2].item() == pytest.approx(-0.5 / 3)  # d(-r A / 3)/d log r = -r A / 3


def test_gradient_at_ratio_one_equals_vanilla_policy_gradient():
    torch.manual_seed(0)
    B, K = 32, 4
    logits = torch.randn(B, K, dtype=F64, requires_grad=True)
    actions = torch.distributions.Categorical(logits=logits.detach()).sample()
    advantages = torch.randn(B, dtype=F64)

    newlogprob = torch.distributions.Categorical(logits=logits).log_prob(actions)
    loss, m = policy_loss(newlogprob, newlogprob.detach(), advantages, clip_coef=0.2)
    (grad_ppo,) = torch.autograd.grad(loss, logits)

    vanilla = -(advantages * torch.distributions.Categorical(logits=logits).log_prob(actions)).mean()
    (grad_pg,) = torch.autograd.grad(vanilla, logits)

    assert grad_pg.abs().max() > 1e-3
    torch.testing.assert_close(grad_ppo, grad_pg)
    assert m["clipfrac"].item() == 0.0
    assert m["approx_kl"].item() == 0.0
    assert m["ratio_mean"].item() == 1.0


def test_infinite_clip_equals_unclipped_surrogate():
    g = torch.Generator().manual_seed(1)
    new = torch.randn(50, generator=g, dtype=F64)
    old = new + 0.8 * torch.randn(50, generator=g, dtype=F64)
    adv = torch.randn(50, generator=g, dtype=F64)
    loss, m = policy_loss(new, old, adv, clip_coef=math.inf)
    ratios = [math.exp(n - o) for n, o in zip(new.tolist(), old.tolist())]
    assert loss.item() == pytest.approx(-sum(r * a for r, a in zip(ratios, adv.tolist())) / 50)
    assert m["clipfrac"].item() == 0.0
    # and the finite clip really does change the loss on this data
    clipped, _ = policy_loss(new, old, adv, clip_coef=0.1)
    assert clipped.item() != pytest.approx(loss.item())


def test_kl_penalty_objective():
    new, old = logprobs_for(RATIOS)
    adv = torch.tensor(ADVANTAGES, dtype=F64)
    beta = 0.7
    loss, m = policy_loss(new, old, adv, clip_coef=0.2, objective="kl", kl_beta=beta)
    surrogate = sum(r * a for r, a in zip(RATIOS, ADVANTAGES)) / 5
    kl = sum((r - 1) - math.log(r) for r in RATIOS) / 5
    assert loss.item() == pytest.approx(-surrogate + beta * kl)
    assert m["approx_kl"].item() == pytest.approx(kl)
    # beta = 0 is the unclipped surrogate
    loss0, _ = policy_loss(new, old, adv, clip_coef=0.2, objective="kl", kl_beta=0.0)
    assert loss0.item() == pytest.approx(-surrogate)


def test_unknown_objective_raises():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="objective"):
        policy_loss(x, x, x, 0.2, objective="trpo")


def test_value_loss_unclipped_and_clipped_by_hand():
    newvalue = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    returns = torch.tensor([1.5, 0.0, 3.0], dtype=F64)
    oldvalue = torch.tensor([0.0, 2.5, 2.0], dtype=F64)
    # unclipped: 0.5 * mean(0.25, 4, 0)
    v, m = value_loss(newvalue, returns)
    assert v.item() == pytest.approx(0.5 * 4.25 / 3)
    assert m["v_loss"].item() == pytest.approx(0.5 * 4.25 / 3)
    # without a clip coefficient the old values are ignored
    v_none, _ = value_loss(newvalue, returns, oldvalue, clip_coef=None)
    assert v_none.item() == pytest.approx(0.5 * 4.25 / 3)
    # clipped predictions old + clamp(new - old, +-0.2) = 0.2, 2.3, 2.2
    # squared errors 1.69, 5.29, 0.64; max with 0.25, 4, 0 -> 1.69, 5.29, 0.64
    v_clip, _ = value_loss(newvalue, returns, oldvalue, clip_coef=0.2)
    assert v_clip.item() == pytest.approx(0.5 * (1.69 + 5.29 + 0.64) / 3)


def test_value_loss_clipping_keeps_the_larger_error():
    # The clipped prediction is closer to the return here, so the unclipped error wins.
    newvalue = torch.tensor([3.0], dtype=F64)
    oldvalue = torch.tensor([0.0], dtype=F64)
    returns = torch.tensor([0.5], dtype=F64)
    v, _ = value_loss(newvalue, returns, oldvalue, clip_coef=0.2)
    assert v.item() == pytest.approx(0.5 * 2.5**2)


def random_batch(seed, B=40):
    g = torch.Generator().manual_seed(seed)

    def r():
        return torch.randn(B, generator=g, dtype=F64)

    old = r()
    return dict(
        newlogprob=old + 0.3 * r(),
        oldlogprob=old,
        advantages=r(),
        entropy=r().abs(),
        newvalue=r(),
        oldvalue=r(),
        returns=r(),
    )


def test_ppo_loss_total_is_weighted_sum():
    b = random_batch(2)
    clip, ent_coef, vf_coef = 0.2, 0.01, 0.5
    loss, m = ppo_loss(**b, clip_coef=clip, ent_coef=ent_coef, vf_coef=vf_coef, clip_vloss=True)

    ratio = (b["newlogprob"] - b["oldlogprob"]).exp().tolist()
    adv = b["advantages"].tolist()
    pg = -sum(min(r * a, min(max(r, 1 - clip), 1 + clip) * a) for r, a in zip(ratio, adv)) / len(adv)
    v_terms = []
    for nv, ov, ret in zip(b["newvalue"].tolist(), b["oldvalue"].tolist(), b["returns"].tolist()):
        vc = ov + min(max(nv - ov, -clip), clip)
        v_terms.append(max((nv - ret) ** 2, (vc - ret) ** 2))
    v = 0.5 * sum(v_terms) / len(v_terms)
    ent = b["entropy"].mean().item()

    assert m["pg_loss"].item() == pytest.approx(pg)
    assert m["v_loss"].item() == pytest.approx(v)
    assert m["entropy"].item() == pytest.approx(ent)
    assert loss.item() == pytest.approx(pg - ent_coef * ent + vf_coef * v)
    assert m["loss"].item() == pytest.approx(loss.item())

    # clip_vloss=False uses the plain 0.5 * MSE
    loss_nc, m_nc = ppo_loss(**b, clip_coef=clip, ent_coef=ent_coef, vf_coef=vf_coef, clip_vloss=False)
    v_plain = 0.5 * ((b["newvalue"] - b["returns"]) ** 2).mean().item()
    assert m_nc["v_loss"].item() == pytest.approx(v_plain)
    assert loss_nc.item() == pytest.approx(pg - ent_coef * ent + vf_coef * v_plain)


def test_masked_entries_change_nothing():
    b = random_batch(3)
    mask = torch.zeros(40, dtype=torch.bool)
    mask[::3] = True
    kwargs = dict(clip_coef=0.2, ent_coef=0.01, vf_coef=0.5)
    loss, m = ppo_loss(**b, mask=mask, **kwargs)

    g = torch.Generator().manual_seed(99)
    perturbed = {k: torch.where(mask, v, v + 3.0 * torch.randn(40, generator=g, dtype=F64)) for k, v in b.items()}
    loss_p, m_p = ppo_loss(**perturbed, mask=mask, **kwargs)
    assert loss_p.item() == pytest.approx(loss.item())
    for k in m:
        assert m_p[k].item() == pytest.approx(m[k].item()), k

    # and equals the unmasked loss on the valid subset
    loss_sub, m_sub = ppo_loss(**{k: v[mask] for k, v in b.items()}, **kwargs)
    assert loss_sub.item() == pytest.approx(loss.item())
    for k in m:
        assert m_sub[k].item() == pytest.approx(m[k].item()), k

    # the KL-penalty variant too
    kl_loss, _ = ppo_loss(**b, mask=mask, objective="kl", kl_beta=0.3, **kwargs)
    kl_loss_p, _ = ppo_loss(**perturbed, mask=mask, objective="kl", kl_beta=0.3, **kwargs)
    assert kl_loss_p.item() == pytest.approx(kl_loss.item())


def test_masked_entries_get_no_gradient():
    b = random_batch(4)
    mask = torch.rand(40, generator=torch.Generator().manual_seed(5)) < 0.5
    new = b.pop("newlogprob").requires_grad_(True)
    newvalue = b.pop("newvalue").requires_grad_(True)
    loss, _ = ppo_loss(new, newvalue=newvalue, **b, mask=mask, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5)
    loss.backward()
    assert (new.grad[~mask] == 0).all() and (newvalue.grad[~mask] == 0).all()
    assert new.grad[mask].abs().sum() > 0 and newvalue.grad[mask].abs().sum() > 0


def test_works_on_token_shaped_batches():
    # RLHF passes [B, L] tensors with a token mask.
    b = {k: v.reshape(5, 8) for k, v in random_batch(6).items()}
    mask = torch.ones(5, 8, dtype=torch.bool)
    mask[:, 6:] = False
    loss, _ = ppo_loss(**b, mask=mask, clip_coef=0.2, ent_coef=0.0, vf_coef=0.5)
    loss_flat, _ = ppo_loss(**{k: v[mask] for k, v in b.items()}, clip_coef=0.2, ent_coef=0.0, vf_coef=0.5)
    assert loss.item() == pytest.approx(loss_flat.item())


def test_reference_kl_penalty_by_hand():
    # log(pi_ref / pi) = -0.5, 1.0, 0.0 and a masked token whose garbage changes nothing
    new = torch.tensor([-1.0, -2.0, -0.3, -1000.0], dtype=F64, requires_grad=True)
    ref = torch.tensor([-1.5, -1.0, -0.3, 0.0], dtype=F64)
    mask = torch.tensor([True, True, True, False])
    per_token = [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1, 0.0]  # r - log r - 1, r = pi_ref / pi
    loss, m = reference_kl_penalty(new, ref, kl_coef=0.1, mask=mask)
    assert loss.item() == pytest.approx(0.1 * sum(per_token) / 3)
    assert m["ref_kl"].item() == pytest.approx(sum(per_token) / 3)
    loss.backward()
    # d/dlogpi (r - log r - 1) = 1 - r: pulls log pi up where the reference is likelier, down where it is not
    expected = [0.1 / 3 * (1 - math.exp(x)) for x in (-0.5, 1.0, 0.0)] + [0.0]
    torch.testing.assert_close(new.grad, torch.tensor(expected, dtype=F64))


@pytest.mark.parametrize("masked", [False, True])
def test_per_seed_losses_along_dim_equal_each_seed_alone(masked):
    """A stack of seeds reduces along dim=-1: each seed's loss and metrics are what that seed's
    rows alone give (the masked rows are each seed's padding)."""
    g = torch.Generator().manual_seed(0)
    seeds, rows = 3, 7
    new, old, adv, ent, newv, oldv, ret = (torch.randn(seeds, rows, generator=g, dtype=torch.float64) for _ in range(7))
    mask = torch.rand(seeds, rows, generator=g) > 0.3 if masked else None
    kwargs = dict(clip_coef=0.2, ent_coef=0.01, vf_coef=0.5)
    loss, metrics = ppo_loss(new, old, adv, ent, newv, oldv, ret, mask=mask, dim=-1, **kwargs)
    assert loss.shape == (seeds,)
    for s in range(seeds):
        keep = slice(None) if mask is None else mask[s]
        alone, alone_metrics = ppo_loss(
            new[s][keep], old[s][keep], adv[s][keep], ent[s][keep], newv[s][keep], oldv[s][keep], ret[s][keep], **kwargs
        )
        assert torch.allclose(loss[s], alone)
        for name, value in alone_metrics.items():
            assert torch.allclose(metrics[name][s], value), name
