"""Two learner actors on a real local Ray, joined by torch DDP (gloo): identical weights after updates, for one
policy and for a learner per policy (``agents.policies``)."""

import numpy as np

from distrl.config import load_config
from distrl.data.messages import SampleReport
from distrl.envs import probe_run_spaces
from distrl.learner.policy_set import learner_class
from distrl.rollout import make_worker


def _assert_same_weights(a: dict, b: dict):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _models(weights) -> dict:
    """Every trained policy's weights by name (one policy: ``None``)."""
    return {name: own.model for name, own in weights.policies.items()} if weights.policies else {None: weights.model}


def run_two_learners(ray, overrides):
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=128",
            "learner.num_learners=2",
            *overrides,
        ],
    )
    worker = make_worker(config)
    spaces = probe_run_spaces(config)
    remote = ray.remote(learner_class(config))
    learners = [remote.options(num_cpus=1).remote(config, *spaces, rank, 2) for rank in range(2)]
    address, port = ray.get(learners[0].rendezvous_address.remote())
    ray.get([learner.init_distributed.remote(address, port) for learner in learners])
    initial = _models(ray.get(learners[0].get_weights.remote()))
    valid_steps = 0  # both ranks' (every shard's)
    for _ in range(3):
        weights = ray.get(learners[0].get_weights.remote())
        worker.set_weights(weights)
        # As the driver does it: the worker's info and one shard per rank, each its own object.
        info, *shards = worker.sample_shards(None, 2)
        valid_steps += sum(int(shard.valid.sum()) for shard in shards if hasattr(shard, "valid"))  # one policy's
        report_ref, shard_refs = ray.put(SampleReport([info])), [ray.put(shard) for shard in shards]
        # Refs inside tuples reach the learners as refs: each rank fetches only the shard it names.
        lead = learners[0].update_refs_and_snapshot.options(num_returns=3).remote(report_ref, (shard_refs[0],))
        other = learners[1].update_refs.remote(report_ref, (shard_refs[1],))  # both in flight: DDP needs every rank
        (metrics0, new_weights, state), metrics1 = ray.get(lead), ray.get(other)
        assert metrics0["gradient_steps"] == metrics1["gradient_steps"] > 0
        # Each rank fetched half the batch; only rank 0 returned weights (and its state snapshot).
        assert metrics0["learner_batch_bytes"] == metrics1["learner_batch_bytes"] == info.batch_bytes // 2
        assert new_weights.version == state["version"] == weights.version + 1
    w0, w1 = (_models(weights) for weights in ray.get([learner.get_weights.remote() for learner in learners]))
    assert w0.keys() == initial.keys()
    for name in initial:  # each policy: the ranks agree, and it moved
        _assert_same_weights(w0[name], w1[name])
        assert not all(np.array_equal(initial[name][k], w0[name][k]) for k in initial[name]), f"{name} did not change"
    states = ray.get([learner.state.remote() for learner in learners])
    ray.get([learner.close.remote() for learner in learners])
    for learner in learners:
        ray.kill(learner)
    return states, valid_steps


def test_two_learners_hold_identical_weights(ray_local):
    run_two_learners(ray_local, [])


def test_two_learners_merge_the_value_targets_statistics(ray_local):
    """ppo.normalize_value: each rank's statistics take in both ranks' targets, so the ranks agree, over every valid
    step of the three updates."""
    states, valid_steps = run_two_learners(ray_local, ["ppo.normalize_value=true"])
    first, second = (state["value_norm"] for state in states)
    assert float(first["count"]) == float(second["count"]) == valid_steps > 0
    for key in ("mean", "var"):
        assert float(first[key]) == float(second[key]), key
    assert float(first["var"]) != 1.0


def test_two_learners_recurrent(ray_local):
    run_two_learners(ray_local, ["model.lstm_size=16", "model.shared_trunk=true", "ppo.seq_len=8"])


def test_two_learners_with_a_user_encoder_and_an_lstm_core(ray_local):
    run_two_learners(
        ray_local, ["model.encoder=distrl.models.examples:residual_mlp", "model.lstm_size=16", "ppo.seq_len=8"]
    )


def test_two_learners_train_a_policy_per_agent(ray_local):
    """Each rank holds every policy and trains it on its half of that policy's slots (4 copies of the CartPole team:
    4 slots a policy, 2 a rank); each policy's gradients average over the ranks, so the ranks agree policy by policy."""
    run_two_learners(
        ray_local,
        [
            "env.id=distrl.envs.testing:cartpole_team",
            "env.num_envs_per_worker=4",
            "agents.policies=per_agent",
            "ppo.minibatch_size=32",
        ],
    )
