"""PPO learners (plain classes; the driver makes them Ray actors) and the worker batches they train on."""

from distrl.learner.batch import join_shards, split_batch
from distrl.learner.learner import Learner, resolve_device

__all__ = ["Learner", "join_shards", "resolve_device", "split_batch"]
