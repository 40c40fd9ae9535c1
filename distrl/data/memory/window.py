"""An attention policy's window: each env's last ``W`` observations, newest last, zeroed before an episode's start.

The batch keeps the ``W - 1`` positions the window held before its first step (``context``) and the episode starts;
with the batch's observations that is all the learner needs to rebuild every step's window (``data/window.py``).
"""

from __future__ import annotations

import numpy as np


def shifted(window: np.ndarray, obs: np.ndarray, starts: np.ndarray | None) -> np.ndarray:
    """A new window: ``window [N, W, *obs]`` with ``obs [N, *obs]`` pushed in and, where ``starts``, what came before
    zeroed (``distrl.load_policy``'s ``predict`` keeps its windows with this)."""
    out = np.concatenate([window[:, 1:], np.asarray(obs, dtype=window.dtype)[:, None]], axis=1)
    if starts is not None:
        out[np.asarray(starts, dtype=bool).reshape(-1), :-1] = 0
    return out


class WindowMemory:
    name = "window"
    input_names = ("obs_window",)
    output_names = ()

    def __init__(self, model):
        self.window = model.window
        self.obs_shape = tuple(model.input_space.shape)

    def initial(self, num_envs: int) -> np.ndarray:
        return np.zeros((num_envs, self.window, *self.obs_shape), dtype=np.float32)

    def inputs(self, state: np.ndarray, obs: np.ndarray, starts) -> tuple[tuple, np.ndarray]:
        window = shifted(np.asarray(state, dtype=np.float32), obs, starts)  # a caller's own state may be float64
        return (window,), window

    def after(self, seen: np.ndarray, extra_outputs: tuple) -> np.ndarray:
        return seen

    def batch_layout(self, seq_len: int) -> dict:
        return {"window": self.window}

    def record_start(self, batch, state: np.ndarray) -> None:
        batch.context[:] = np.swapaxes(state[:, 1:], 0, 1)

    def record_step(self, batch, t: int, state, starts: np.ndarray, seq_len: int, cols=slice(None)) -> None:
        batch.starts[t, cols] = starts

    def example(self, obs_rows: np.ndarray, rng) -> tuple:
        return (obs_rows.reshape(-1, self.window, *self.obs_shape),)

    def rows_per_example(self) -> int:
        return self.window
