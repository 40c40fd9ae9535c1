"""Actor-critic models and action distributions; ``check_model_fits`` says without torch whether a model fits an env.

Names are loaded on first use, so the driver can check a config against its env before torch is imported.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ActorCritic": "distrl.models.actor_critic",
    "build_model": "distrl.models.actor_critic",
    "ActionDist": "distrl.models.distributions",
    "check_model_fits": "distrl.models.fit",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'distrl.models' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
