"""A learner's snapshot crosses to the driver as numpy arrays (out of band for Ray's pickle 5) and comes back whole."""

import pickle

import numpy as np
import torch

from distrl.common.wire import TensorArray, from_wire, to_wire
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker


def _same(a, b):
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys() and getattr(a, "_metadata", None) == getattr(b, "_metadata", None)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def test_a_learners_snapshot_travels_out_of_band_and_loads_as_its_state():
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=64",
            "env.normalize_obs=true",
            "env.vectorization=sync",
        ],
    )
    learner = Learner(config, *probe_spaces(config.env))
    learner.update(RolloutWorker(config).sample())  # Adam has its moments, the normaliser its counts
    state, snapshot = learner.state(), learner.snapshot()
    buffers = []
    inline = pickle.dumps(snapshot, protocol=5, buffer_callback=buffers.append)
    tensor_bytes = sum(p.numel() * p.element_size() for p in learner.model.parameters())
    # The weights and both Adam moments go out of band; what is pickled inline is keys and small numbers.
    assert sum(memoryview(b).nbytes for b in buffers) >= 3 * tensor_bytes > 10 * len(inline)
    received = pickle.loads(inline, buffers=buffers)
    _same(from_wire(received), state)
    other = Learner(config, *probe_spaces(config.env))
    other.load_state(received)
    _same(other.state(), state)


def test_the_tree_comes_back_exactly():
    tree = {
        "t": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "bf": torch.ones(2, dtype=torch.bfloat16),
        "a": np.arange(3),
        "n": 5,
        "nested": [torch.zeros(1, dtype=torch.uint8), (1.5, None)],
        "nhwc": torch.rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    }
    wire = to_wire(tree)
    assert isinstance(wire["t"], TensorArray) and isinstance(wire["bf"], torch.Tensor)  # no numpy bfloat16
    assert isinstance(wire["a"], np.ndarray)  # an array of the tree's own stays an array
    back = from_wire(wire)
    _same(back, {**tree, "nhwc": tree["nhwc"].contiguous()})
    back["t"] += 1  # a tensor of its own, not a view of the (read-only, in Ray) array it came in
    assert float(tree["t"].sum()) == 15.0
