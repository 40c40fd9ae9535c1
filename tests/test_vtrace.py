"""V-trace against a hand-computed example and against GAE at importance ratio 1; APPO's ratios from the learner."""

import math

import numpy as np
import pytest
import torch

from distrl.algo.appo import vtrace
from distrl.algo.ppo import gae
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker


def test_vtrace_matches_a_hand_computed_example():
    # T=3, one env, no episode end; ratios 2, 0.5, 1 clipped at 1: rho = c / lambda = [1, 0.5, 1].
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5], [2.0]])
    no = torch.zeros(3, 1, dtype=torch.bool)
    log_rhos = torch.log(torch.tensor([[2.0], [0.5], [1.0]]))
    adv, ret = vtrace(rewards, values, no, no, ~no, log_rhos, gamma=0.9, gae_lambda=1.0, rho_bar=1.0, c_bar=1.0)
    # delta = rho * (r + 0.9 V' - V) = [1.4, 0.5 * 2.35, 3.3]; A_t = delta_t + 0.9 c_t A_{t+1}
    a2 = 3.3
    a1 = 1.175 + 0.9 * 0.5 * a2
    a0 = 1.4 + 0.9 * 1.0 * a1
    torch.testing.assert_close(adv[:, 0], torch.tensor([a0, a1, a2]))
    # IMPALA's v_s = V(x_s) + sum_t gamma^(t-s) (prod_{i<t} c_i) delta_t, written out for s = 0
    v0 = 0.5 + 1.4 + 0.9 * 1.0 * 1.175 + 0.81 * 1.0 * 0.5 * 3.3
    assert math.isclose(float(ret[0, 0]), v0, rel_tol=1e-6) and math.isclose(v0, 4.294, rel_tol=1e-9)


def test_vtrace_clips_large_ratios_at_rho_bar_and_c_bar():
    rewards, values = torch.ones(2, 1), torch.zeros(3, 1)
    no = torch.zeros(2, 1, dtype=torch.bool)
    big = torch.full((2, 1), math.log(10.0))
    adv, _ = vtrace(rewards, values, no, no, ~no, big, gamma=1.0, gae_lambda=1.0, rho_bar=2.0, c_bar=0.5)
    torch.testing.assert_close(adv[:, 0], torch.tensor([2.0 + 0.5 * 2.0, 2.0]))  # rho = 2, c = 0.5


def _episodes(rng, steps=64, envs=8):
    rewards = torch.from_numpy(rng.normal(size=(steps, envs)).astype(np.float32))
    values = torch.from_numpy(rng.normal(size=(steps + 1, envs)).astype(np.float32))
    terminated = torch.from_numpy(rng.random((steps, envs)) < 0.05)
    truncated = torch.from_numpy(rng.random((steps, envs)) < 0.03) & ~terminated
    valid = torch.ones(steps, envs, dtype=torch.bool)
    valid[1:] = ~(terminated | truncated)[:-1]  # NEXT_STEP: the step after an episode's end is the reset step
    return rewards, values, terminated, truncated, valid


@pytest.mark.parametrize("rho_bar, c_bar", [(1.0, 1.0), (1.5, 3.0)])
def test_vtrace_is_gae_when_behaviour_and_target_policies_are_the_same(rho_bar, c_bar):
    data = _episodes(np.random.default_rng(0))
    ratio_one = torch.zeros_like(data[0])
    adv, ret = vtrace(*data, ratio_one, 0.99, 0.95, rho_bar, c_bar)
    gae_adv, gae_ret = gae(*data, 0.99, 0.95)
    torch.testing.assert_close(adv, gae_adv, rtol=0, atol=0)
    torch.testing.assert_close(ret, gae_ret, rtol=0, atol=0)


