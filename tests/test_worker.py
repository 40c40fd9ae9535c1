"""RolloutWorker on real gymnasium envs: NEXT_STEP masking, truncation bootstrapping, weights, LSTM state."""

import numpy as np
import pytest
import torch

from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.ppo import gae
from distrl.rollout import RolloutWorker


def make_worker(*overrides):
    config = load_config(None, ["env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=64", *overrides])
    return config, RolloutWorker(config)


def test_batch_shapes_and_reset_step_masking():
    _, worker = make_worker()
    batch = worker.sample()
    assert batch["obs"].shape == (65, 8, 4) and batch["values"].shape == (65, 8)
    done = batch["terminated"] | batch["truncated"]
    assert done.any(), "a random CartPole policy ends episodes within 64 steps"
    # The step after every done is the env's reset step: invalid, zero reward, and not itself done.
    t, n = np.nonzero(done[:-1])
    assert not batch["valid"][t + 1, n].any()
    assert (batch["rewards"][t + 1, n] == 0).all()
    assert not done[t + 1, n].any()
    # Every other step is valid.
    expected_valid = np.ones_like(batch["valid"])
    expected_valid[1:] = ~done[:-1]
    expected_valid[0] = batch["valid"][0]
    np.testing.assert_array_equal(batch["valid"], expected_valid)
    # Episode bookkeeping counts only valid steps: returns are the lengths in CartPole.
    info = batch["info"]
    assert info["episode_returns"] == [float(x) for x in info["episode_lengths"]]
    assert info["env_steps"] == 64 * 8


def test_masking_carries_across_batches():
    _, worker = make_worker()
    for _ in range(5):
        previous_last_done = worker.prev_done.copy()
        batch = worker.sample()
        np.testing.assert_array_equal(batch["valid"][0], ~previous_last_done)


def test_truncation_keeps_final_observation_for_bootstrap():
    # CartPole truncated after 5 steps: obs[t + 1] after a truncation is the final observation, not a reset one.
    config, worker = make_worker("env.kwargs={max_episode_steps: 5}", "env.vectorization=sync")
    batch = worker.sample()
    t, n = np.nonzero(batch["truncated"])
    assert len(t) > 0
    final_obs = batch["obs"][t + 1, n]
    reset_obs = batch["obs"][np.minimum(t + 2, 64), n]
    # CartPole resets to |x| < 0.05 for every component; after 5 steps the final state has moved on.
    assert np.abs(reset_obs[t + 2 <= 64]).max() <= 0.05
    assert not np.allclose(final_obs, reset_obs)
    # GAE with this batch bootstraps from the final observation's value on truncation.
    tensors = {k: torch.from_numpy(v) for k, v in batch.items() if k != "info"}
    adv, _ = gae(tensors["rewards"], tensors["values"], tensors["terminated"], tensors["truncated"], tensors["valid"], 0.99, 0.95)
    i, j = t[0], n[0]
    expected = batch["rewards"][i, j] + 0.99 * batch["values"][i + 1, j] - batch["values"][i, j]
    assert adv[i, j].item() == np.float32(expected).item() or abs(adv[i, j].item() - expected) < 1e-5


def test_worker_acts_with_newest_weights():
    config, worker = make_worker()
    learner = Learner(config, *probe_spaces(worker.config.env))
    worker.set_weights(learner.get_weights())
    batch = worker.sample()
    metrics, weights = learner.update_and_get_weights(batch)
    assert weights["version"] == 1 and metrics["policy_lag_mean"] == 0
    worker.set_weights(weights)
    obs = batch["obs"][0]
    with torch.no_grad():
        expected, _ = learner.model(torch.from_numpy(obs))
    got, _ = worker.policy(obs)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert worker.sample()["info"]["policy_version"] == 1


def test_lstm_worker_stores_chunk_states_and_starts():
    config, worker = make_worker("model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=16")
    batch = worker.sample()
    assert batch["h0"].shape == (4, 8, 16) and batch["starts"].shape == (64, 8)
    assert batch["starts"][0].all()  # first observation after reset
    np.testing.assert_array_equal(batch["starts"][1:], ~batch["valid"][:-1])
    np.testing.assert_array_equal(batch["h0"][0], 0)
    learner = Learner(config, *probe_spaces(worker.config.env))
    metrics = learner.update(batch)
    assert np.isfinite(metrics["loss_value"]) and metrics["gradient_steps"] > 0


def test_gaussian_actions_clipped_at_env_only():
    _, worker = make_worker("env.id=Pendulum-v1", "env.vectorization=sync", "model.init_log_std=1.5")
    batch = worker.sample()
    assert np.abs(batch["actions"]).max() > 2.0  # stored unclipped, so log-probs stay exact
    assert batch["actions"].shape == (64, 8, 1)


def test_obs_normalisation_stats_merge():
    config, worker = make_worker("env.normalize_obs=true")
    learner = Learner(config, *probe_spaces(worker.config.env))
    batch = worker.sample()
    count, mean, var = batch["info"]["obs_stats"]
    assert count == 64 * 8
    learner.update(batch)
    weights = learner.get_weights()
    np.testing.assert_allclose(weights["obs_norm"]["mean"], mean)
    worker.set_weights(weights)
    batch2 = worker.sample()
    assert np.abs(batch2["obs"]).max() <= config.env.obs_clip


def test_learner_reproduces_behaviour_log_probs_for_lstm():
    """Before any gradient step the learner's unroll must give exactly the worker's log-probs and values."""
    from distrl.learner import join_shards

    config, worker = make_worker("model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=16")
    learner = Learner(config, *probe_spaces(worker.config.env))
    for _ in range(2):
        worker.set_weights(learner.get_weights())
        batch = worker.sample()
        data = {k: torch.from_numpy(v) for k, v in join_shards([batch]).items()}
        steps, n, seq = 64, 8, 16

        def chunks(x):
            return x.reshape(steps // seq, seq, n, *x.shape[2:]).transpose(0, 1).reshape(seq, -1, *x.shape[2:])

        with torch.no_grad():
            pd, values = learner.model.forward_sequence(
                chunks(data["obs"][:-1]), data["h0"].reshape(-1, 16), data["c0"].reshape(-1, 16), chunks(data["starts"])
            )
            logp, _ = learner.model.dist.log_prob_entropy(pd.reshape(-1, 2), chunks(data["actions"]).reshape(-1))
        torch.testing.assert_close(logp, chunks(data["logp"]).reshape(-1), rtol=0, atol=1e-5)
        torch.testing.assert_close(values, chunks(data["values"][:-1]), rtol=0, atol=1e-5)
        learner.update(batch)


def test_batch_splits_into_equal_learner_shards_and_joins_back():
    from distrl.learner import join_shards, split_batch

    config, worker = make_worker("model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=16")
    batch = worker.sample()
    info, shards = split_batch(batch, 4)
    assert info is batch["info"] and len(shards) == 4
    for key, array in batch.items():
        if key == "info":
            continue
        assert all(s[key].shape == array.shape[:1] + (array.shape[1] // 4,) + array.shape[2:] for s in shards), key
        np.testing.assert_array_equal(join_shards(shards)[key], array)
    assert sum(a.nbytes for s in shards for a in s.values()) == info["batch_bytes"]
    info, (whole,) = split_batch(batch, 1)
    assert whole["obs"] is not batch["obs"] and np.shares_memory(whole["obs"], batch["obs"])  # views, not copies
    with pytest.raises(ValueError, match="8 envs do not split into 3 equal learner shards"):
        split_batch(batch, 3)
