"""``ppo.normalize_value``: the critic learns value targets scaled by their running mean and variance.

As rl_games' ``normalize_value`` and MAPPO's ``ValueNorm``: the model's value output is in the normalised scale.
Each update, the values recorded at sampling (and the learner's own, where ``ppo.proximal`` is ``learner``) are
de-normalised with the statistics as they stand, the targets (GAE's or V-trace's) are computed in the return's own
scale, the statistics take in this update's valid targets, and the value loss compares the critic's output with the
targets normalised by the new statistics, its clip centred on the old values normalised the same way. Plain
normalisation, as both of those do, not PopArt's rescale of the value head (which keeps the head's outputs unchanged
when the statistics move): the statistics are exact running moments over every target so far (Chan et al.'s merge,
as the observation statistics), so they move less with each update as the run goes on. Every rank merges every
rank's targets, so all ranks hold the same statistics; the learner's state (and so every checkpoint) carries them.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.distributed as dist

from distrl.common.running_mean_std import RunningMeanStd

VAR_FLOOR = 1e-2  # MAPPO's: early targets that barely differ (a sparse reward's zeros) are not blown up


class ValueNormaliser:
    def __init__(self, stats: RunningMeanStd | None = None):
        self.stats = stats if stats is not None else RunningMeanStd(())

    def _scale(self) -> tuple[float, float]:
        return float(self.stats.mean), float(np.sqrt(max(float(self.stats.var), VAR_FLOOR)))

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        if self.stats.count == 0:  # nothing seen yet: the identity, as the critic's first outputs are taken
            return values
        mean, std = self._scale()
        return (values - mean) / std

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        if self.stats.count == 0:
            return values
        mean, std = self._scale()
        return values * std + mean

    def update(self, targets: torch.Tensor, world_size: int = 1) -> None:
        """Take in ``targets`` (this rank's valid ones, any shape) and, with several ranks, every other rank's."""
        x = targets.detach().double().reshape(-1)
        sums = torch.stack(
            [torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device), x.sum(), x.square().sum()]
        )
        if world_size > 1:
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        count, total, squares = sums.tolist()
        if count == 0:
            return
        mean = total / count
        self.stats.merge(count, np.float64(mean), np.float64(max(squares / count - mean * mean, 0.0)))

    @classmethod
    def from_state(cls, state: dict) -> ValueNormaliser:
        return cls(RunningMeanStd.from_state(state))


def in_return_scale(value_norm: ValueNormaliser | None, data: dict, current):
    """``data`` and ``current`` (the learner's outputs on the batch, made when asked) with their values de-normalised,
    for the algorithm's targets; as they are without ``ppo.normalize_value``."""
    if value_norm is None:
        return data, current

    @functools.cache
    def denormalised():
        outputs = current()
        return outputs._replace(values=value_norm.denormalize(outputs.values))

    return {**data, "values": value_norm.denormalize(data["values"])}, denormalised


def in_critic_scale(value_norm: ValueNormaliser | None, data: dict, returns: torch.Tensor, world_size: int):
    """The statistics take in the update's valid ``returns`` (every rank's); ``data``'s values (the value loss's clip
    centre) and ``returns`` normalised by them, for the value loss; as they are without ``ppo.normalize_value``."""
    if value_norm is None:
        return data, returns
    value_norm.update(returns[data["valid"]], world_size)
    return {**data, "values": value_norm.normalize(data["values"])}, value_norm.normalize(returns)
