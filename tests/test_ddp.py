"""Two learner actors on a real local Ray, joined by torch DDP (gloo): identical weights after updates."""

import numpy as np

from distrl.config import load_config
from distrl.data.messages import SampleReport
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker


def _assert_same_weights(a: dict, b: dict):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def run_two_learners(ray, overrides):
    config = load_config(None, ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=128",
                                "learner.num_learners=2", *overrides])  # fmt: skip
    worker = RolloutWorker(config)
    spaces = probe_spaces(worker.config.env)
    remote = ray.remote(Learner)
    learners = [remote.options(num_cpus=1).remote(config, *spaces, rank, 2) for rank in range(2)]
    address, port = ray.get(learners[0].rendezvous_address.remote())
    ray.get([learner.init_distributed.remote(address, port) for learner in learners])
    initial = ray.get(learners[0].get_weights.remote()).model
    for _ in range(3):
        weights = ray.get(learners[0].get_weights.remote())
        worker.set_weights(weights)
        # As the driver does it: the worker's info and one shard per rank, each its own object.
        info, *shards = worker.sample_shards(None, 2)
        report_ref, shard_refs = ray.put(SampleReport([info])), [ray.put(shard) for shard in shards]
        # Refs inside tuples reach the learners as refs: each rank fetches only the shard it names.
        lead = learners[0].update_refs_and_snapshot.options(num_returns=3).remote(report_ref, (shard_refs[0],))
        other = learners[1].update_refs.remote(report_ref, (shard_refs[1],))  # both in flight: DDP needs every rank
        (metrics0, new_weights, state), metrics1 = ray.get(lead), ray.get(other)
        assert metrics0["gradient_steps"] == metrics1["gradient_steps"] > 0
        # Each rank fetched half the batch; only rank 0 returned weights (and its state snapshot).
        assert metrics0["learner_batch_bytes"] == metrics1["learner_batch_bytes"] == info.batch_bytes // 2
        assert new_weights.version == state["version"] == weights.version + 1
    w0, w1 = ray.get([learner.get_weights.remote() for learner in learners])
    _assert_same_weights(w0.model, w1.model)
    assert not all(np.array_equal(initial[k], w0.model[k]) for k in initial), "weights must have changed"
    ray.get([learner.close.remote() for learner in learners])
    for learner in learners:
        ray.kill(learner)


def test_two_learners_hold_identical_weights(ray_local):
    run_two_learners(ray_local, [])


def test_two_learners_recurrent(ray_local):
    run_two_learners(ray_local, ["model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=8"])
