"""The training driver: actors, loop, metrics, checkpoints.

Names are loaded on first use, so ``distrl.driver.connection`` can be imported without
importing ray: the CLI decides which Ray to use before Ray reads its environment.
"""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "Driver": "distrl.driver.driver",
    "connect_ray": "distrl.driver.driver",
    "PlacementError": "distrl.common.errors",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
