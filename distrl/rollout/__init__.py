"""Rollout workers (plain classes; the driver makes them Ray actors) and the sample coordinator.

Names are loaded on first use: the coordinator's actor process imports ``distrl.rollout.coordinator``
(ray only), never the worker's torch, gymnasium and policy backends.
"""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "RolloutWorker": "distrl.rollout.worker",
    "remote_worker_class": "distrl.rollout.worker_actor",
    "make_worker": "distrl.rollout.worker_class",
    "SampleCoordinator": "distrl.rollout.coordinator",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
