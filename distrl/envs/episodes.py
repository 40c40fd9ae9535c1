"""Episode returns and lengths in a gymnasium vector env with NEXT_STEP autoreset.

When step t ends an episode, the env's step t + 1 only resets it (the action is ignored and
the reward is 0): that step is not part of any episode. ``step`` says which steps were real.
"""

from __future__ import annotations

import numpy as np

from distrl.common.errors import EnvFailure


class InfoMetricError(EnvFailure):
    """An ``env.info_metrics`` key whose value at an episode's end is not a number: the run stops with its line."""


class EpisodeTracker:
    def __init__(self, num_envs: int, length_scale: int = 1, info_keys: tuple[str, ...] = ()):
        """``info_keys``: the ``info`` entries read at each episode's end (``env.info_metrics``)."""
        self.length_scale = length_scale  # env.action_repeat: lengths in frames, as Atari reports them
        self.info_keys = tuple(info_keys)
        self.info: dict[str, list[float]] = {key: [] for key in self.info_keys}  # since the last ``pop_info``
        self.info_missing: dict[str, int] = {key: 0 for key in self.info_keys}  # episodes that ended without it
        self.prev_done = np.zeros(num_envs, dtype=bool)
        self.running_return = np.zeros(num_envs, dtype=np.float64)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: list[float] = []  # of episodes finished since the last ``pop``
        self.lengths: list[int] = []

    def step(
        self,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        error: np.ndarray | None = None,
        info: dict | None = None,
    ) -> np.ndarray:
        """Count one vector step; returns ``valid``: False where it was the env's reset step.

        ``error`` marks envs that raised and were reset: their episode ends uncounted. ``info``: the step's vector
        info, read where an episode ended (``info_keys``).
        """
        valid = ~self.prev_done
        ended = terminated | truncated
        self.running_return += np.where(valid, reward, 0.0)  # a reset step's reward is not part of any episode
        self.running_length += valid
        if ended.any():  # most steps end no episode: skip the masked indexing
            finished = ended & valid if error is None else ended & valid & ~error
            self.returns.extend(self.running_return[finished].tolist())
            self.lengths.extend((self.running_length[finished] * self.length_scale).tolist())
            self._read_info(info, np.flatnonzero(finished))
            self.running_return[ended] = 0.0
            self.running_length[ended] = 0
        self.prev_done = ended
        return valid

    def step_copies(
        self,
        ids: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        error: np.ndarray,
        info: dict | None = None,
    ) -> np.ndarray:
        """``step`` for some copies only (``ids``, each once): an env that returns its copies as they become ready
        (``info``'s arrays row for row with ``ids``)."""
        valid = ~self.prev_done[ids]
        ended = terminated | truncated
        self.running_return[ids] += np.where(valid, reward, 0.0)
        self.running_length[ids] += valid
        if ended.any():
            rows = np.flatnonzero(ended & valid & ~error)
            finished = ids[rows]
            self.returns.extend(self.running_return[finished].tolist())
            self.lengths.extend((self.running_length[finished] * self.length_scale).tolist())
            self._read_info(info, rows)
            self.running_return[ids[ended]] = 0.0
            self.running_length[ids[ended]] = 0
        self.prev_done[ids] = ended
        return valid

    def _read_info(self, info: dict | None, rows: np.ndarray) -> None:
        """Each ``info_keys`` entry of the episodes that ended in ``rows`` of the step's vector info (gymnasium's: an
        array per key, and ``_key`` marking the rows that have it); a row without it is counted as missing."""
        if not self.info_keys or not len(rows):
            return
        info = info or {}
        for key in self.info_keys:
            values, has = info.get(key), info.get(f"_{key}")
            if values is None:
                present = rows[:0]
            else:
                present = rows if has is None else rows[np.asarray(has)[rows]]
            self.info_missing[key] += len(rows) - len(present)
            for row in present:
                value = values[row]
                if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
                    plain = value.item() if isinstance(value, np.generic) else value  # numpy's str_ as str
                    raise InfoMetricError(
                        f"env.info_metrics: info[{key!r}] at an episode's end is a {type(plain).__name__} "
                        f"({str(value)[:40]!r}); a number or a bool is needed"
                    )
                self.info[key].append(float(value))

    def pop_info(self) -> tuple[dict[str, list[float]], dict[str, int]]:
        """The ``info_keys`` values of the episodes finished since the last call, and how many had none."""
        out = (self.info, self.info_missing)
        self.info = {key: [] for key in self.info_keys}
        self.info_missing = {key: 0 for key in self.info_keys}
        return out

    def pop(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes finished since the last call."""
        out = (self.returns, self.lengths)
        self.returns, self.lengths = [], []
        return out
