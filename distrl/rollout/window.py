"""Each env's last observations, for attention policies: the window a worker acts on.

A window is ``[N, W, *obs]`` with the newest observation last. At an episode's first
observation everything before it is zeroed, the rule the LSTM's state follows, so an
observation from a finished episode never reaches the next one's window. A batch records the
``W - 1`` positions the window held before its first step (``context``); with the batch's
observations and episode starts that is all the learner needs to rebuild every step's window
(``distrl.learner.batch.windows``), instead of ``W`` stored copies of each observation.
"""

from __future__ import annotations

import numpy as np


class ObservationWindow:
    def __init__(self, num_envs: int, window: int, obs_shape: tuple[int, ...], dtype):
        self.buffer = np.zeros((num_envs, window, *obs_shape), dtype=dtype)

    def context(self) -> np.ndarray:
        """``[W - 1, N, *obs]``: what the next step's window holds besides its own observation."""
        return np.swapaxes(self.buffer[:, 1:], 0, 1).copy()

    def peek(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The window with ``obs`` pushed, without keeping it (the bootstrap step at a batch's end)."""
        return shifted(self.buffer, obs, starts)

    def push(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Shift ``obs [N, *obs]`` in; where ``starts [N]``, zero what came before. Returns the window (a copy)."""
        self.buffer[:, :-1] = self.buffer[:, 1:]
        self.buffer[:, -1] = obs
        self.buffer[starts, :-1] = 0
        return self.buffer.copy()


def shifted(window: np.ndarray, obs: np.ndarray, starts: np.ndarray | None) -> np.ndarray:
    """A new window: ``window [N, W, *obs]`` with ``obs [N, *obs]`` pushed in and, where ``starts``, what came before
    zeroed (``distrl.load_policy``'s ``predict`` keeps its windows with this)."""
    out = np.concatenate([window[:, 1:], np.asarray(obs, dtype=window.dtype)[:, None]], axis=1)
    if starts is not None:
        out[np.asarray(starts, dtype=bool).reshape(-1), :-1] = 0
    return out
