"""Rollout workers (plain classes; the driver makes them Ray actors) and the sample coordinator.

Names are loaded on first use: the coordinator's actor process imports ``distrl.rollout.coordinator``
(ray only), never the worker's torch, gymnasium and policy backends.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"RolloutWorker": "distrl.rollout.worker", "SampleCoordinator": "distrl.rollout.coordinator"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'distrl.rollout' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
