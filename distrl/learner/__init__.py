"""PPO learners (plain classes; the driver makes them Ray actors)."""

from distrl.learner.learner import Learner, merge_batches, resolve_device

__all__ = ["Learner", "merge_batches", "resolve_device"]
