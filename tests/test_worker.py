"""RolloutWorker on real gymnasium envs: NEXT_STEP masking, truncation bootstrapping, weights, LSTM state."""

import os

import numpy as np
import pytest
import torch

from distrl.algo.ppo import gae
from distrl.config import load_config
from distrl.data import Batch, TrainingSamples
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker


def make_worker(*overrides):
    config = load_config(
        None, ["env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=64", *overrides]
    )
    return config, RolloutWorker(config)


def test_batch_shapes_and_reset_step_masking():
    _, worker = make_worker()
    info, batch = worker.sample()
    assert batch.obs.shape == (65, 8, 4) and batch.values.shape == (65, 8)
    done = batch.terminated | batch.truncated
    assert done.any(), "a random CartPole policy ends episodes within 64 steps"
    # The step after every done is the env's reset step: invalid, zero reward, and not itself done.
    t, n = np.nonzero(done[:-1])
    assert not batch.valid[t + 1, n].any()
    assert (batch.rewards[t + 1, n] == 0).all()
    assert not done[t + 1, n].any()
    # Every other step is valid.
    expected_valid = np.ones_like(batch.valid)
    expected_valid[1:] = ~done[:-1]
    expected_valid[0] = batch.valid[0]
    np.testing.assert_array_equal(batch.valid, expected_valid)
    # Episode bookkeeping counts only valid steps: returns are the lengths in CartPole.
    assert info.episode_returns == [float(x) for x in info.episode_lengths]
    assert info.env_steps == 64 * 8


def test_masking_carries_across_batches():
    _, worker = make_worker()
    for _ in range(5):
        previous_last_done = worker.runner.runners[0].episodes.prev_done.copy()
        info, batch = worker.sample()
        np.testing.assert_array_equal(batch.valid[0], ~previous_last_done)


def test_truncation_keeps_final_observation_for_bootstrap():
    # CartPole truncated after 5 steps: obs[t + 1] after a truncation is the final observation, not a reset one.
    config, worker = make_worker("env.kwargs={max_episode_steps: 5}", "env.vectorization=sync")
    info, batch = worker.sample()
    t, n = np.nonzero(batch.truncated)
    assert len(t) > 0
    final_obs = batch.obs[t + 1, n]
    reset_obs = batch.obs[np.minimum(t + 2, 64), n]
    # CartPole resets to |x| < 0.05 for every component; after 5 steps the final state has moved on.
    assert np.abs(reset_obs[t + 2 <= 64]).max() <= 0.05
    assert not np.allclose(final_obs, reset_obs)
    # GAE with this batch bootstraps from the final observation's value on truncation.
    tensors = {k: torch.from_numpy(v) for k, v in batch.arrays().items()}
    adv, _ = gae(
        tensors["rewards"], tensors["values"], tensors["terminated"], tensors["truncated"], tensors["valid"], 0.99, 0.95
    )
    i, j = t[0], n[0]
    expected = batch.rewards[i, j] + 0.99 * batch.values[i + 1, j] - batch.values[i, j]
    assert adv[i, j].item() == np.float32(expected).item() or abs(adv[i, j].item() - expected) < 1e-5


def test_worker_acts_with_newest_weights():
    config, worker = make_worker()
    learner = Learner(config, *probe_spaces(worker.config.env))
    worker.set_weights(learner.get_weights())
    info, batch = worker.sample()
    metrics = learner.update((info, batch))
    weights = learner.get_weights()
    assert weights.version == 1 and metrics["policy_lag_mean"] == 0
    worker.set_weights(weights)
    obs = batch.obs[0]
    with torch.no_grad():
        expected, _ = learner.model(torch.from_numpy(obs))
    got, _ = worker.policy(obs)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert worker.sample()[0].policy_version == 1


def test_lstm_worker_stores_chunk_states_and_starts():
    config, worker = make_worker("model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=16")
    info, batch = worker.sample()
    assert batch.h0.shape == (4, 8, 16) and batch.starts.shape == (64, 8)
    assert batch.starts[0].all()  # first observation after reset
    np.testing.assert_array_equal(batch.starts[1:], ~batch.valid[:-1])
    np.testing.assert_array_equal(batch.h0[0], 0)
    learner = Learner(config, *probe_spaces(worker.config.env))
    metrics = learner.update((info, batch))
    assert np.isfinite(metrics["loss_value"]) and metrics["gradient_steps"] > 0


def test_gaussian_actions_clipped_at_env_only():
    _, worker = make_worker("env.id=Pendulum-v1", "env.vectorization=sync", "model.init_log_std=1.5")
    info, batch = worker.sample()
    assert np.abs(batch.actions).max() > 2.0  # stored unclipped, so log-probs stay exact
    assert batch.actions.shape == (64, 8, 1)


def test_obs_normalisation_stats_merge():
    config, worker = make_worker("env.normalize_obs=true")
    learner = Learner(config, *probe_spaces(worker.config.env))
    info, batch = worker.sample()
    count, mean, var = info.obs_stats
    assert count == 64 * 8
    learner.update((info, batch))
    weights = learner.get_weights()
    np.testing.assert_allclose(weights.obs_norm["mean"], mean)
    worker.set_weights(weights)
    _, batch2 = worker.sample()
    assert np.abs(batch2.obs).max() <= config.env.obs_clip


