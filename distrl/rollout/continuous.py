"""Continuous sampling (``pipeline: async``): a worker samples on as soon as its batch is in, with the newest weights,
which also go at once to every running sample (``RolloutWorker.stage_weights``: it acts with them from its next step).

While the learner updates, the workers sample the next update's batches and no more (``rollout.updates_ahead``): a
worker whose batch is in then waits (parked) until the learner asks again, as what it sampled would be a version
older by the time it was trained on; while the learner waits, as many more sample as it still needs. A sample running
past twice the recent median and past half a second (a slow worker's) does not count, so no gather waits on a slow
worker while a fast one is parked. ``gather`` takes the oldest batches first and drops those whose every step is older
than ``rollout.max_policy_lag`` allows (stale); the learner leaves a batch's too-old steps out of the loss, as Sample
Factory does. The async loop sends each gather while the update before it runs; what it takes counts against the
bound until ``release`` says that update is over.
"""

from __future__ import annotations

import collections
import threading
import time

from distrl.data.messages import SampleInfo
from distrl.data.staleness import batch_too_old
from distrl.rollout.pump import PUMP_WAIT_S, Notes, Pump


class Continuous:
    def __init__(self, pump: Pump, notes: Notes, cond: threading.Condition, max_queued: int, weights: list):
        """``max_queued``: what the queue, the batches landing and the samples in flight hold before a worker whose
        batch is in waits, while the learner updates (an update's batches x ``rollout.updates_ahead``)."""
        self.pump, self.notes, self.cond, self.max_queued = pump, notes, cond, max_queued
        self.queue: collections.deque[tuple[SampleInfo, tuple]] = collections.deque()
        self.parked: list[int] = []  # workers waiting for room in the queue
        self.needed = 0  # batches a waiting gather still needs: as many more may be sampling beside the bound
        self.in_hand = 0  # batches a waiting gather has taken so far (counted against the bound)
        # The newest update ``release`` has said is over (-1: the learner's initial weights are given; -2: the workers'
        # own), and the batches gathered while an update ran, by its number: they count against the bound until it is
        # over, as if still queued.
        self.released = -1 if weights[0] is not None else -2
        self.held: dict[int, int] = {}

    # --- the loop's side ------------------------------------------------------------------------
    def gather(self, count: int, min_version: int, timeout_s: float, hold_until: int | None) -> tuple:
        """The next ``count`` batches whose newest steps acted with version >= ``min_version`` (older ones dropped as
        stale), waiting at most ``timeout_s``: ``(SampleReport, shards of rank 0, ...)``. ``hold_until``: the number of
        the update that runs while this gather waits (None: none runs); until ``release`` says it is over, no more is
        sampled for this gather than the bound allows, and what it took counts against it."""
        taken: list[tuple[SampleInfo, tuple]] = []
        deadline = time.monotonic() + timeout_s
        with self.cond:
            try:
                while len(taken) < count:
                    if self.pump.error is not None:
                        raise self.pump.error
                    while self.queue and len(taken) < count:
                        info, shards = self.queue.popleft()
                        if batch_too_old(info, min_version):  # every step too old (some: the learner masks them)
                            self.notes.stale += 1
                        else:
                            taken.append((info, shards))
                    self.in_hand = len(taken)
                    self.needed = 0 if self._holding(hold_until) else count
                    self._unpark()
                    if len(taken) < count:
                        if self.pump.members.all_lost() and (taken or self.notes.timeouts):
                            break  # what came in first (its timeouts counted); the next gather ends the run
                        self.pump.check_workers_left()
                        if time.monotonic() >= deadline:
                            break
                        self.cond.wait(timeout=min(PUMP_WAIT_S, max(0.0, deadline - time.monotonic())))
            finally:
                if taken and self._holding(hold_until):
                    self.held[hold_until] = self.held.get(hold_until, 0) + len(taken)
                self.needed = self.in_hand = 0
            return self.notes.hand_over(taken, min_version)

    def release(self, update: int) -> None:
        """Under the lock: update ``update`` is over: the batches gathered for the next one stop counting against the
        bound, and the workers parked behind them sample again."""
        self.released = max(self.released, update)
        for number in [n for n in self.held if n <= self.released]:
            del self.held[number]
        self._unpark()

    # --- the pump's side -------------------------------------------------------------------------
    def weights(self) -> tuple[list, list | None]:
        return self.pump.weights, self.pump.plan

    def sampled(self, index: int) -> None:
        pass

    def batch_in(self, batch: tuple) -> None:
        self.queue.append(batch)

    def free(self, index: int) -> None:
        self.parked.append(index)
        self._unpark()

    def timed_out(self, index: int, timeout: dict) -> None:
        self.notes.timeouts.append(timeout)

    def leave_out(self, index: int) -> None:
        if index in self.parked:
            self.parked.remove(index)

    def tick(self) -> None:
        pass

    def _unpark(self) -> None:
        """Send waiting workers their next request while the queue with the batches landing and the samples in flight
        holds less than the bound (``max_queued``) plus what a waiting gather still needs: a gather never waits on a
        slow worker's sample while a fast one is parked, and no more is sampled ahead than the bound allows."""
        room = self.max_queued + self.needed - self._outstanding()  # each request sent adds a sample on pace
        while self.parked and room > 0:
            self.pump.send(self.parked.pop(0))
            room -= 1

    def _outstanding(self) -> int:
        pump = self.pump
        return len(self.queue) + len(pump.landing) + pump.sampling_on_pace() + self.in_hand + sum(self.held.values())

    def _holding(self, hold_until: int | None) -> bool:
        """Whether update ``hold_until``, running while a gather waits, is not over yet (``release``)."""
        return hold_until is not None and self.released < hold_until
