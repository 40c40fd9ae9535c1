"""Running mean and variance of observations, mergeable across workers (Chan et al. parallel algorithm)."""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    def __init__(self, shape: tuple[int, ...], count: float = 0.0, mean=None, var=None, skip=None):
        """``skip``: a bool mask of ``shape``, True on the elements ``normalize`` passes through unchanged (the pixels
        of a Dict observation's image parts, which the CNN scales itself)."""
        self.count = float(count)
        self.mean = np.zeros(shape, np.float64) if mean is None else np.asarray(mean, np.float64)
        self.var = np.ones(shape, np.float64) if var is None else np.asarray(var, np.float64)
        self.skip = None if skip is None else np.asarray(skip, bool)

    @staticmethod
    def batch_stats(x: np.ndarray, feature_dims: int) -> tuple[float, np.ndarray, np.ndarray]:
        """(count, mean, var) over all leading axes of ``x``, keeping the last ``feature_dims`` axes."""
        flat = x.reshape(-1, *x.shape[x.ndim - feature_dims :]).astype(np.float64)
        return float(flat.shape[0]), flat.mean(axis=0), flat.var(axis=0)

    def merge(self, count: float, mean: np.ndarray, var: np.ndarray) -> None:
        if count == 0:
            return
        total = self.count + count
        delta = mean - self.mean
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.mean = self.mean + delta * count / total
        self.var = m2 / total
        self.count = total

    def normalize(self, x: np.ndarray, clip: float) -> np.ndarray:
        out = np.clip((x - self.mean) / np.sqrt(self.var + 1e-8), -clip, clip)
        if self.skip is not None:
            out = np.where(self.skip, x, out)
        return out.astype(np.float32)

    def state(self) -> dict:
        state = {"count": self.count, "mean": self.mean.copy(), "var": self.var.copy()}
        if self.skip is not None:
            state["skip"] = self.skip.copy()
        return state

    @classmethod
    def from_state(cls, state: dict) -> RunningMeanStd:
        """From ``state()``, or a checkpoint's copy of it (CPU tensors read as arrays)."""
        state = {k: np.asarray(v) for k, v in state.items()}
        return cls(np.shape(state["mean"]), state["count"], state["mean"], state["var"], state.get("skip"))
