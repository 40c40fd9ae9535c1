"""What a rollout worker's step loop needs of a model, without torch: its memory kind and sizes, the observation space
it reads, and how to sample its actions.

The driver reads it off the model it exports (``spec_of``) and ships it beside the export; a worker that acts through
ONNX Runtime builds its env runners and memory from it (``distrl/data/memory``) and never loads torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym

from distrl.models.sampling import ActionSampling


@dataclass(frozen=True)
class ModelSpec:
    memory: str  # the model memory's kind (``distrl.data.memory.MEMORY_KINDS``)
    input_space: gym.Space  # the observation space the policy reads (a Dict or Tuple flattened)
    dist: ActionSampling
    lstm_size: int = 0  # the LSTM memory's width
    window: int = 0  # the attention window's length


def spec_of(model) -> ModelSpec:
    """``model``'s spec (an ``ActorCritic``); its action distribution as the numpy half alone, so the spec unpickles
    without torch."""
    dist = model.dist
    return ModelSpec(
        model.memory,
        model.input_space,
        ActionSampling(dist.kind, dist.action_dim, dist.nvec),
        model.lstm_size,
        model.window,
    )
