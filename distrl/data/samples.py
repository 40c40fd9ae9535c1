"""The samples an update draws minibatches from: the batch's tensors plus the algorithm's targets.

``TrainingSamples`` has a minibatch iterator in the manner of SB3's rollout buffer ``get(batch_size)``.
Feed-forward models train on single steps; recurrent ones on sequences of ``ppo.seq_len`` steps that
start from the LSTM state recorded at sampling time (truncated BPTT); attention models on each step's
window, rebuilt from the batch (``distrl.data.window.windows``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from distrl.data.window import windows


def gather_rows(tensors: dict[str, torch.Tensor], perm: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each tensor's rows in ``perm``'s order: an epoch's shuffle, the same for the loop and the device step.
    ``index_select``, which on CPU is several times faster than indexing with the permutation."""
    return {k: v.index_select(0, perm) for k, v in tensors.items()}


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
    def from_rollout(
        cls,
        data: dict[str, torch.Tensor],
        advantages: torch.Tensor,
        returns: torch.Tensor,
        seq_len: int | None = None,
        window: int = 0,
    ) -> TrainingSamples:
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
        for key in ("action_mask", "weights"):  # where the env has masks; where the algorithm weights its samples
            if key in data:
                per_step[key] = data[key]
        if seq_len is None:
            return cls({k: v.reshape(-1, *v.shape[2:]) for k, v in per_step.items()}, recurrent=False)
        steps, n = advantages.shape
        if steps % seq_len:
            raise ValueError(f"{steps} steps do not split into sequences of {seq_len}")
        per_step["starts"] = data["starts"]

        def sequences(x: torch.Tensor) -> torch.Tensor:
            # [T, N, ...] -> [T/L, L, N, ...] -> [T/L, N, L, ...] -> [S, L, ...]
            return (
                x.reshape(steps // seq_len, seq_len, n, *x.shape[2:]).transpose(1, 2).reshape(-1, seq_len, *x.shape[2:])
            )

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
        chunks = {k: torch.tensor_split(v, parts) for k, v in gather_rows(self.tensors, perm).items()}
        for i in range(parts):
            yield {k: pieces[i] for k, pieces in chunks.items()}
