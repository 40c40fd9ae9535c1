"""Rollout workers (plain classes; the driver makes them Ray actors)."""

from distrl.rollout.worker import RolloutWorker

__all__ = ["RolloutWorker"]
