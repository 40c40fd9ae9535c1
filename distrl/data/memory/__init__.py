"""Model memory: what a policy carries from one step to the next for each env copy, one file per kind.

A feed-forward policy carries nothing (``none.py``), an LSTM its ``(h, c)`` (``lstm.py``), an attention policy the
window of each env's last observations (``window.py``). A ``Memory`` (``base.py``) turns observations and the
memory's state into the policy's inputs, keeps the state the policy's outputs leave, records what the learner needs
to rebuild it (``h0``/``c0``, the window's context) into a batch, and makes example inputs for export and compile.
The rollout worker, ``distrl.load_policy``'s ``predict``, ``distrl export`` and the driver's shared compile artifacts
all go through it, so a new kind is a file here and a row in ``MEMORY_KINDS``.
"""

from __future__ import annotations

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


__all__ = ["MEMORY_KINDS", "Memory", "memory_for"]