def test_vtrace_ignores_ratios_on_reset_steps():
    data = _episodes(np.random.default_rng(1))
    log_rhos = torch.zeros_like(data[0])
    log_rhos[~data[4]] = 50.0  # an ignored action's "ratio" must not reach anything
    torch.testing.assert_close(
        vtrace(*data, log_rhos, 0.99, 0.95, 1.0, 1.0)[0], gae(*data, 0.99, 0.95)[0], rtol=0, atol=0
    )


APPO_MODELS = {
    "mlp": [],
    "lstm": ["model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=8"],
    "attention": [
        "env.id=distrl.envs.wrappers:cartpole_no_velocity",
        "env.vectorization=sync",
        "model.type=attention",
        "model.window=4",
        "model.d_model=16",
        "model.heads=2",
        "model.layers=1",
    ],
}


@pytest.mark.parametrize("name", list(APPO_MODELS))
@pytest.mark.parametrize("algo", ["appo", "ppo"])
def test_on_its_own_fresh_batch_the_learner_proximal_trains_on_gae_targets(name, algo, monkeypatch):
    """At policy lag 0 the learner's log-probabilities and values of the batch are the workers' (ratio 1), so APPO's
    targets and those of PPO with the learner as proximal model are GAE's on the recorded values: the learner's forward
    over the batch lines every step up with its own row, for every model kind."""
    overrides = [
        "env.num_envs_per_worker=8",
        "rollout.rollout_length=32",
        "ppo.minibatch_size=64",
        f"algo={algo}",
        "ppo.proximal=learner",
        "rollout.compile.backend=eager",
        *APPO_MODELS[name],
    ]
    config = load_config(None, overrides)
    worker, learner = RolloutWorker(config), Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    seen = {}
    targets = learner.algorithm.targets

    def spy(data, current):
        seen["log_rhos"] = current().logp - data["logp"]
        seen["value_gap"] = current().values - data["values"][:-1]
        seen["valid"] = data["valid"]
        seen["targets"] = targets(data, current)
        seen["gae"] = gae(
            data["rewards"], data["values"], data["terminated"], data["truncated"], data["valid"], 0.99, 0.95
        )
        return seen["targets"]

    monkeypatch.setattr(learner.algorithm, "targets", spy)
    learner.update(worker.sample())
    assert float(seen["log_rhos"][seen["valid"]].abs().max()) < 1e-4
    assert float(seen["value_gap"][seen["valid"]].abs().max()) < 1e-4
    torch.testing.assert_close(seen["targets"].advantages, seen["gae"][0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(seen["targets"].returns, seen["gae"][1], rtol=1e-4, atol=1e-4)


# ppo.proximal as set, the pipeline, and the policy the ratio is then measured from (auto: learner under async only)
PROXIMAL_CASES = {
    "behaviour": ("behaviour", "sync", "behaviour"),
    "learner": ("learner", "sync", "learner"),
    "auto, async": ("auto", "async", "learner"),
    "auto, overlap": ("auto", "overlap", "behaviour"),
}


@pytest.mark.parametrize("algo", ["ppo", "appo"])
@pytest.mark.parametrize("case", list(PROXIMAL_CASES))
def test_a_lagged_batch_starts_the_update_at_ratio_1_with_the_learner_as_proximal_policy(algo, case, monkeypatch):
    """With ``ppo.proximal: learner`` the surrogate's ratio is measured from the learner's policy at the update's start
    (decoupled PPO), so a batch sampled one version back starts unclipped, and the values (the targets' baseline, the
    value clip's centre) are the learner's critic's; from the behaviour policy neither holds. ``auto`` (the default)
    is the learner's under pipeline async, the behaviour policy's otherwise."""
    setting, pipeline, proximal = PROXIMAL_CASES[case]
    overrides = [
        "env.num_envs_per_worker=8",
        "rollout.rollout_length=32",
        "ppo.minibatch_size=64",
        f"algo={algo}",
        "rollout.compile.backend=eager",
        "ppo.lr=0.01",
        f"ppo.proximal={setting}",
        f"rollout.pipeline={pipeline}",
    ]
    config = load_config(None, overrides)
    assert config.proximal == proximal
    worker, learner = RolloutWorker(config), Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    stale = worker.sample()
    learner.update(worker.sample())  # the learner moves one version past the stale batch's policy
    first = {}
    loss = learner.algorithm.loss

    def spy(dist, pd_params, values, mb):
        if not first:
            new_logp, _ = dist.log_prob_entropy(pd_params, mb["actions"])
            first["log_ratio"] = (new_logp - mb["logp"])[mb["mask"] > 0].detach()
            first["value_gap"] = (values - mb["values"])[mb["mask"] > 0].detach()
        return loss(dist, pd_params, values, mb)

    monkeypatch.setattr(learner.algorithm, "loss", spy)
    learner.update(stale)
    moved, critic_moved = float(first["log_ratio"].abs().max()), float(first["value_gap"].abs().max())
    if proximal == "learner":
        assert moved < 1e-5 and critic_moved < 1e-5
    else:
        assert moved > 1e-3 and critic_moved > 1e-3  # the behaviour model is one update (lr 0.01, 4 epochs) behind


@pytest.mark.parametrize("clip", [None, 1.0, 2.0])
def test_the_behaviour_weight_is_the_learners_probability_over_the_behaviours_capped(clip, monkeypatch):
    """``ppo.behaviour_weight_clip`` (with ``proximal: learner``): each sample of a lagged batch is weighted by
    pi_learner / pi_behaviour of its action, capped, over the batch's mean of those (so they average 1); on a fresh
    batch every weight is 1; null, no weights."""
    overrides = [
        "env.num_envs_per_worker=8",
        "rollout.rollout_length=32",
        "ppo.minibatch_size=64",
        "ppo.lr=0.01",
        "rollout.compile.backend=eager",
        "ppo.proximal=learner",
        f"ppo.behaviour_weight_clip={'null' if clip is None else clip}",
    ]
    config = load_config(None, overrides)
    worker, learner = RolloutWorker(config), Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    fresh, stale = worker.sample(), worker.sample()
    seen = []
    targets = learner.algorithm.targets

    def spy(data, current):
        out = targets(data, current)
        seen.append((out.weights, (current().logp - data["logp"]).exp(), data["valid"]))
        return out

    monkeypatch.setattr(learner.algorithm, "targets", spy)
    learner.update(fresh)
    learner.update(stale)  # one version behind the learner now
    if clip is None:
        assert seen[0][0] is None and seen[1][0] is None
        return
    (fresh_w, _, valid), (stale_w, ratio, stale_valid) = seen
    torch.testing.assert_close(fresh_w[valid], torch.ones_like(fresh_w[valid]), rtol=0, atol=1e-4)
    capped = ratio.clamp(max=clip)
    torch.testing.assert_close(stale_w, capped / capped[stale_valid].mean())
    assert float(stale_w[stale_valid].mean()) == pytest.approx(1.0, abs=1e-5)
    assert float((ratio[stale_valid] - 1).abs().max()) > 1e-3  # the learner moved: the weights are not all 1
    if clip == 1.0:  # the cap takes effect: those samples share the largest weight
        assert bool((ratio > 1.0).any()) and float(stale_w[ratio > 1.0].std()) < 1e-6


def test_a_behaviour_weight_without_the_learner_as_proximal_policy_is_refused():
    from distrl.config import ConfigError

    with pytest.raises(ConfigError, match="ppo.behaviour_weight_clip=2.0: .* needs ppo.proximal=learner"):
        load_config(None, ["ppo.behaviour_weight_clip=2", "ppo.proximal=behaviour"])
    with pytest.raises(
        ConfigError,
        match=r"needs ppo.proximal=learner \(it is auto here: behaviour without pipeline "
        r"async\)",
    ):
        load_config(None, ["ppo.behaviour_weight_clip=2", "rollout.pipeline=overlap"])
    assert load_config(None, ["ppo.behaviour_weight_clip=2", "rollout.pipeline=async"]).proximal == "learner"
