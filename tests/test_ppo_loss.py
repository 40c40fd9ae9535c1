"""The clipped PPO loss against values worked out by hand."""

import math

import pytest
import torch

from distrl.algo.ppo import PPOLossCoefs, ppo_loss
from distrl.models import ActionDist

COEFS = PPOLossCoefs(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, clip_vloss=False, norm_adv=False)


def t(x):
    return torch.tensor(x, dtype=torch.float32)


def test_clipping_by_hand():
    old = t([0.0, 0.0, 0.0])
    new = t([math.log(1.5), math.log(0.5), math.log(1.1)])
    adv = t([1.0, -1.0, 2.0])
    out = ppo_loss(new, old, adv, t([0.0] * 3), t([0.0] * 3), t([1.0, 2.0, 3.0]), t([0.5] * 3), t([1, 1, 1]), COEFS)
    # per sample: max(-A r, -A clip(r)): 1) r=1.5,A=1 -> max(-1.5,-1.2)=-1.2; 2) r=.5,A=-1 -> max(.5,.8)=.8; 3)
    # r=1.1,A=2 -> -2.2
    assert out["loss_policy"].item() == pytest.approx((-1.2 + 0.8 - 2.2) / 3, abs=1e-6)
    assert out["loss_value"].item() == pytest.approx(0.5 * (1 + 4 + 9) / 3, abs=1e-6)
    expected = (-1.2 + 0.8 - 2.2) / 3 + 0.5 * 0.5 * 14 / 3 - 0.01 * 0.5
    assert out["loss"].item() == pytest.approx(expected, abs=1e-6)
    assert out["clip_frac"].item() == pytest.approx(2 / 3)


def test_mask_excludes_samples():
    out = ppo_loss(
        t([0.0, 5.0]),
        t([0.0, 0.0]),
        t([1.0, 100.0]),
        t([0.0, 0.0]),
        t([0.0, 0.0]),
        t([2.0, 50.0]),
        t([0.1, 9.0]),
        t([1, 0]),
        COEFS,
    )
    assert out["loss_policy"].item() == pytest.approx(-1.0)
    assert out["loss_value"].item() == pytest.approx(0.5 * 4.0)
    assert out["entropy"].item() == pytest.approx(0.1)


def test_clipped_value_loss_by_hand():
    coefs = PPOLossCoefs(0.2, 1.0, 0.0, clip_vloss=True, norm_adv=False)
    # new value 1.0, old 0.0, return 1.0: unclipped error 0, clipped value 0.2 -> error 0.64; max -> 0.64
    out = ppo_loss(t([0.0]), t([0.0]), t([0.0]), t([1.0]), t([0.0]), t([1.0]), t([0.0]), t([1]), coefs)
    assert out["loss_value"].item() == pytest.approx(0.5 * 0.64)


def test_distributions_log_prob_and_entropy():
    cat = ActionDist("categorical", 3)
    logits = torch.log(t([[0.2, 0.3, 0.5]]))
    logp, ent = cat.log_prob_entropy(logits, torch.tensor([2]))
    assert logp.item() == pytest.approx(math.log(0.5), abs=1e-6)
    assert ent.item() == pytest.approx(-(0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.5 * math.log(0.5)), abs=1e-6)
    gauss = ActionDist("gaussian", 1)
    logp, ent = gauss.log_prob_entropy(t([[1.0, math.log(2.0)]]), t([[3.0]]))
    assert logp.item() == pytest.approx(-0.5 * 1.0 - math.log(2.0) - 0.5 * math.log(2 * math.pi), abs=1e-6)
    assert ent.item() == pytest.approx(0.5 + 0.5 * math.log(2 * math.pi) + math.log(2.0), abs=1e-6)


