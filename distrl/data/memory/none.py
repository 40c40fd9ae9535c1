"""A feed-forward policy: nothing carried between steps."""

from __future__ import annotations

import numpy as np


class NoMemory:
    name = "none"
    input_names = ("obs",)
    output_names = ()

    def __init__(self, model):
        pass

    def initial(self, num_envs: int) -> None:
        return None

    def inputs(self, state, obs: np.ndarray, starts) -> tuple[tuple, None]:
        return (obs,), None

    def after(self, seen, extra_outputs: tuple) -> None:
        return None

    def batch_layout(self, seq_len: int) -> dict:
        return {}

    def record_start(self, batch, state) -> None:
        pass

    def record_step(self, batch, t: int, state, starts: np.ndarray, seq_len: int, cols=slice(None)) -> None:
        pass

    def example(self, obs_rows: np.ndarray, rng) -> tuple:
        return (obs_rows,)

    def rows_per_example(self) -> int:
        return 1
