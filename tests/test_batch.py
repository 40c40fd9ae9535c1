"""The worker batch and the learner's training samples, on arrays small enough to check by eye."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.data import Batch, TrainingSamples
from distrl.envs.episodes import EpisodeTracker


def numbered_batch(steps=4, envs=3, seq_len=None, hidden=2) -> Batch:
    """Every value encodes where it sits: 100 * t + env (obs and values have one more row)."""
    grid = 100 * np.arange(steps)[:, None] + np.arange(envs)[None, :]
    grid1 = 100 * np.arange(steps + 1)[:, None] + np.arange(envs)[None, :]
    lstm = (seq_len, hidden) if seq_len else None
    batch = Batch.empty(steps, envs, gym.spaces.Box(-1e6, 1e6, (2,), np.float32), (), np.int64, lstm)
    batch.obs[:] = np.stack([grid1, -grid1], -1)
    batch.actions[:] = grid
    batch.logp[:], batch.rewards[:], batch.values[:] = grid, grid, grid1
    batch.terminated[:], batch.truncated[:], batch.valid[:] = False, False, grid % 2 == 0
    if seq_len:
        batch.starts[:] = False
        chunks = 100 * np.arange(steps // seq_len)[:, None] + np.arange(envs)[None, :]
        batch.h0[:] = chunks[..., None]
        batch.c0[:] = -chunks[..., None]
    return batch


def tensors(batch: Batch) -> dict:
    return {k: torch.from_numpy(v) for k, v in batch.arrays().items()}


def test_empty_batch_shapes_and_dtypes():
    batch = Batch.empty(8, 4, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), (), np.int64, lstm=(4, 16))
    assert batch.obs.shape == (9, 4, 4, 84, 84) and batch.obs.dtype == np.uint8
    assert batch.values.shape == (9, 4) and batch.rewards.shape == (8, 4) and batch.valid.dtype == bool
    assert batch.h0.shape == (2, 4, 16) and batch.starts.shape == (8, 4)
    feedforward = Batch.empty(8, 4, gym.spaces.Box(-1, 1, (3,), np.float64), (2,), np.float32)
    assert feedforward.obs.dtype == np.float32 and feedforward.actions.shape == (8, 4, 2)
    assert feedforward.h0 is None and set(feedforward.arrays()) == {
        "obs",
        "actions",
        "logp",
        "values",
        "rewards",
        "terminated",
        "truncated",
        "valid",
    }


def test_split_and_concat_by_env():
    batch = numbered_batch(steps=4, envs=6)
    first, second = batch.split(2)
    np.testing.assert_array_equal(first.actions[2], [200, 201, 202])
    np.testing.assert_array_equal(second.values[4], [403, 404, 405])
    joined = Batch.concat([first, second])
    for key, array in batch.arrays().items():
        np.testing.assert_array_equal(joined.arrays()[key], array)
    assert first.nbytes + second.nbytes == batch.nbytes


def test_feedforward_samples_are_steps_in_time_major_order():
    batch = numbered_batch(steps=4, envs=3)
    advantages = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    samples = TrainingSamples.from_rollout(tensors(batch), advantages, advantages + 0.5)
    assert not samples.recurrent and len(samples) == 12 and samples.num_samples == 12
    s = samples.tensors
    # Unit u = t * N + env; obs and values drop their bootstrap row.
    assert s["actions"].tolist() == [0, 1, 2, 100, 101, 102, 200, 201, 202, 300, 301, 302]
    assert s["obs"][4].tolist() == [101, -101] and s["values"][-1].item() == 302
    assert s["advantages"][5].item() == 5 and s["returns"][5].item() == 5.5
    assert s["mask"].tolist() == [float(a % 2 == 0) for a in s["actions"].tolist()]


def test_recurrent_samples_are_sequences_that_start_at_their_recorded_state():
    batch = numbered_batch(steps=8, envs=3, seq_len=4)
    zeros = torch.zeros(8, 3)
    samples = TrainingSamples.from_rollout(tensors(batch), zeros, zeros, seq_len=4)
    s = samples.tensors
    assert samples.recurrent and len(samples) == 6 and samples.num_samples == 24
    assert s["actions"].shape == (6, 4) and s["obs"].shape == (6, 4, 2) and s["h0"].shape == (6, 2)
    # Sequence q = chunk * N + env holds steps chunk * L .. chunk * L + L - 1 of that env, and starts from the
    # state recorded at that chunk's start for that env.
    for q in range(6):
        chunk, env = divmod(q, 3)
        assert s["actions"][q].tolist() == [100 * (chunk * 4 + i) + env for i in range(4)]
        assert s["h0"][q].tolist() == [100 * chunk + env] * 2 and s["c0"][q].tolist() == [-(100 * chunk + env)] * 2
    with pytest.raises(ValueError, match="8 steps do not split into sequences of 3"):
        TrainingSamples.from_rollout(tensors(batch), zeros, zeros, seq_len=3)


@pytest.mark.parametrize("seq_len", [None, 2])
def test_minibatches_cover_every_unit_once_per_epoch(seq_len):
    batch = numbered_batch(steps=8, envs=3, seq_len=seq_len)
    zeros = torch.zeros(8, 3)
    samples = TrainingSamples.from_rollout(tensors(batch), zeros, zeros, seq_len=seq_len)
    generator = torch.Generator().manual_seed(0)
    key = "h0" if seq_len else "actions"
    epochs = []
    for _ in range(2):
        minibatches = list(samples.minibatches(4, generator))
        assert len(minibatches) == 4
        assert {len(mb["mask"]) for mb in minibatches} == {len(samples) // 4}  # equal sizes: one compiled shape
        seen = torch.cat([mb[key] for mb in minibatches]).reshape(len(samples), -1)[:, 0]
        assert sorted(seen.tolist()) == sorted(samples.tensors[key].reshape(len(samples), -1)[:, 0].tolist())
        epochs.append(seen.tolist())
    assert epochs[0] != epochs[1]  # a new permutation every epoch
    # Asking for more minibatches than units gives one unit each.
    assert len(list(samples.minibatches(10 * len(samples), generator))) == len(samples)


def test_episode_tracker_skips_reset_steps_and_env_errors():
    tracker = EpisodeTracker(2, length_scale=4)
    no = np.zeros(2, dtype=bool)
    # env 0: rewards 1, 1, then terminates at step 2 (reward 1); step 3 is its reset step (reward ignored).
    # env 1: reward 2 each step, truncated at step 1, reset at step 2, then raises at step 3.
    assert tracker.step(np.array([1.0, 2.0]), no, no).tolist() == [True, True]
    assert tracker.step(np.array([1.0, 2.0]), no, np.array([False, True])).tolist() == [True, True]
    assert tracker.step(np.array([1.0, 5.0]), np.array([True, False]), no).tolist() == [True, False]
    assert tracker.step(np.array([7.0, 2.0]), np.array([False, True]), no, error=np.array([False, True])).tolist() == [
        False,
        True,
    ]
    returns, lengths = tracker.pop()
    assert returns == [4.0, 3.0] and lengths == [8, 12]  # env 1's second episode ended by an error: not counted
    assert tracker.pop() == ([], [])
