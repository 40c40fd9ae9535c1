"""PPO learners (plain classes; the driver makes them Ray actors) and the worker batches they train on.

Names are loaded on first use, so ``distrl.learner.step_rules`` (which the config checks against)
can be imported without importing torch.
"""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "Batch": "distrl.learner.batch",
    "TrainingSamples": "distrl.learner.batch",
    "Learner": "distrl.learner.learner",
    "resolve_device": "distrl.learner.learner",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
