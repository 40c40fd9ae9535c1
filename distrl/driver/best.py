"""The run's best checkpoint so far: the highest score any checkpoint got by the run's measure of best.

The measure (``eval.best``): an evaluation's mean return (``eval_return_mean``) when evaluation is on, else the mean
training return of the last 100 episodes (``episode_return_mean``) when the checkpoint was written; a league run with
evaluation off names no best (its newest plays). What RLlib and Ray Train call ``checkpoint_score_attribute``:
pruning to ``checkpoint.keep`` never deletes it, and it travels with every checkpoint (``state``), so a resumed run
knows it, however many times it was resumed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from distrl.common.checkpoint import BestCheckpoint, CheckpointError, list_checkpoints, load_checkpoint

METRICS = {"eval": "eval_return_mean", "episode_return_mean": "episode_return_mean", "newest": None}


def best_metric(config) -> str | None:
    """The metrics row's key the run's best checkpoint is chosen by (None: no best, its newest plays)."""
    return METRICS[config.eval.best_by(config.league is not None)]


def better(best: BestCheckpoint | None, score: float | None, iteration: int, metric: str) -> BestCheckpoint | None:
    """The best after the checkpoint at ``iteration`` scored ``score`` by ``metric`` (None: no score yet)."""
    if score is not None and (best is None or score > best.score):
        return BestCheckpoint(score, iteration, metric)
    return best


def resumed_best(payload: dict, run_dir: Path, metric: str | None) -> BestCheckpoint | None:
    """The best a resumed run continues with: the one its checkpoint names, where that file is in ``run_dir`` and it
    was chosen by ``metric`` (a best by another measure is not comparable: the resumed run starts its own).

    A checkpoint written before checkpoints named their best has none: the best of those still on disk is found from
    each one's counters (what they were written at). A best that is not in ``run_dir`` (a Tune trial started from
    another trial's checkpoint) is left behind: this run keeps its own."""
    if metric is None:
        return None
    best = BestCheckpoint.of(payload, run_dir)
    if best is not None:
        return best if best.metric == metric and best.path(run_dir).is_file() else None
    if "best" in payload or metric != "episode_return_mean":  # saved with no score yet, or by another measure
        return None
    found = None
    for file in list_checkpoints(run_dir):
        try:
            returns = load_checkpoint(file)["counters"]["recent_returns"]
        except (CheckpointError, KeyError) as exc:
            print(f"distrl: warning: {file} left out of the search for the best checkpoint ({exc})", file=sys.stderr)
            continue
        if returns:
            found = better(found, sum(returns) / len(returns), int(file.stem.split("_")[1]), metric)
    return found
