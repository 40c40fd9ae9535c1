"""An LSTM core: ``(h, c)`` per env copy, zeroed before an episode's first observation.

The batch keeps the state at the start of each ``ppo.seq_len`` chunk (``h0``, ``c0``) and the episode starts, so the
learner's truncated-BPTT unroll sees what the worker saw.
"""

from __future__ import annotations

import numpy as np


class LSTMMemory:
    name = "lstm"
    input_names = ("obs", "h", "c")
    output_names = ("h_out", "c_out")

    def __init__(self, model):
        self.size = model.lstm_size

    def initial(self, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
        zeros = np.zeros((num_envs, self.size), dtype=np.float32)
        return zeros, zeros.copy()

    def inputs(self, state, obs: np.ndarray, starts) -> tuple[tuple, tuple]:
        h, c = state
        if starts is not None:
            keep = (~np.asarray(starts, dtype=bool).reshape(-1)).astype(np.float32)[:, None]
            h, c = h * keep, c * keep
        return (obs, h, c), state

    def after(self, seen, extra_outputs: tuple) -> tuple:
        h, c = extra_outputs
        return h, c

    def batch_layout(self, seq_len: int) -> dict:
        return {"lstm": (seq_len, self.size)}

    def record_start(self, batch, state) -> None:
        pass

    def record_step(self, batch, t: int, state, starts: np.ndarray, seq_len: int, cols=slice(None)) -> None:
        if t % seq_len == 0:
            batch.h0[t // seq_len, cols], batch.c0[t // seq_len, cols] = state
        batch.starts[t, cols] = starts

    def example(self, obs_rows: np.ndarray, rng) -> tuple:
        n = len(obs_rows)
        if rng is None:
            return (obs_rows, *self.initial(n))
        h = rng.normal(size=(n, self.size)).astype(np.float32)
        return obs_rows, h, h.copy()

    def rows_per_example(self) -> int:
        return 1
