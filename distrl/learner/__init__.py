"""Learners (plain classes; the driver makes them Ray actors): device, DDP, optimiser, state; the algorithm's math
comes from ``distrl/algo/``. Names are loaded on first use, so ``distrl.learner.step_rules`` can be imported
without importing torch."""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "Learner": "distrl.learner.learner",
    "resolve_device": "distrl.learner.hardware",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
