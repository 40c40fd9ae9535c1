"""Bounds on the driver's waits: a sample, a learner update. Pure: the driver feeds it what it measured.

``auto`` follows the run's own pace, RLlib's ``sample_timeout_s`` made adaptive: ten times the
slowest recent sample (or update), never under a floor that covers a busy machine's jitter.
The first sample and the first update get more (an update compiles on its first call; a
worker's first batch pays for anything lazy). A restarted worker also gets its start-up time.
"""

from __future__ import annotations

import collections

SAMPLE_FLOOR_S = 60.0
FIRST_SAMPLE_S = 120.0
UPDATE_FLOOR_S = 120.0
FIRST_UPDATE_S = 900.0  # inductor and CUDA-graph learners compile during their first update
PACE_MULTIPLE = 10.0
RECENT = 10  # iterations whose slowest sample or update sets the pace


class WaitBounds:
    """The current bound for a round's samples and for a learner update."""

    def __init__(self, sample_timeout_s: float | str, update_timeout_s: float | str):
        self.sample_setting, self.update_setting = sample_timeout_s, update_timeout_s
        self.samples: collections.deque[float] = collections.deque(maxlen=RECENT)
        self.updates: collections.deque[float] = collections.deque(maxlen=RECENT)

    def saw_sample(self, seconds: float) -> None:
        self.samples.append(seconds)

    def saw_update(self, seconds: float) -> None:
        self.updates.append(seconds)

    def sample_s(self) -> float:
        """How long a round waits for each worker's sample."""
        return _bound(self.sample_setting, self.samples, FIRST_SAMPLE_S, SAMPLE_FLOOR_S)

    def update_s(self) -> float:
        """How long the driver waits for a learner update before treating the learner as dead."""
        return _bound(self.update_setting, self.updates, FIRST_UPDATE_S, UPDATE_FLOOR_S)


def _bound(setting: float | str, seen: collections.deque, first: float, floor: float) -> float:
    if setting != "auto":
        return float(setting)
    if not seen:
        return first
    return max(floor, PACE_MULTIPLE * max(seen))