def test_numpy_sampling_matches_torch_log_prob():
    import numpy as np

    rng = np.random.default_rng(0)
    for dist, params in [
        (ActionDist("categorical", 4), rng.normal(size=(256, 4)).astype(np.float32)),
        (
            ActionDist("gaussian", 2),
            np.concatenate([rng.normal(size=(256, 2)), np.full((256, 2), -0.5)], 1).astype(np.float32),
        ),
    ]:
        actions, logp = dist.sample_numpy(params, rng)
        ref, _ = dist.log_prob_entropy(torch.from_numpy(params), torch.from_numpy(actions))
        np.testing.assert_allclose(logp, ref.numpy(), rtol=1e-4, atol=1e-4)
    # the categorical sampler follows softmax(logits)
    logits = np.log(np.array([[0.1, 0.6, 0.3]], np.float32)).repeat(20000, 0)
    actions, _ = ActionDist("categorical", 3).sample_numpy(logits, rng)
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 20000, [0.1, 0.6, 0.3], atol=0.015)


def test_advantage_normalisation_by_hand():
    # Advantages [1, 2, 3, 100] with the last masked: mean 2, population variance 2/3 over the three that count.
    # Normalised: (A - 2) / sqrt(2/3) = [-1.2247, 0, 1.2247]. With every ratio 1 (no clipping) the policy loss is
    # -mean(A_norm) = 0 exactly, and a ratio of 1.1 on the first sample alone gives -(1.1 * -1.2247 + 0 + 1.2247) / 3.
    coefs = PPOLossCoefs(clip_coef=0.2, vf_coef=0.0, ent_coef=0.0, clip_vloss=False, norm_adv=True)
    zeros, adv, mask = t([0.0] * 4), t([1.0, 2.0, 3.0, 100.0]), t([1, 1, 1, 0])
    out = ppo_loss(zeros, zeros, adv, zeros, zeros, zeros, zeros, mask, coefs)
    assert out["loss_policy"].item() == pytest.approx(0.0, abs=1e-6)
    new = t([math.log(1.1), 0.0, 0.0, 0.0])
    out = ppo_loss(new, zeros, adv, zeros, zeros, zeros, zeros, mask, coefs)
    a = 1.0 / math.sqrt(2.0 / 3.0)
    assert out["loss_policy"].item() == pytest.approx(-(1.1 * -a + 0.0 + a) / 3, abs=1e-5)
    # Without normalisation the same inputs give -(1.1 * 1 + 2 + 3) / 3.
    raw = ppo_loss(new, zeros, adv, zeros, zeros, zeros, zeros, mask, COEFS)
    assert raw["loss_policy"].item() == pytest.approx(-(1.1 + 2 + 3) / 3, abs=1e-5)