def test_learner_reproduces_behaviour_log_probs_for_lstm():
    """Before any gradient step the learner's unroll of its training sequences must give exactly the worker's
    log-probs and values: the sequences line up with the LSTM states recorded at their starts."""
    config, worker = make_worker("model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=16")
    learner = Learner(config, *probe_spaces(worker.config.env))
    for _ in range(2):
        worker.set_weights(learner.get_weights())
        info, batch = worker.sample()
        data = {k: torch.from_numpy(v) for k, v in batch.arrays().items()}
        zeros = torch.zeros(64, 8)
        seq = TrainingSamples.from_rollout(data, zeros, zeros, seq_len=16).tensors  # [S, L, ...]
        time_major = {k: seq[k].transpose(0, 1) for k in ("obs", "starts", "actions", "logp", "values")}
        with torch.no_grad():
            pd, values = learner.model.forward_sequence(time_major["obs"], seq["h0"], seq["c0"], time_major["starts"])
            logp, _ = learner.model.dist.log_prob_entropy(pd.reshape(-1, 2), time_major["actions"].reshape(-1))
        torch.testing.assert_close(logp, time_major["logp"].reshape(-1), rtol=0, atol=1e-5)
        torch.testing.assert_close(values, time_major["values"], rtol=0, atol=1e-5)
        learner.update((info, batch))


def test_batch_splits_into_equal_learner_shards_and_joins_back():
    config, worker = make_worker("model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=16")
    info, batch = worker.sample()
    shards = batch.split(4)
    assert len(shards) == 4
    for key, array in batch.arrays().items():
        assert all(
            s.arrays()[key].shape == array.shape[:1] + (array.shape[1] // 4,) + array.shape[2:] for s in shards
        ), key
        np.testing.assert_array_equal(Batch.concat(shards).arrays()[key], array)
    assert sum(s.nbytes for s in shards) == info.batch_bytes == batch.nbytes
    (whole,) = batch.split(1)
    assert whole.obs is not batch.obs and np.shares_memory(whole.obs, batch.obs)  # views, not copies
    with pytest.raises(ValueError, match="8 envs do not split into 3 equal learner shards"):
        batch.split(3)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=16"],
        ["env.id=Pendulum-v1", "env.vectorization=sync"],
    ],
)
def test_worker_starts_with_the_learners_initial_weights(overrides):
    """A new run's first batch is sampled before the learner is up: with exactly its version-0 weights."""
    config, worker = make_worker(*overrides, "seed=7")
    learner = Learner(config, *probe_spaces(config.env))
    weights = learner.get_weights()
    assert worker.policy_version == weights.version == 0
    for name, value in worker.model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), weights.model[name], err_msg=name)
    other_worker = RolloutWorker(config, worker_index=1)  # every worker, whatever its own sampling seed
    assert other_worker.seed != worker.seed
    for name, value in other_worker.model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), weights.model[name], err_msg=name)


def test_a_ray_worker_samples_nicer_than_it_started_and_the_caller_keeps_its_priority(ray_local):
    """``rollout.worker_niceness``: a worker under Ray samples that much nicer than Ray started it (and the learner,
    which Ray starts alike; at most 19); a worker built in the caller's own process (tests, ``load_policy``) leaves
    the caller's priority alone."""
    import threading

    from distrl.rollout import remote_worker_class

    def thread_niceness(worker) -> int:  # of the thread the actor runs its calls on (the one that samples)
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    ray = ray_local
    base = [
        "env.num_envs_per_worker=2",
        "rollout.rollout_length=8",
        "rollout.compile.backend=eager",
        "ppo.minibatch_size=16",
    ]
    workers = [
        remote_worker_class().options(num_cpus=0.1).remote(load_config(None, [*base, f"rollout.worker_niceness={n}"]))
        for n in (0, 3)
    ]
    try:
        ray.get([worker.sample.remote() for worker in workers])
        plain, nicer = ray.get([worker.__ray_call__.remote(thread_niceness) for worker in workers])
        assert nicer == min(19, plain + 3) and (nicer > plain or plain == 19)
    finally:
        for worker in workers:
            ray.kill(worker)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    RolloutWorker(load_config(None, [*base, "rollout.worker_niceness=3"])).sample()
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_a_ray_worker_samples_with_the_torch_threads_it_was_given_on_the_thread_that_samples(ray_local):
    """A worker's calls run on a thread Ray starts after its constructor (it has a concurrency group), and torch's
    thread count (OpenMP's and MKL's) is per thread: set only in the constructor, the sampling thread kept the
    process's default (here ``OMP_NUM_THREADS=2``, as a cluster's environment may set it), and four workers on two
    cores spun their OpenMP teams against each other (eager CartPole steps about 40x slower). The thread that samples
    uses the worker's count: 1 for a quarter of a CPU."""
    import ctypes
    from pathlib import Path

    from distrl.rollout import remote_worker_class

    def threads_here(worker) -> tuple[int, int]:  # OpenMP's and MKL's count on the thread the actor runs its calls on
        lib = Path(torch.__file__).parent / "lib"
        gomp, libtorch = ctypes.CDLL(str(lib / "libgomp.so.1")), ctypes.CDLL(str(lib / "libtorch_cpu.so"))
        return gomp.omp_get_max_threads(), libtorch.mkl_get_max_threads()

    if not all((Path(torch.__file__).parent / "lib" / name).exists() for name in ("libgomp.so.1", "libtorch_cpu.so")):
        pytest.skip("a torch build without its own OpenMP and MKL")
    ray = ray_local
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=2",
            "rollout.rollout_length=8",
            "rollout.compile.backend=eager",
            "ppo.minibatch_size=16",
            "rollout.num_cpus_per_worker=0.25",
        ],
    )
    worker = (
        remote_worker_class().options(num_cpus=0.25, runtime_env={"env_vars": {"OMP_NUM_THREADS": "2"}}).remote(config)
    )
    try:
        ray.get(worker.sample.remote())
        assert ray.get(worker.__ray_call__.remote(threads_here)) == (1, 1)
    finally:
        ray.kill(worker)
