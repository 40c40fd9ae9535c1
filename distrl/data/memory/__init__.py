"""Model memory: what a policy carries from one step to the next for each env copy, one file per kind.

A feed-forward policy carries nothing (``none.py``), an LSTM its ``(h, c)`` (``lstm.py``), an attention policy the
window of each env's last observations (``window.py``). A ``Memory`` (``base.py``) turns observations and the
memory's state into the policy's inputs, keeps the state the policy's outputs leave, records what the learner needs
to rebuild it (``h0``/``c0``, the window's context) into a batch, and makes example inputs for export and compile.
The rollout worker, ``distrl.load_policy``'s ``predict``, ``distrl export`` and the driver's shared compile artifacts
all go through it, so a new kind is a file here and a row in ``MEMORY_KINDS``.
"""

from __future__ import annotations

import copy

import numpy as np

from distrl.data.memory.base import Memory
from distrl.data.memory.lstm import LSTMMemory
from distrl.data.memory.none import NoMemory
from distrl.data.memory.window import WindowMemory

# name -> the kind; ``memory_kind`` picks the row a model asks for (its ``memory`` property).
MEMORY_KINDS: dict[str, type[Memory]] = {
    "none": NoMemory,
    "lstm": LSTMMemory,
    "window": WindowMemory,
}


def memory_for(model) -> Memory:
    """The memory of ``model`` (an ``ActorCritic``: its ``memory`` names the kind)."""
    return MEMORY_KINDS[model.memory](model)


def example_inputs(model, num_envs: int, seed: int) -> tuple[np.ndarray, ...]:
    """Policy inputs for ``num_envs`` env copies, the same in every process for the same ``seed``: observations drawn
    from ``model``'s input space, any memory state random (the export's and the weight checks' inputs)."""
    memory = memory_for(model)
    space = copy.deepcopy(model.input_space)  # seeded here, not the model's own
    space.seed(seed)
    obs = np.stack([space.sample() for _ in range(num_envs * memory.rows_per_example())])
    if obs.dtype != np.uint8:
        obs = obs.astype(np.float32)
    return memory.example(obs, np.random.default_rng(seed))


__all__ = ["MEMORY_KINDS", "Memory", "example_inputs", "memory_for"]