def test_approx_kl_and_clip_fraction_by_hand():
    # ratios r = [1.5, 0.5, 1.1, 2.0]; the last is masked out. k3 estimator: mean of (r - 1) - log r.
    ratios = [1.5, 0.5, 1.1, 2.0]
    new, old = t([math.log(r) for r in ratios]), t([0.0] * 4)
    out = ppo_loss(new, old, t([1.0] * 4), old, old, old, old, t([1, 1, 1, 0]), COEFS)
    k3 = [(r - 1) - math.log(r) for r in ratios[:3]]  # 0.094535, 0.193147, 0.004690
    assert out["approx_kl"].item() == pytest.approx(sum(k3) / 3, abs=1e-6)
    assert out["approx_kl"].item() == pytest.approx(0.0974573, abs=1e-6)
    # |r - 1| > 0.2 for 1.5 and 0.5, not for 1.1: 2 of the 3 samples that count.
    assert out["clip_frac"].item() == pytest.approx(2 / 3)
    # Equal log-probs: no divergence and nothing clipped.
    same = ppo_loss(old, old, t([1.0] * 4), old, old, old, old, t([1, 1, 1, 1]), COEFS)
    assert same["approx_kl"].item() == 0.0 and same["clip_frac"].item() == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distributions_match_torch_distributions(seed):
    generator = torch.Generator().manual_seed(seed)
    # Categorical: random logits (some very peaked), actions drawn from them.
    logits = torch.randn(512, 6, generator=generator) * torch.tensor([0.1, 1.0, 5.0, 20.0]).repeat(128)[:, None]
    reference = torch.distributions.Categorical(logits=logits)
    actions = reference.sample()
    logp, entropy = ActionDist("categorical", 6).log_prob_entropy(logits, actions)
    torch.testing.assert_close(logp, reference.log_prob(actions), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, reference.entropy(), rtol=1e-5, atol=1e-5)
    # Gaussian (diagonal): means, log standard deviations from -3 to 2, actions near and far from the mean.
    mean = torch.randn(512, 3, generator=generator) * 2
    log_std = torch.rand(512, 3, generator=generator) * 5 - 3
    normal = torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1)
    actions = mean + torch.randn(512, 3, generator=generator) * log_std.exp() * 3
    logp, entropy = ActionDist("gaussian", 3).log_prob_entropy(torch.cat([mean, log_std], -1), actions)
    torch.testing.assert_close(logp, normal.log_prob(actions), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(entropy, normal.entropy(), rtol=1e-5, atol=1e-5)


def test_sample_weights_scale_each_samples_surrogate_by_hand():
    """The decoupled objective's weight (pi_learner / pi_behaviour) multiplies each sample's clipped surrogate; the
    value loss, entropy and the ratio's statistics are the unweighted ones."""
    old = t([0.0, 0.0, 0.0])
    new = t([math.log(1.5), math.log(0.5), math.log(1.1)])
    adv = t([1.0, -1.0, 2.0])
    args = (new, old, adv, t([0.0] * 3), t([0.0] * 3), t([1.0, 2.0, 3.0]), t([0.5] * 3), t([1, 1, 1]), COEFS)
    unweighted, ones = ppo_loss(*args), ppo_loss(*args, t([1.0, 1.0, 1.0]))
    assert ones["loss"].item() == pytest.approx(unweighted["loss"].item(), abs=1e-7)
    out = ppo_loss(*args, t([2.0, 0.5, 0.0]))
    assert out["loss_policy"].item() == pytest.approx((2.0 * -1.2 + 0.5 * 0.8 + 0.0 * -2.2) / 3, abs=1e-6)
    for key in ("loss_value", "entropy", "approx_kl", "clip_frac"):
        assert out[key].item() == pytest.approx(unweighted[key].item(), abs=1e-7)


@pytest.mark.parametrize("weighted", [False, True])
def test_a_constant_advantage_moves_a_lagged_batch_unweighted_but_not_weighted(weighted):
    """Decoupled PPO on a batch the behaviour policy b sampled, the ratio measured from the learner's policy p != b:
    a constant added to every advantage (a baseline's offset, nothing about the actions) must not move the policy.
    Unweighted, the surrogate's gradient is c * sum_a b(a) grad log pi(a), which at pi = p is not 0: a negative c
    pushes the policy away from b (the policy an update back), so a chance change is amplified, update after update.
    Weighted by p / b (the decoupled objective's importance weight), it is c * sum_a grad p(a) = 0."""
    b, p = t([0.5, 0.3, 0.2]), t([0.3, 0.4, 0.3])  # every p / b under 2: no cap takes effect
    actions = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)  # exactly b's frequencies
    logits = p.log().clone().requires_grad_(True)
    new_logp = torch.log_softmax(logits, 0)[actions]
    zeros, ones = t([0.0] * 100), t([1.0] * 100)
    weights = (p / b)[actions] if weighted else None
    out = ppo_loss(new_logp, p.log()[actions], t([-1.0] * 100), zeros, zeros, zeros, zeros, ones, COEFS, weights)
    out["loss_policy"].backward()
    if weighted:
        torch.testing.assert_close(logits.grad, torch.zeros(3), rtol=0, atol=1e-6)
    else:
        # loss = mean ratio = sum_a b(a) pi(a) / p(a), whose gradient in the logits at pi = p is b - p: descent lowers
        # the logit of action 0, which b took more often than p would (0.5 against 0.3), away from b
        torch.testing.assert_close(logits.grad, b - p, rtol=0, atol=1e-6)
