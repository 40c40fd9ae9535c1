"""APPO (asynchronous PPO): V-trace targets (``vtrace.py``; Espeholt et al. 2018) under PPO's clipped loss
(``algorithm.py``), for the asynchronous loop's off-policy batches."""

from distrl.algo.appo.algorithm import APPO, build
from distrl.algo.appo.vtrace import vtrace

__all__ = ["APPO", "build", "vtrace"]
