"""Training loops, one file each, chosen by ``rollout.pipeline`` from the table below.

A loop moves samples from the workers to the learners and weights back (``loop.py``: every pipeline's);
its parts are files of their own: the learners' update with restarts (``updates.py``), one iteration's record
(``record.py``: counters, metrics row, stop rules, checkpoints) and what it meets around it (``host.py``: the run,
observers such as a league). Adding a loop: a file here with a class taking the ``RunHost`` (``begin``, ``train``),
a row in ``LOOPS`` and the pipeline's name in the config (``rollout.pipeline``).
"""

from __future__ import annotations

import importlib

# One loop for every pipeline: the sampler's setting decides rounds (sync: lag 0; overlap: lag 1) or a stream.
LOOPS = dict.fromkeys(("sync", "overlap", "async"), "distrl.driver.loops.loop:TrainingLoop")


def loop_class(pipeline: str) -> type:
    module, _, name = LOOPS[pipeline].partition(":")
    return getattr(importlib.import_module(module), name)
