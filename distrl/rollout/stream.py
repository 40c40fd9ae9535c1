"""SampleStream: the one sampler of every pipeline (held by the coordinator); it hands the loop the batches of its next
update. Three parts, wired here:

- the pump (``pump.py``): a thread that sends each worker its sample, waits on the samples in flight, pulls each batch
  to its learners' nodes (``landing.py``) and meets faults the same way in every pipeline (``docs/faults.md``);
- the handover, one of two: ``rounds.py`` (``sync``, ``overlap``: every answering worker samples once with the same
  weights, and the loop gets the whole round) or ``continuous.py`` (``async``: a worker samples on as soon as its batch
  is in, and the loop gets whichever batches are in, within the staleness bound);
- membership (``membership.py``): who samples, down, lost, evicted; its lock is the stream's.

The pump asks the handover which worker samples next and with which weights, and tells it what came in. The
coordinator submits and owns every sample (``coordinator.py``), so the driver's work per update stays constant in the
worker count. docs/architecture.md shows the whole path, from the env step to the loss.
"""

from __future__ import annotations

import threading

from distrl.rollout.continuous import Continuous
from distrl.rollout.membership import Membership
from distrl.rollout.pump import Notes, Pump, WorkerFailure
from distrl.rollout.rounds import ROUND_LAG, Rounds

__all__ = ["ROUND_LAG", "WEIGHTS_GROUP", "SampleStream", "WorkerFailure"]

WEIGHTS_GROUP = "weights"  # the workers' Ray concurrency group (a thread of its own) that stage_weights runs in


class SampleStream:
    def __init__(
        self,
        membership: Membership,
        num_shards: int,
        submit,
        stage,
        timeout_s: float,
        weights: list,
        plan: list | None,
        max_queued: int,
        started: list[int] | None = None,
        pipeline: str = "async",
        env_id: str = "",
        learner_nodes: list[str] | None = None,
    ):
        """``membership``: who samples (``membership.py``; its lock is this stream's);
        ``submit(index, weights_ref, plan) -> refs``: a worker's sample task (``(info, shard_0, ...)`` refs);
        ``stage(index, weights_ref) -> ref``: newer weights for the sample worker ``index`` is running;
        ``weights``: ``[ObjectRef]``, or ``[None]`` for the weights the workers hold; ``plan``: ``[ObjectRef]`` or None;
        ``max_queued``: the continuous handover's bound (``continuous.py``); ``started``: the workers constructed
        already (default all): the others (a worker range's, waiting for a node with room) are probed first, so that no
        sample times out while its worker does not exist yet; ``pipeline``: ``async`` (continuous), or ``sync`` or
        ``overlap`` (rounds, ``ROUND_LAG``); ``env_id``: for the line that gives up the last worker;
        ``learner_nodes``: the node of each learner rank, where its shards are pulled (``landing.py``)."""
        self.members = membership
        self.stage = stage
        self.cond = threading.Condition(membership.lock)
        self.notes = Notes(membership, num_shards)
        self.pump = Pump(
            membership, self.cond, self.notes, submit, timeout_s, weights, plan, learner_nodes or [], env_id
        )
        workers = range(len(membership.workers))
        started = workers if started is None else started
        with self.cond:
            membership.not_started([index for index in workers if index not in started])
            if pipeline in ROUND_LAG:
                first = {i for i in started if i not in membership.evicted and i not in membership.down}
                self.handover = Rounds(self.pump, self.notes, self.cond, ROUND_LAG[pipeline], first, weights, plan)
            else:
                self.handover = Continuous(self.pump, self.notes, self.cond, max_queued, weights)
            self.pump.handover = self.handover
            for index in workers:
                if index in membership.evicted:  # stopped before sampling started: probed once replaced
                    continue
                if index in started and index not in membership.down:
                    self.pump.send(index)
                else:
                    self.pump.probe(index)
        self.pump.thread.start()

    def set_weights(self, weights: list, plan: list | None, timeout_s: float) -> None:
        """Every sample sent from now on acts with ``weights`` (``[ObjectRef]``) and the league ``plan`` (None: the one
        it has), and is given up on after ``timeout_s`` (the sample bound follows the run's pace)."""
        pump = self.pump
        with self.cond:
            pump.weights, pump.timeout_s = weights, timeout_s
            if plan is not None:
                pump.plan = plan
            if weights[0] is None or isinstance(self.handover, Rounds):  # a round acts with its own weights throughout
                return
            for index, (kind, _, _) in pump.inflight.items():
                if kind == "sample":  # one call per running sample: the work per sample stays constant
                    self.members.abandon([self.stage(index, weights[0])])  # its reply is read (and dropped) by the pump

    def learners_at(self, rank_nodes: list[str]) -> None:
        """The learners run on ``rank_nodes`` from now on (rebuilt elsewhere): the next batches' shards go there."""
        with self.cond:
            self.pump.landing.learners_at(rank_nodes)

    def release(self, update: int) -> None:
        """Update number ``update`` is over (its weights set already, when it made any): the batches gathered for the
        next one stop counting against the bound (continuous), or the round waiting for its weights starts (rounds)."""
        with self.cond:
            self.handover.release(update)
            self.cond.notify_all()

    def gather(
        self, count: int, min_version: int, timeout_s: float, hold_until: int | None = None, plan: list | None = None
    ) -> tuple:
        """The next update's batches: ``(SampleReport, shards of rank 0, ...)`` like ``SampleCoordinator.gather``.
        ``hold_until``: the number of the update that runs while this gather waits (None: none runs); ``plan``: the
        league's plan as the loop has it now, for the samples sent from now on. Continuous: ``count`` batches of
        version >= ``min_version`` within ``timeout_s``; rounds: the first gather takes round 0, the one sent while
        update n runs round n + 1."""
        if plan is not None:
            with self.cond:
                self.pump.plan = plan
        if isinstance(self.handover, Rounds):
            return self.handover.gather(0 if hold_until is None else hold_until + 1)
        return self.handover.gather(count, min_version, timeout_s, hold_until)

    def evict(self, index: int) -> None:
        """Worker ``index`` is being stopped for good (``SampleCoordinator.evict``): left out until ``replace``."""
        with self.cond:
            self.members.evict(index)
            self.pump.drop(index)
            self.handover.leave_out(index)

    def replace(self, index: int, worker) -> None:
        """``worker``: a new actor in evicted worker ``index``'s place: probed until it answers."""
        with self.cond:
            self.members.replace(index, worker)
            self.pump.probe(index)
