"""Training loops, one file each, chosen by ``rollout.pipeline`` from the table below.

A loop moves samples from the workers to the learners and weights back; everything every loop
shares (the metrics row, counting, observers such as a league, checkpoints, learner restarts) is in
``base.py``. Adding a loop: a file here with a ``TrainingLoop`` subclass, a row in ``LOOPS`` and the
pipeline's name in the config (``rollout.pipeline``).
"""

from __future__ import annotations

import importlib

LOOPS = {
    "sync": "distrl.driver.loops.sync:LockstepLoop",  # every worker's batch, then an update (on-policy)
    "overlap": "distrl.driver.loops.sync:LockstepLoop",  # the same rounds, the next sampled during the update (lag 1)
    "async": "distrl.driver.loops.asynchronous:AsyncLoop",  # every worker samples continuously; updates take what is in
}


def loop_class(pipeline: str) -> type:
    module, _, name = LOOPS[pipeline].partition(":")
    return getattr(importlib.import_module(module), name)
