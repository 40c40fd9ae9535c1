"""ppo.normalize_value and ppo.value_loss: the value targets' running statistics by hand, GAE on normalised values,
the statistics through a checkpoint and a learner restart, the Huber value loss by hand."""

import pytest
import torch

from distrl.algo.base import CurrentOutputs
from distrl.algo.ppo import PPO, PPOLossCoefs, gae, ppo_loss
from distrl.common.checkpoint import load_checkpoint, save_checkpoint
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.learner.value_norm import VAR_FLOOR, ValueNormaliser, in_critic_scale, in_return_scale
from distrl.rollout import RolloutWorker


def test_statistics_follow_a_known_target_sequence():
    norm = ValueNormaliser()
    x = torch.tensor([3.0, -1.0])
    assert torch.equal(norm.normalize(x), x) and torch.equal(norm.denormalize(x), x)  # nothing seen: the identity
    norm.update(torch.tensor([1.0, 2.0, 3.0]))
    norm.update(torch.tensor([[4.0], [5.0]]))  # any shape; the merge is over every target so far
    # 1..5: mean 3, population variance 2
    assert norm.stats.count == 5 and norm.stats.mean == pytest.approx(3.0) and norm.stats.var == pytest.approx(2.0)
    torch.testing.assert_close(norm.normalize(torch.tensor([3.0, 5.0])), torch.tensor([0.0, 2 / 2**0.5]))
    torch.testing.assert_close(norm.denormalize(norm.normalize(x)), x)
    flat = ValueNormaliser()
    flat.update(torch.full((8,), 5.0))  # no spread: the variance floor, not a division by zero
    torch.testing.assert_close(flat.normalize(torch.tensor([6.0])), torch.tensor([1.0 / VAR_FLOOR**0.5]))


def _rollout(steps=6, envs=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(steps, envs, generator=g) < 0.2
    return {
        "rewards": torch.randn(steps, envs, generator=g) * 5 + 2,
        "values": torch.randn(steps + 1, envs, generator=g) * 10 + 4,  # the return's own scale
        "terminated": terminated,
        "truncated": (torch.rand(steps, envs, generator=g) < 0.1) & ~terminated,
        "valid": torch.rand(steps, envs, generator=g) > 0.1,
    }


def test_gae_on_normalised_values_equals_gae_on_the_values_they_stand_for():
    config = load_config(None, ["ppo.normalize_value=true", "ppo.gamma=0.9", "ppo.gae_lambda=0.8"])
    algorithm = PPO(config.ppo, None)
    raw = _rollout()
    norm = ValueNormaliser()
    norm.update(torch.randn(50) * 7 + 3)
    recorded = {**raw, "values": norm.normalize(raw["values"])}  # what the critic gave the workers
    data, current = in_return_scale(norm, recorded, lambda: None)
    targets = algorithm.targets(data, current)
    expected = gae(raw["rewards"], raw["values"], raw["terminated"], raw["truncated"], raw["valid"], 0.9, 0.8)
    torch.testing.assert_close(targets.advantages, expected[0])
    torch.testing.assert_close(targets.returns, expected[1])
    # The learner's own values (ppo.proximal: learner) are de-normalised the same way.
    learner_values = torch.randn(6, 3)
    asked = []

    def outputs():
        asked.append(1)
        return CurrentOutputs(torch.zeros(6, 3), learner_values)

    _, current = in_return_scale(norm, recorded, outputs)
    torch.testing.assert_close(current().values, norm.denormalize(learner_values))
    current()
    assert len(asked) == 1  # still one forward pass over the batch
    # Then the statistics take in the valid targets, and the loss sees targets and clip centres in the critic's scale.
    before = norm.stats.count
    loss_data, returns = in_critic_scale(norm, data, targets.returns, world_size=1)
    assert norm.stats.count == before + int(raw["valid"].sum())
    torch.testing.assert_close(returns, norm.normalize(targets.returns))
    torch.testing.assert_close(loss_data["values"], norm.normalize(raw["values"]))


def _pair(overrides):
    config = load_config(
        None, ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64"] + overrides
    )
    worker = RolloutWorker(config)
    return config, worker, Learner(config, *probe_spaces(worker.config.env))


def test_the_statistics_travel_in_checkpoints_and_a_restarted_learner_goes_on_exactly(tmp_path):
    config, worker, learner = _pair(["ppo.normalize_value=true"])
    for _ in range(2):
        worker.set_weights(learner.get_weights())
        learner.update(worker.sample())
    stats = learner.normalisers.values.stats
    assert stats.count > 0 and stats.var != 1.0  # it took in the targets of both updates
    save_checkpoint(tmp_path, 2, {"learner": learner.state(), "counters": {"iteration": 2}}, keep=3)
    restarted = Learner(config, *probe_spaces(worker.config.env))
    restarted.load_state(load_checkpoint(tmp_path)["learner"])
    again = restarted.normalisers.values.stats
    assert (again.count, float(again.mean), float(again.var)) == (stats.count, float(stats.mean), float(stats.var))
    sample = worker.sample()  # the same next update on both: the same weights and statistics after it
    learner.update(sample)
    restarted.update(sample)
    for a, b in zip(learner.model.parameters(), restarted.model.parameters()):
        torch.testing.assert_close(a, b)
    assert restarted.normalisers.values.stats.count == learner.normalisers.values.stats.count
    # Off, the learner keeps none and its state says so.
    _, _, plain = _pair([])
    assert plain.normalisers.values is None and plain.state()["value_norm"] is None


def test_huber_value_loss_by_hand():
    # Errors 0.5 and 20 with delta 10: 0.5 * 0.25 (quadratic) and 10 * (20 - 5) (linear); mse: 0.5 e^2.
    new, returns = torch.tensor([0.5, 20.0]), torch.zeros(2)
    ones, zeros = torch.ones(2), torch.zeros(2)

    def value_loss(delta):
        coefs = PPOLossCoefs(0.2, 1.0, 0.0, clip_vloss=False, norm_adv=False, huber_delta=delta)
        return float(ppo_loss(zeros, zeros, zeros, new, new, returns, zeros, ones, coefs)["loss_value"])

    assert value_loss(10.0) == pytest.approx((0.125 + 150.0) / 2)
    assert value_loss(None) == pytest.approx((0.125 + 200.0) / 2)
    assert PPO(load_config(None, ["ppo.value_loss=huber", "ppo.huber_delta=3"]).ppo, None).coefs.huber_delta == 3.0
    assert PPO(load_config(None, []).ppo, None).coefs.huber_delta is None
