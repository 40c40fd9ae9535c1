"""The async pipeline's staleness bound (``rollout.max_policy_lag``), decided here alone.

An update from learner version ``v`` trains on a step only if the weights that acted at it are at most
``max_policy_lag`` versions behind: version >= ``min_version(v, max_policy_lag)``. The loop names that bound for each
gather, the stream drops a batch none of whose steps is inside it (``batch_too_old``: counted as ``stale_batches``),
and the learner leaves the steps outside it out of the loss (``steps_inside``: counted as ``stale_steps``). The worker
only records which version acted at each step (``SampleInfo.version_changes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrl.data.messages import SampleInfo


def min_version(version: int, max_policy_lag: int) -> int:
    """The oldest policy version an update from learner version ``version`` trains on."""
    return version - max_policy_lag


def batch_too_old(info: SampleInfo, min_version: int) -> bool:
    """Every step of the batch acted with weights older than the bound (its newest did)."""
    return info.newest_version < min_version


def steps_inside(versions, min_version: int):
    """Per step (an array or tensor of the versions that acted): inside the bound."""
    return versions >= min_version
