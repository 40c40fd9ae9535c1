"""Membership: who samples in the run, for the sampler (``stream.py``), whatever its pipeline.

A worker is answering, down (Ray is restarting it, or a draining node's worker is being moved, or an evicted worker's
replacement is not placed yet: probed until it is back), lost (Ray will not restart it: left out for good unless an
eviction's replacement takes its place) or evicted (stopped by distrl to make room for a rebuilt learner, until
``replace``). What changed since the last report is handed over once (``events``). One lock guards it, held by the
coordinator's concurrent calls and the stream's pump thread alike; no wait for a worker happens while it is held.
"""

from __future__ import annotations

import threading

import ray

from distrl.rollout.restarts import RestartBudget, node_usable


class Membership:
    def __init__(self, workers: list, max_restarts: int):
        """``workers``: the actor handles, by index (``replace`` swaps one in place: the list is shared with the
        restart budget and the sampler)."""
        self.workers = workers
        self.budget = RestartBudget(workers, max_restarts)
        self.lock = threading.RLock()
        self.node_of: dict[int, str] = {}  # where each worker last sampled
        self.answered: set[int] = set(range(len(workers)))  # have answered since they were created
        self.down: set[int] = set()
        self.lost: set[int] = set()
        self.evicted: set[int] = set()
        self.abandoned: list = []  # refs of killed or dropped calls: read once they fail, so Ray logs no unread error
        self._down: list[int] = []  # since the last report
        self._evicted: list[int] = []
        self._back: list[int] = []
        self._lost: list[int] = []

    # --- what the sampler asks-----------------------------------------------------------------
    def all_lost(self) -> bool:
        return len(self.lost) == len(self.workers)

    def node_gone(self, index: int) -> bool:
        """Worker ``index``'s node is gone or draining (Ray restarts its actors elsewhere, once it calls the node
        dead)."""
        node = self.node_of.get(index)
        return bool(node) and not node_usable(node)

    # --- what the sampler saw -------------------------------------------------------------------
    def not_started(self, indices) -> None:
        """These workers are not constructed yet (a range's, waiting for a node with room): their first answer is
        reported as back."""
        self.answered.difference_update(indices)

    def seen(self, index: int, incarnation: str) -> bool:
        """Worker ``index`` answered from process ``incarnation``: False once a crash has spent its restarts (the
        budget has then killed it for good).

        A new process whose last node is gone, from a worker the sampler did not see go down, went down with its node
        and is back: Ray restarted it elsewhere between two of its calls (while the loop rebuilt a lost learner, say),
        so no call failed. Both are reported, so the run counts the loss as it does any other."""
        answer = self.budget.seen(index, incarnation, self.node_of.get(index))
        if answer == "node" and index not in self.down:
            self._down.append(index)
            self._back.append(index)
        return answer != "spent"

    def sampled_on(self, index: int, node_id: str) -> None:
        self.node_of[index] = node_id

    def went_down(self, index: int) -> None:
        """It stopped answering (its process or node died, or distrl killed it for a restart)."""
        if index not in self.down:
            self.down.add(index)
            self._down.append(index)

    def back(self, index: int) -> None:
        """It answers: again after going down, or for the first time (an evicted worker's successor, a range's)."""
        self.evicted.discard(index)
        if index in self.down or index not in self.answered:
            self.down.discard(index)
            self.answered.add(index)
            self._back.append(index)

    def lose(self, index: int) -> None:
        """Ray will not restart it: left out for good."""
        self.down.discard(index)
        if index not in self.lost:
            self.lost.add(index)
            self._lost.append(index)

    # --- what the driver does --------------------------------------------------------------------
    def evict(self, index: int) -> None:
        """Worker ``index`` is stopped for good to make room for a learner (the caller kills it): down until
        ``replace``; its failing calls are not counted (it is no loss). A worker whose node is gone though the sampler
        did not see it go down (Ray restarted it elsewhere, into the room the learner was to take, while the loop
        rebuilt the learner) went down with its node first: that is reported too, before the eviction."""
        if index not in self.down and index not in self.lost and self.node_gone(index):
            self._down.append(index)
        self.evicted.add(index)
        if index in self._back:  # not reported yet: its successor is reported once it answers
            self._back.remove(index)
        if index not in self.down and index not in self.lost:
            self.down.add(index)
            self._down.append(index)
            self._evicted.append(index)

    def replace(self, index: int, worker) -> None:
        """``worker``: a new actor in evicted worker ``index``'s place; down until it answers."""
        self.workers[index] = worker  # the list the restart budget and the sampler hold too
        self.budget.incarnations.pop(index, None)  # a new actor: its first answer is not a restart
        self.lost.discard(index)
        self.down.add(index)

    def move(self, indices: list[int]) -> None:
        """Their node is draining: each is killed now for a restart that Ray places on a node with room (none is placed
        on a draining node), before the node goes; spends none of the budget."""
        for index in indices:
            self.budget.move(index)

    # --- what is handed over -----------------------------------------------------------------------
    def events(self) -> dict[str, list[int]]:
        """What changed since the last call, as ``SampleReport`` fields: ``workers_down`` (evicted ones included),
        ``workers_evicted``, ``workers_back``, ``workers_lost``."""
        events = {
            "workers_down": self._down,
            "workers_evicted": self._evicted,
            "workers_back": self._back,
            "workers_lost": self._lost,
        }
        self._down, self._evicted, self._back, self._lost = [], [], [], []
        return events

    def abandon(self, refs) -> None:
        self.abandoned.extend(refs)

    def read_abandoned(self) -> None:
        """Read the abandoned refs that have failed by now (Ray logs an error no one reads). Taken under the lock and
        read outside it: ``ray.wait`` over a list another thread grows raises a bare AssertionError."""
        with self.lock:
            refs, self.abandoned = self.abandoned, []
        if not refs:
            return
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception:  # the kill's own error: expected
                pass
        with self.lock:
            self.abandoned = pending + self.abandoned
