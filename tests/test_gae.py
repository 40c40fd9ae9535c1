"""GAE against hand-computed values, the plain-loop reference, and the NEXT_STEP / truncation rules."""

import numpy as np
import pytest
import torch

from distrl.algo.ppo import gae


def gae_reference(rewards, values, terminated, truncated, valid, gamma, gae_lambda):
    """A plain per-env, per-step loop of the same computation: the equivalence test's yardstick."""
    steps, envs = len(rewards), len(rewards[0])
    advantages = [[0.0] * envs for _ in range(steps)]
    for n in range(envs):
        next_advantage = 0.0
        for t in reversed(range(steps)):
            if not valid[t][n]:
                next_advantage = 0.0
                continue
            bootstrap = 0.0 if terminated[t][n] else gamma * float(values[t + 1][n])
            delta = float(rewards[t][n]) + bootstrap - float(values[t][n])
            carry = 0.0 if (terminated[t][n] or truncated[t][n]) else gamma * gae_lambda * next_advantage
            advantages[t][n] = delta + carry
            next_advantage = advantages[t][n]
    returns = [
        [advantages[t][n] + float(values[t][n]) if valid[t][n] else 0.0 for n in range(envs)] for t in range(steps)
    ]
    return advantages, returns


def t(x, dtype=torch.float32):
    return torch.tensor(x, dtype=dtype)


def run(rewards, values, term, trunc, valid, gamma=0.9, lam=0.8):
    return gae(t(rewards), t(values), t(term, torch.bool), t(trunc, torch.bool), t(valid, torch.bool), gamma, lam)


def test_hand_computed_three_steps():
    # One env, no episode end: deltas d_t = r_t + g V_{t+1} - V_t; A_t = d_t + g l A_{t+1}
    rewards, values = [[1.0], [0.0], [2.0]], [[0.5], [1.0], [0.0], [3.0]]
    adv, ret = run(rewards, values, [[0]] * 3, [[0]] * 3, [[1]] * 3)
    d2 = 2.0 + 0.9 * 3.0 - 0.0  # 4.7
    d1 = 0.0 + 0.9 * 0.0 - 1.0  # -1.0
    d0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    a2 = d2
    a1 = d1 + 0.72 * a2
    a0 = d0 + 0.72 * a1
    torch.testing.assert_close(adv[:, 0], t([a0, a1, a2]))
    torch.testing.assert_close(ret[:, 0], t([a0 + 0.5, a1 + 1.0, a2 + 0.0]))


def test_termination_does_not_bootstrap_truncation_does():
    # Step 0 ends the episode; values[1] is the final observation's value (NEXT_STEP layout).
    values = [[0.0], [10.0], [0.0]]
    adv_term, _ = run([[1.0], [0.0]], values, [[1], [0]], [[0], [0]], [[1], [0]])
    adv_trunc, _ = run([[1.0], [0.0]], values, [[0], [0]], [[1], [0]], [[1], [0]])
    assert adv_term[0, 0].item() == pytest.approx(1.0)  # r only
    assert adv_trunc[0, 0].item() == pytest.approx(1.0 + 0.9 * 10.0)  # r + gamma * V(final obs)


def test_reset_step_is_masked_and_does_not_leak():
    # Step 1 is the NEXT_STEP reset step (invalid): its reward/value must not reach step 0 or step 2.
    rewards = [[1.0], [123.0], [1.0]]
    values = [[0.0], [0.0], [55.0], [0.0]]
    adv, ret = run(rewards, values, [[1], [0], [0]], [[0], [0], [0]], [[1], [0], [1]])
    assert adv[0, 0].item() == pytest.approx(1.0)
    assert adv[1, 0].item() == 0.0 and ret[1, 0].item() == 0.0
    assert adv[2, 0].item() == pytest.approx(1.0 + 0.0 - 55.0)


def test_matches_plain_loop_reference_on_random_episodes():
    rng = np.random.default_rng(0)
    steps, envs = 50, 7
    term = rng.random((steps, envs)) < 0.05
    trunc = (rng.random((steps, envs)) < 0.05) & ~term
    valid = np.ones((steps, envs), bool)
    valid[1:] = ~(term | trunc)[:-1]  # the step after a done is the reset step
    rewards = rng.normal(size=(steps, envs)) * valid
    values = rng.normal(size=(steps + 1, envs))
    adv, ret = run(rewards.tolist(), values.tolist(), term.tolist(), trunc.tolist(), valid.tolist(), 0.97, 0.9)
    ref_adv, ref_ret = gae_reference(rewards, values, term, trunc, valid, 0.97, 0.9)
    torch.testing.assert_close(adv, t(ref_adv), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, t(ref_ret), rtol=1e-5, atol=1e-5)
