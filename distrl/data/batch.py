"""The batch a worker hands the learners: one worker's rollout as numpy arrays, time on axis 0 and envs on axis 1.

With N learners a worker splits it into N shards, equal slices of its envs, and learner r fetches
only shard r of every worker (``split`` / ``concat``): each learner moves batch / N bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


def policy_obs_dtype(space_dtype) -> type:
    """The dtype a policy takes observations in: uint8 frames as they are (the CNN scales them), anything else
    (MuJoCo's float64, integer grids, bools) as float32, the dtype every backend's graph is built for."""
    return np.uint8 if np.dtype(space_dtype) == np.uint8 else np.float32


def policy_observation(obs: np.ndarray) -> np.ndarray:
    """``obs`` in the policy's dtype (``policy_obs_dtype``), copied only when the dtype changes."""
    return np.asarray(obs, dtype=policy_obs_dtype(np.asarray(obs).dtype))


@dataclass
class Batch:
    obs: np.ndarray  # [T+1, N, *obs_shape] as the policy saw them (row T: for the bootstrap value)
    actions: np.ndarray  # [T, N, *action_shape], unclipped
    logp: np.ndarray  # [T, N] behaviour log-probabilities
    values: np.ndarray  # [T+1, N]
    rewards: np.ndarray  # [T, N]
    terminated: np.ndarray  # [T, N] bool
    truncated: np.ndarray  # [T, N] bool
    valid: np.ndarray  # [T, N] bool; False on NEXT_STEP reset steps and env errors
    starts: np.ndarray | None = None  # LSTM: [T, N] bool, an episode starts at this observation
    h0: np.ndarray | None = None  # LSTM: [T/seq_len, N, H] state at the start of each chunk
    c0: np.ndarray | None = None
    context: np.ndarray | None = None  # attention: [W-1, N, *obs_shape], the window before step 0 (data/window.py)
    action_mask: np.ndarray | None = None  # [T, N, n] bool, legal actions where the env reports info["action_mask"]

    @classmethod
    def empty(
        cls,
        steps: int,
        num_envs: int,
        obs_space,
        action_shape: tuple,
        action_dtype,
        lstm: tuple[int, int] | None = None,
        window: int = 0,
        num_actions: int = 0,
    ) -> Batch:
        """Uninitialised arrays for ``steps`` steps; ``lstm`` = ``(seq_len, hidden size)`` for recurrent models,
        ``window`` the attention window (0: none), ``num_actions`` the width of action masks (0: no masks)."""
        obs_dtype = policy_obs_dtype(obs_space.dtype)
        step = lambda dtype: np.empty((steps, num_envs), dtype=dtype)  # noqa: E731
        batch = cls(
            obs=np.empty((steps + 1, num_envs, *obs_space.shape), dtype=obs_dtype),
            actions=np.empty((steps, num_envs, *action_shape), dtype=action_dtype),
            logp=step(np.float32),
            values=np.empty((steps + 1, num_envs), dtype=np.float32),
            rewards=step(np.float32),
            terminated=step(bool),
            truncated=step(bool),
            valid=step(bool),
        )
        if lstm is not None:
            seq_len, hidden = lstm
            batch.starts = step(bool)
            batch.h0 = np.empty((steps // seq_len, num_envs, hidden), dtype=np.float32)
            batch.c0 = np.empty_like(batch.h0)
        if num_actions:
            batch.action_mask = np.empty((steps, num_envs, num_actions), dtype=bool)
        if window:
            batch.starts = step(bool)
            batch.context = np.empty((window - 1, num_envs, *obs_space.shape), dtype=obs_dtype)
        return batch

    @property
    def num_envs(self) -> int:
        return self.rewards.shape[1]

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays present (LSTM fields only for recurrent models), by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self.arrays().values())

    def split(self, num_shards: int) -> list[Batch]:
        """``num_shards`` equal, contiguous env slices (views, no copies)."""
        if self.num_envs % num_shards:
            raise ValueError(f"{self.num_envs} envs do not split into {num_shards} equal learner shards")
        size = self.num_envs // num_shards
        return [
            Batch(**{k: v[:, r * size : (r + 1) * size] for k, v in self.arrays().items()}) for r in range(num_shards)
        ]

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        """Batches (one per worker, or shards) side by side along the env axis."""
        keys = batches[0].arrays()
        return Batch(**{k: np.concatenate([b.arrays()[k] for b in batches], axis=1) for k in keys})


@dataclass
class PolicyBatches:
    """A worker's batch where several policies train (``agents.policies``): each policy's slots as a batch of its own,
    by name. Each learner rank trains them all on its shard of every policy's slots."""

    batches: dict[str, Batch]

    @property
    def nbytes(self) -> int:
        return sum(batch.nbytes for batch in self.batches.values())

    def split(self, num_shards: int) -> list[PolicyBatches]:
        """``num_shards`` shards for as many learner ranks: shard r holds every policy's shard r (an equal slice of
        that policy's slots)."""
        if num_shards == 1:
            return [self]
        parts = {name: batch.split(num_shards) for name, batch in self.batches.items()}
        return [PolicyBatches({name: shards[r] for name, shards in parts.items()}) for r in range(num_shards)]
