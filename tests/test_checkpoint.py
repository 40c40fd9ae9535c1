"""Checkpoints: atomic writes, round trip through the learner, and refusal of corrupt or foreign files."""

import os
import pickle

import numpy as np
import pytest
import torch

from distrl.common.checkpoint import CheckpointError, list_checkpoints, load_checkpoint, save_checkpoint
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker


def trained_pair():
    config = load_config(
        None,
        ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64", "env.normalize_obs=true"],
    )
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(worker.config.env))
    for _ in range(2):
        worker.set_weights(learner.get_weights())
        learner.update(worker.sample())
    return config, worker, learner


def test_round_trip_restores_learning_state(tmp_path):
    config, worker, learner = trained_pair()
    save_checkpoint(tmp_path, 2, {"learner": learner.state(), "counters": {"iteration": 2}}, keep=3)
    payload = load_checkpoint(tmp_path)
    restored = Learner(config, *probe_spaces(worker.config.env))
    restored.load_state(payload["learner"])
    assert restored.version == learner.version == 2
    assert restored.trained_env_steps == learner.trained_env_steps
    for a, b in zip(learner.model.parameters(), restored.model.parameters()):
        torch.testing.assert_close(a, b)
    np.testing.assert_allclose(restored.obs_rms.mean, learner.obs_rms.mean)
    # Same RNG state and optimiser moments: the next update is identical.
    sample = worker.sample()
    learner.update(sample)
    restored.update(sample)
    for a, b in zip(learner.model.parameters(), restored.model.parameters()):
        torch.testing.assert_close(a, b)


def test_keeps_newest_and_leaves_no_temp_files(tmp_path):
    for i in range(5):
        save_checkpoint(tmp_path, i, {"x": torch.tensor([i])}, keep=2)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["ckpt_0000003.pt", "ckpt_0000004.pt"]
    assert sorted(os.listdir(tmp_path / "checkpoints")) == names
    assert load_checkpoint(tmp_path)["x"].item() == 4


def test_interrupted_write_leaves_previous_checkpoint_loadable(tmp_path):
    save_checkpoint(tmp_path, 1, {"x": torch.tensor([1])}, keep=3)

    class Boom:  # torch.save fails half-way through pickling this
        def __reduce__(self):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, {"x": torch.zeros(1000), "y": Boom()}, keep=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_0000001.pt"]
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["ckpt_0000001.pt"]
    assert load_checkpoint(tmp_path)["x"].item() == 1


def test_corrupt_file_is_a_clear_error(tmp_path):
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(CheckpointError, match="not a loadable distrl checkpoint"):
        load_checkpoint(path)
    save_checkpoint(tmp_path, 1, {"x": torch.zeros(10)}, keep=1)
    good = list_checkpoints(tmp_path)[0]
    good.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])  # truncated
    with pytest.raises(CheckpointError):
        load_checkpoint(good)


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch PWNED_BY_CHECKPOINT",))


def test_foreign_pickle_is_refused_and_not_executed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"format": "distrl-checkpoint-v1", "x": _Payload()}, f)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)
    assert not (tmp_path / "PWNED_BY_CHECKPOINT").exists()
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, other)
    with pytest.raises(CheckpointError, match="not a distrl checkpoint"):
        load_checkpoint(other)


def test_pruning_keeps_the_best_checkpoint_beside_the_newest(tmp_path):
    from distrl.common.checkpoint import list_checkpoints, save_checkpoint

    best = save_checkpoint(tmp_path, 1, {"x": 1}, keep=2)
    for iteration in range(2, 6):
        save_checkpoint(tmp_path, iteration, {"x": iteration}, keep=2, protect=[best])
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_0000001.pt", "ckpt_0000004.pt", "ckpt_0000005.pt"]
