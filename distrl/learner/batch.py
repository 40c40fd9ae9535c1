"""The batch a worker hands the learners, and the samples the PPO update draws minibatches from.

``Batch``: one worker's rollout as numpy arrays, time on axis 0 and envs on axis 1. With N
learners a worker splits it into N shards, equal slices of its envs, and learner r fetches only
shard r of every worker (``split`` / ``concat``): each learner moves batch / N bytes.

``TrainingSamples``: the tensors the loss reads (the batch plus advantages and returns), with a
minibatch iterator in the manner of SB3's rollout buffer ``get(batch_size)``. Feed-forward
models train on single steps; recurrent ones on sequences of ``ppo.seq_len`` steps that start
from the LSTM state recorded at sampling time (truncated BPTT).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np
import torch


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
    context: np.ndarray | None = None  # attention: [W-1, N, *obs_shape], the window before step 0 (rollout/window.py)
    action_mask: np.ndarray | None = None  # [T, N, n] bool, legal actions where the env reports info["action_mask"]

    @classmethod
    def empty(cls, steps: int, num_envs: int, obs_space, action_shape: tuple, action_dtype,
              lstm: tuple[int, int] | None = None, window: int = 0, num_actions: int = 0) -> Batch:  # fmt: skip
        """Uninitialised arrays for ``steps`` steps; ``lstm`` = ``(seq_len, hidden size)`` for recurrent models,
        ``window`` the attention window (0: none), ``num_actions`` the width of action masks (0: no masks)."""
        obs_dtype = np.uint8 if obs_space.dtype == np.uint8 else np.float32
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
        return [Batch(**{k: v[:, r * size : (r + 1) * size] for k, v in self.arrays().items()}) for r in range(num_shards)]

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        """Batches (one per worker, or shards) side by side along the env axis."""
        keys = batches[0].arrays()
        return Batch(**{k: np.concatenate([b.arrays()[k] for b in batches], axis=1) for k in keys})


@dataclass
class TrainingSamples:
    """Tensors the loss reads, indexed along axis 0 by unit: a step, or (recurrent) a sequence.

    Feed-forward: ``[U]``-leading tensors with U = T * N steps. Recurrent: ``[S, L, ...]``
    with S = (T / L) * N sequences of L = ``seq_len`` steps (sequence s = chunk * N + env), and
    ``h0``, ``c0`` ``[S, H]``. ``mask`` is 0 on steps that take no part in the loss; they stay in
    so that every minibatch has a fixed shape (one compiled graph).
    """

    tensors: dict[str, torch.Tensor]
    recurrent: bool

    @classmethod
    def from_rollout(cls, data: dict[str, torch.Tensor], advantages: torch.Tensor, returns: torch.Tensor,
                     seq_len: int | None = None, window: int = 0) -> TrainingSamples:  # fmt: skip
        """``data``: a ``Batch``'s arrays as tensors; ``advantages``, ``returns`` ``[T, N]``; ``seq_len`` for LSTMs;
        ``window``: an attention model's, whose every step then trains on its window ``[W, *obs]``."""
        obs = data["obs"][:-1]
        if window:
            obs = windows(data["context"], obs, data["starts"], window)
        per_step = {
            "obs": obs,
            "actions": data["actions"],
            "logp": data["logp"],
            "values": data["values"][:-1],
            "advantages": advantages,
            "returns": returns,
            "mask": data["valid"].float(),
        }
        if "action_mask" in data:
            per_step["action_mask"] = data["action_mask"]
        if seq_len is None:
            return cls({k: v.reshape(-1, *v.shape[2:]) for k, v in per_step.items()}, recurrent=False)
        steps, n = advantages.shape
        if steps % seq_len:
            raise ValueError(f"{steps} steps do not split into sequences of {seq_len}")
        per_step["starts"] = data["starts"]

        def sequences(x: torch.Tensor) -> torch.Tensor:
            # [T, N, ...] -> [T/L, L, N, ...] -> [T/L, N, L, ...] -> [S, L, ...]
            return x.reshape(steps // seq_len, seq_len, n, *x.shape[2:]).transpose(1, 2).reshape(-1, seq_len, *x.shape[2:])

        tensors = {k: sequences(v) for k, v in per_step.items()}
        tensors["h0"] = data["h0"].reshape(-1, data["h0"].shape[-1])
        tensors["c0"] = data["c0"].reshape(-1, data["c0"].shape[-1])
        return cls(tensors, recurrent=True)

    def __len__(self) -> int:
        """Units: steps, or sequences."""
        return self.tensors["mask"].shape[0]

    @property
    def num_samples(self) -> int:
        """Steps, masked ones included."""
        return self.tensors["mask"].numel()

    def minibatches(self, num_minibatches: int, generator: torch.Generator) -> Iterator[dict[str, torch.Tensor]]:
        """One epoch: a random permutation of the units in ``num_minibatches`` near-equal minibatches."""
        perm = torch.randperm(len(self), generator=generator).to(self.tensors["mask"].device)
        # One gather per tensor and epoch, then contiguous slices: a gather per minibatch costs a call per tensor each.
        parts = min(num_minibatches, len(self))
        chunks = {k: torch.tensor_split(v[perm], parts) for k, v in self.tensors.items()}
        for i in range(parts):
            yield {k: pieces[i] for k, pieces in chunks.items()}


def windows(context: torch.Tensor, obs: torch.Tensor, starts: torch.Tensor, window: int) -> torch.Tensor:
    """Every step's window ``[T, N, W, *obs]`` from the batch's ``obs [T, N, *obs]``, the window's earlier positions
    before step 0 ``context [W-1, N, *obs]`` and ``starts [T, N]`` (an episode begins at that observation).

    Step t's window is positions t .. t+W-1 of ``context`` followed by ``obs``, with everything before the newest
    episode start at or before t zeroed: what the worker's ``ObservationWindow`` held when it acted.
    """
    steps = obs.shape[0]
    sequence = torch.cat([context, obs], dim=0)  # [W-1+T, N, ...]
    index = torch.arange(steps, device=obs.device)[:, None] + torch.arange(window, device=obs.device)[None, :]
    stacked = sequence[index]  # [T, W, N, ...]
    # Where each step's episode began, as a position in `sequence`; -1 when before the batch (context holds it).
    began = torch.where(starts, torch.arange(steps, device=obs.device)[:, None] + window - 1, -1)
    began = torch.cummax(began, dim=0).values  # [T, N]
    keep = index[:, :, None] >= began[:, None, :]  # [T, W, N]
    stacked = stacked * keep.reshape(*keep.shape, *([1] * (obs.dim() - 2))).to(stacked.dtype)
    return stacked.transpose(1, 2)  # [T, N, W, ...]
