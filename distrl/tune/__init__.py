"""Hyperparameter search over distrl runs with Ray Tune: ``distrl tune CONFIG SEARCH`` or ``distrl.tune(...)``."""

from distrl.tune.run import TuneResult, tune
from distrl.tune.search import SearchSpec, load_search

__all__ = ["SearchSpec", "TuneResult", "load_search", "tune"]
