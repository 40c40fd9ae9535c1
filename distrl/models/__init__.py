"""Actor-critic models and action distributions; ``check_model_fits`` says without torch whether a model fits an env.

Names are loaded on first use, so the driver can check a config against its env before torch is imported.
"""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "ActorCritic": "distrl.models.actor_critic",
    "build_model": "distrl.models.actor_critic",
    "ActionDist": "distrl.models.distributions",
    "check_model_fits": "distrl.models.fit",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
