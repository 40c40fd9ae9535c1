"""Episode returns and lengths in a gymnasium vector env with NEXT_STEP autoreset.

When step t ends an episode, the env's step t + 1 only resets it (the action is ignored and
the reward is 0): that step is not part of any episode. ``step`` says which steps were real.
"""

from __future__ import annotations

import numpy as np


class EpisodeTracker:
    def __init__(self, num_envs: int, length_scale: int = 1):
        self.length_scale = length_scale  # env.action_repeat: lengths in frames, as Atari reports them
        self.prev_done = np.zeros(num_envs, dtype=bool)
        self.running_return = np.zeros(num_envs, dtype=np.float64)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: list[float] = []  # of episodes finished since the last ``pop``
        self.lengths: list[int] = []

    def step(
        self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, error: np.ndarray | None = None
    ) -> np.ndarray:
        """Count one vector step; returns ``valid``: False where it was the env's reset step.

        ``error`` marks envs that raised and were reset: their episode ends uncounted.
        """
        valid = ~self.prev_done
        ended = terminated | truncated
        self.running_return += np.where(valid, reward, 0.0)  # a reset step's reward is not part of any episode
        self.running_length += valid
        if ended.any():  # most steps end no episode: skip the masked indexing
            finished = ended & valid if error is None else ended & valid & ~error
            self.returns.extend(self.running_return[finished].tolist())
            self.lengths.extend((self.running_length[finished] * self.length_scale).tolist())
            self.running_return[ended] = 0.0
            self.running_length[ended] = 0
        self.prev_done = ended
        return valid

    def step_copies(
        self, ids: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, error: np.ndarray
    ) -> np.ndarray:
        """``step`` for some copies only (``ids``, each once): an env that returns its copies as they become ready."""
        valid = ~self.prev_done[ids]
        ended = terminated | truncated
        self.running_return[ids] += np.where(valid, reward, 0.0)
        self.running_length[ids] += valid
        if ended.any():
            finished = ids[ended & valid & ~error]
            self.returns.extend(self.running_return[finished].tolist())
            self.lengths.extend((self.running_length[finished] * self.length_scale).tolist())
            self.running_return[ids[ended]] = 0.0
            self.running_length[ids[ended]] = 0
        self.prev_done[ids] = ended
        return valid

    def pop(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes finished since the last call."""
        out = (self.returns, self.lengths)
        self.returns, self.lengths = [], []
        return out
