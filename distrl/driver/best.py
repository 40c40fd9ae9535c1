"""The run's best checkpoint so far: the highest mean return (the last 100 episodes) any checkpoint was written at.

What RLlib and Ray Train call ``checkpoint_score_attribute``: pruning to ``checkpoint.keep`` never deletes it, and it
travels with every checkpoint (``state``), so a resumed run knows it, however many times it was resumed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from distrl.common.checkpoint import BestCheckpoint, CheckpointError, list_checkpoints, load_checkpoint


def better(best: BestCheckpoint | None, score: float | None, iteration: int) -> BestCheckpoint | None:
    """The best after a checkpoint at ``iteration`` scored ``score`` (None: no episode ended yet)."""
    if score is not None and (best is None or score > best.episode_return_mean):
        return BestCheckpoint(score, iteration)
    return best


def resumed_best(payload: dict, run_dir: Path) -> BestCheckpoint | None:
    """The best a resumed run continues with: the one its checkpoint names, where that file is in ``run_dir``.

    A checkpoint written before checkpoints named their best has none: the best of those still on disk is found from
    each one's counters (what they were written at). A best that is not in ``run_dir`` (a Tune trial started from
    another trial's checkpoint) is left behind: this run keeps its own."""
    best = BestCheckpoint.of(payload)
    if best is not None:
        return best if best.path(run_dir).is_file() else None
    if "best" in payload:  # saved, with no episode ended then
        return None
    found = None
    for file in list_checkpoints(run_dir):
        try:
            returns = load_checkpoint(file)["counters"]["recent_returns"]
        except (CheckpointError, KeyError) as exc:
            print(f"distrl: warning: {file} left out of the search for the best checkpoint ({exc})", file=sys.stderr)
            continue
        if returns:
            found = better(found, sum(returns) / len(returns), int(file.stem.split("_")[1]))
    return found
