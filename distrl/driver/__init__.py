"""The training driver: actors, loop, metrics, checkpoints.

Names are loaded on first use, so ``distrl.driver.connection`` can be imported without
importing ray: the CLI decides which Ray to use before Ray reads its environment.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Driver": "distrl.driver.driver",
    "connect_ray": "distrl.driver.driver",
    "PlacementError": "distrl.driver.placement",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'distrl.driver' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
