"""Learner update on real CartPole batches: the non-finite guard skips a step whole, on the device."""

import numpy as np
import torch

from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker


def _setup():
    config = load_config(None, ["env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=128",
                                "ppo.epochs=2"])  # fmt: skip
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    return worker, learner


def _adam_steps(learner) -> list[float]:
    return [float(state["step"]) for state in learner.optimizer.state.values()]


def test_non_finite_minibatches_leave_weights_and_adam_state_untouched():
    worker, learner = _setup()
    info, batch = worker.sample()
    batch.rewards[:] = np.nan  # every return and advantage is NaN: every minibatch's loss is
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    metrics = learner.update((info, batch))
    assert metrics["gradient_steps"] == 8  # 512 samples / 128 x 2 epochs
    assert metrics["skipped_updates"] == 8 and learner.skipped_updates == 8
    for key, value in learner.model.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    assert all(step == 0 for step in _adam_steps(learner))  # the skipped steps are not counted by Adam either
    assert all(torch.isfinite(s["exp_avg"]).all() for s in learner.optimizer.state.values())

    info, batch = worker.sample()  # finite data: every step is taken
    metrics = learner.update((info, batch))
    assert metrics["skipped_updates"] == 8 and all(step == 8 for step in _adam_steps(learner))
    assert np.isfinite(metrics["loss_value"]) and metrics["gradient_steps"] == 8
    changed = any(not torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())
    assert changed
