"""Rounds (``pipeline: sync``, ``overlap``): every answering worker samples once with the same weights, and the loop
gets the whole round in worker order (a seed repeats its rows).

A round starts once the one before it is in, the loop has asked for it and its weights are released: ``sync``'s the
update on the round before (policy lag 0), ``overlap``'s the update before that (lag 1: the workers sample while the
learner updates). A round waits for each member's batch up to the sample bound: a member Ray restarts (it died, or
distrl killed it for a timeout) is sent its sample again once it answers, unless its node is gone; a worker back later
joins the next round.
"""

from __future__ import annotations

import threading
import time

from distrl.data.messages import SampleInfo
from distrl.rollout.pump import PUMP_WAIT_S, Notes, Pump

ROUND_LAG = {"sync": 0, "overlap": 1}  # the pipelines that sample in rounds: how many updates a round's weights lag
EMPTY_ROUND_S = 1.0  # how long a round no worker could join waits for one to answer before it is handed over empty


class Round:
    """The round sampling now: who is in it, who is done, the batches in."""

    def __init__(self, number: int, members: set[int], weights: list, plan: list | None):
        self.number = number
        self.members = members  # the workers answering when it started: a worker back later joins the next round
        self.sampled: set[int] = set()  # members whose sample returned (its batch may still be landing)
        self.done: set[int] = set()  # members whose batch is in, or that it went on without (timed out, lost)
        self.batches: dict[int, tuple[SampleInfo, tuple]] = {}
        self.timeouts: list[dict] = []  # handed over with this round's batches, whichever gather wakes first
        self.weights, self.plan = weights, plan  # what its samples act with, a resubmitted one's too
        self.started_at = time.monotonic()
        self.complete = False


class Rounds:
    def __init__(self, pump: Pump, notes: Notes, cond: threading.Condition, lag: int, first: set[int], weights, plan):
        """``lag``: how many updates a round's weights lag (``ROUND_LAG``); ``first``: round 0's members, sampled at
        once with ``weights`` (``[None]``: the workers' own) and ``plan``."""
        self.pump, self.notes, self.cond, self.lag = pump, notes, cond, lag
        self.round = Round(0, first, weights, plan)
        self.rounds_in: dict[int, Round] = {}  # complete rounds not gathered yet, by number
        self.asked = 0  # rounds the loop has asked for (the first is sampled at once: the workers start with it)
        # The newest update ``release`` has said is over (-1: the learner's initial weights are given; a new run's first
        # round is sampled with the workers' own while the learners start).
        self.released = -1 if weights[0] is not None else -2
        self.parked: list[int] = []  # workers that answered and sample in no round yet

    # --- the loop's side ------------------------------------------------------------------------
    def gather(self, number: int) -> tuple:
        """Round ``number`` once it is complete, in worker order: ``(SampleReport, shards of rank 0, ...)``. Gathers
        may run side by side (the next round's is sent before this one's is in): each takes its own."""
        with self.cond:
            self.asked = max(self.asked, number + 1)
            self._next_round()
            while number not in self.rounds_in:
                if self.pump.error is not None:
                    raise self.pump.error
                current = self.round
                if not self.notes.timeouts and (current.number != number or not current.timeouts):
                    self.pump.check_workers_left()  # a timeout is reported first, with the round it happened in
                self.cond.wait(timeout=PUMP_WAIT_S)
            done = self.rounds_in.pop(number)
            if not (done.batches or done.timeouts or self.notes.timeouts):  # nothing to hand over: no worker left?
                self.pump.check_workers_left()
            taken = [done.batches[index] for index in sorted(done.batches)]
            return self.notes.hand_over(taken, timeouts=done.timeouts)

    def release(self, update: int) -> None:
        """Under the lock: update ``update`` is over; the round its weights were waited for may start."""
        self.released = max(self.released, update)
        self._next_round()

    # --- the pump's side -------------------------------------------------------------------------
    def weights(self) -> tuple[list, list | None]:
        """What a sample sent now acts with: its round's weights and plan, a resubmitted one's too."""
        return self.round.weights, self.round.plan

    def sampled(self, index: int) -> None:
        self.round.sampled.add(index)

    def batch_in(self, batch: tuple) -> None:
        """Only the round sampling now has samples out: a round goes on without one only once it is dropped."""
        index = batch[0].worker_index
        self.round.batches[index] = batch
        self.round.done.add(index)

    def free(self, index: int) -> None:
        """Worker ``index`` answered: it samples now if it is a member of the round sampling now whose batch is not
        in (Ray restarted it: its sample is sent again), or if no worker could join that round; else it waits."""
        self.parked.append(index)
        current = self.round
        if current.complete:
            return
        if not current.members:
            current.members.update(self.parked)
        for waiting in [i for i in self.parked if i in current.members and i not in current.sampled | current.done]:
            self.parked.remove(waiting)
            self.pump.send(waiting)

    def timed_out(self, index: int, timeout: dict) -> None:
        """The sample was the round sampling now's: its gather reports the timeout, not a later round's; the round
        goes on without its batch."""
        current = self.round
        (current.timeouts if not current.complete else self.notes.timeouts).append(timeout)
        current.done.add(index)

    def leave_out(self, index: int) -> None:
        if index in self.parked:
            self.parked.remove(index)

    def tick(self) -> None:
        """The round sampling now is complete once each member's batch is in or the round went on without it: timed
        out, lost, evicted, or down (Ray restarting it) with its node gone or past the sample bound since the round
        started. A complete round waits to be gathered; the next one starts once its weights are released."""
        current = self.round
        if current.complete:
            return
        members, now = self.pump.members, time.monotonic()
        late = now > current.started_at + self.pump.timeout_s
        for index in current.members - current.done:
            sampling = self.pump.inflight.get(index, ("",))[0] == "sample" or index in current.sampled
            if index in members.lost or index in members.evicted:
                current.done.add(index)
            elif not sampling and (late or (index in members.down and members.node_gone(index))):
                current.done.add(index)  # not answering (Ray restarting it) past the bound, or its node is gone
        if not current.members and now < current.started_at + EMPTY_ROUND_S:
            return
        if current.done >= current.members:
            current.complete = True
            self.rounds_in[current.number] = current
            self.cond.notify_all()
            self._next_round()

    def _next_round(self) -> None:
        """Start the next round once the one sampling now is complete, the loop has asked for it, and the weights it
        takes are released: the update on the round before it (sync), or on the one before that (overlap). Every
        worker answering joins it, and every one Ray is restarting after distrl killed it."""
        current = self.round
        asked = self.asked > current.number + 1
        if not current.complete or not asked or self.released < current.number - self.lag:
            return
        self.round = Round(
            current.number + 1, set(self.parked) | self.pump.restarting(), self.pump.weights, self.pump.plan
        )
        for index in list(self.parked):
            self.parked.remove(index)
            self.pump.send(index)
