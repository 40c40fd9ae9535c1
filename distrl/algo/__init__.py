"""Algorithms, one folder each (``ppo/``): the math the learner runs, behind ``base.Algorithm``.

``build_algorithm`` finds the folder by the config's ``algo`` name (the config's ``ALGORITHMS``
table lists the names), so the learner names no algorithm.
"""

from __future__ import annotations

import importlib

from distrl.algo.base import Algorithm, EpochPlan, Targets
from distrl.config.schema import Config


def build_algorithm(config: Config) -> Algorithm:
    """The algorithm ``config.algo`` names, set up from its config section."""
    return importlib.import_module(f"distrl.algo.{config.algo}").build(config)


__all__ = ["Algorithm", "EpochPlan", "Targets", "build_algorithm"]
