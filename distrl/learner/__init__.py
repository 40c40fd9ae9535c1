"""PPO learners (plain classes; the driver makes them Ray actors) and the worker batches they train on."""

from distrl.learner.batch import Batch, TrainingSamples
from distrl.learner.learner import Learner, resolve_device

__all__ = ["Batch", "Learner", "TrainingSamples", "resolve_device"]
