"""SampleStream: the one sampler of every pipeline; it hands the loop the batches of its next update.

``pipeline: sync`` and ``overlap`` sample in rounds: every answering worker samples once with the same weights, and
``gather`` hands the loop the whole round in worker order (a seed repeats its rows). A round starts once the one before
it is in and its weights are released: ``sync``'s the update on the round before (policy lag 0), ``overlap``'s the
update before that (lag 1: the workers sample while the learner updates). ``pipeline: async`` is continuous: a worker
samples on as soon as its batch is in, with the newest weights the coordinator has (one object per update), which also
go at once to every running sample (``RolloutWorker.stage_weights``: it acts with them from its next step). While the
learner updates, the workers sample the next update's batches and no more (``rollout.updates_ahead``): a worker whose
batch is in then waits (parked) until the learner asks again, as what it sampled would be a version older by the time
it was trained on; while the learner waits, as many more sample as it still needs. A sample running past twice the
recent median and past half a second (a slow worker's) does not count, so no gather waits on a slow worker while a
fast one is parked. ``gather`` takes the oldest batches first and drops those whose every step is older than
``rollout.max_policy_lag`` allows (stale); the learner leaves a batch's too-old steps out of the loss, as Sample Factory
does. The async loop sends each gather while the update before it runs; what it takes counts against the bound until
``release`` says that update is over.

A pump thread waits on the samples in flight. A batch joins the queue (or its round) once each of its shards is on
the node of the learner rank that trains it (``landing.py``): the bytes go from the worker's node to the learner's and
nowhere else, and a worker's node lost after that costs no batch. The coordinator submits and owns every sample
(``coordinator.py``), so the driver's work per update stays constant in the worker count. Faults are met the same way
in every pipeline, each bounded without stopping the others (``docs/faults.md``): a worker that died is probed until it
answers, its interrupted batch lost (a round sends its sample again, unless its node is gone); a sample past the bound
(a stuck env) gets its worker killed for a restart and counted as a timeout; a worker given up (``restarts.py``) is left
out, and the last one's loss ends the run with ``WorkerFailure``.
"""

from __future__ import annotations

import collections
import statistics
import threading
import time

import ray

from distrl.common.errors import EnvFailure
from distrl.data.messages import SampleInfo, SampleReport
from distrl.data.staleness import batch_too_old
from distrl.rollout.landing import Landing
from distrl.rollout.membership import Membership

PUMP_WAIT_S = 0.5  # the pump's longest sleep: how soon it notices a timeout
# While a worker is parked, a gather may send it a request the pump's wait does not include yet: the pump looks again
# this often, so that sample's return is noticed at once rather than a whole PUMP_WAIT_S later.
PARKED_WAIT_S = 0.01
RETRY_S = 0.2  # how soon a worker Ray is restarting is asked again whether it answers
SLOW_FLOOR_S = 0.5  # a sample is a slow worker's only past this too: on short rollouts a scheduling hiccup is not one
WEIGHTS_GROUP = "weights"  # the workers' Ray concurrency group (a thread of its own) that stage_weights runs in
EMPTY_ROUND_S = 1.0  # how long a round no worker could join waits for one to answer before it is handed over empty
ROUND_LAG = {"sync": 0, "overlap": 1}  # the pipelines that sample in rounds: how many updates a round's weights lag


class WorkerFailure(EnvFailure):
    """No rollout worker can go on: the last one died or timed out more often than ``rollout.max_restarts``
    allows."""


class Round:
    """The round sampling now (``pipeline: sync``, ``overlap``): who is in it, who is done, the batches in. A round
    waits for each member's batch up to the sample bound: a member Ray restarts (it died, or distrl killed it for a
    timeout) is sent its sample again once it answers, unless its node is gone."""

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
        ``max_queued``: what the queue, the batches in copy and the samples in flight hold before a worker whose batch
        is in waits, while the learner updates (an update's batches x ``rollout.updates_ahead``); ``started``: the
        workers constructed already (default all): the others (a worker range's, waiting for a node with room) are
        probed first, so that no sample times out while its worker does not exist yet; ``pipeline``: ``async``
        (continuous), or ``sync`` or ``overlap`` (rounds, ``ROUND_LAG``); ``env_id``: for the line that gives up the
        last worker; ``learner_nodes``: the node of each learner rank, where its shards are pulled (``landing.py``)."""
        self.members = membership
        self.workers = membership.workers
        self.num_shards = num_shards
        self.submit = submit
        self.stage = stage
        self.timeout_s = timeout_s
        self.cond = threading.Condition(membership.lock)
        self.weights, self.plan = weights, plan  # the newest: every sample sent from now on acts with them
        self.inflight: dict[int, tuple[str, tuple, float]] = {}  # index -> ("sample" | "probe", refs, submitted at)
        self.queue: collections.deque[tuple[SampleInfo, tuple]] = collections.deque()
        self.landing = Landing(num_shards)  # batches whose shards are on their way to their learners' nodes
        self.landing.learners_at(learner_nodes or [])
        self.max_queued = max_queued
        self.parked: list[int] = []  # workers waiting for room in the queue
        self.needed = 0  # batches a waiting gather still needs: as many more may be sampling beside the bound
        self.in_hand = 0  # batches a waiting gather has taken so far (counted against the bound)
        # The newest update ``release`` has said is over (-1: the learner's initial weights are given; a new run's first
        # round is sampled with the workers' own while the learners start), and the batches gathered while an update
        # ran, by its number: they count against the bound until it is over, as if still queued.
        self.released = -1 if weights[0] is not None else -2
        self.held: dict[int, int] = {}
        self.recent_s: collections.deque[float] = collections.deque(maxlen=32)  # the last samples' times, sent to in
        self.timeouts: list[dict] = []
        self.resubmitted: list[int] = []
        self.retry_at: dict[int, float] = {}  # workers to probe again (Ray is restarting them), and when
        self.stale = 0
        self.error: BaseException | None = None
        self.env_id = env_id
        self.gave_up: tuple[int, BaseException | None] | None = None  # the last worker lost for good, and why
        self.lag = ROUND_LAG.get(pipeline)  # None: continuous
        self.round: Round | None = None
        self.asked = 0  # rounds the loop has asked for (the first is sampled at once: the workers start with it)
        self.rounds_in: dict[int, Round] = {}  # complete rounds not gathered yet, by number
        started = range(len(self.workers)) if started is None else started
        with self.cond:
            self.members.not_started([index for index in range(len(self.workers)) if index not in started])
            if self.lag is not None:
                first = {i for i in started if i not in self.members.evicted and i not in self.members.down}
                self.round = Round(0, first, weights, plan)
            for index in range(len(self.workers)):
                if index in self.members.evicted:  # stopped before sampling started: probed once replaced
                    continue
                if index in started and index not in self.members.down:
                    self._send(index)
                else:
                    self._probe(index)
        self.thread = threading.Thread(target=self._pump, name="distrl-sample-stream", daemon=True)
        self.thread.start()

    # --- the driver's side ----------------------------------------------------------------
    def set_weights(self, weights: list, plan: list | None, timeout_s: float) -> None:
        """Every sample sent from now on acts with ``weights`` (``[ObjectRef]``) and the league ``plan`` (None: the one
        it has), and is given up on after ``timeout_s`` (the sample bound follows the run's pace)."""
        with self.cond:
            self.weights, self.timeout_s = weights, timeout_s
            if plan is not None:
                self.plan = plan
            if weights[0] is None or self.lag is not None:  # a round's samples act with its own weights throughout
                return
            for index, (kind, _, _) in self.inflight.items():
                if kind == "sample":  # one call per running sample: the work per sample stays constant
                    self.members.abandon([self.stage(index, weights[0])])  # its reply is read (and dropped) by the pump

    def learners_at(self, rank_nodes: list[str]) -> None:
        """The learners run on ``rank_nodes`` from now on (rebuilt elsewhere): the next batches' shards go there."""
        with self.cond:
            self.landing.learners_at(rank_nodes)

    def release(self, update: int) -> None:
        """Update number ``update`` is over (its weights set already, when it made any): the batches gathered for the
        next one stop counting against the bound, and the workers parked behind them sample again."""
        with self.cond:
            self.released = max(self.released, update)
            for number in [n for n in self.held if n <= self.released]:
                del self.held[number]
            if self.lag is not None:
                self._next_round()
            else:
                self._unpark()
            self.cond.notify_all()

    def gather(
        self, count: int, min_version: int, timeout_s: float, hold_until: int | None = None, plan: list | None = None
    ) -> tuple:
        """The next ``count`` batches whose newest steps acted with version >= ``min_version`` (older ones dropped as
        stale), waiting at most ``timeout_s``; returns ``(SampleReport, shards of rank 0, ...)`` like
        ``SampleCoordinator.gather``.
        ``hold_until``: the number of the update that runs while this gather waits (None: none runs); until ``release``
        says it is over, no more is sampled for this gather than the bound allows, and what it took counts against
        it. ``plan``: the league's plan as the loop has it now, for the samples sent from now on. In rounds the gather
        asks for its round: a round starts once it is asked for and its weights are released."""
        if plan is not None:
            with self.cond:
                self.plan = plan
        if self.lag is not None:  # the first gather takes round 0; the one sent while update n runs, round n + 1
            return self._gather_round(0 if hold_until is None else hold_until + 1)
        taken: list[tuple[SampleInfo, tuple]] = []
        deadline = time.monotonic() + timeout_s
        with self.cond:
            try:
                while len(taken) < count:
                    if self.error is not None:
                        raise self.error
                    while self.queue and len(taken) < count:
                        info, shards = self.queue.popleft()
                        if batch_too_old(info, min_version):  # every step too old (some: the learner masks them)
                            self.stale += 1
                        else:
                            taken.append((info, shards))
                    self.in_hand = len(taken)
                    self.needed = 0 if self._holding(hold_until) else count
                    self._unpark()
                    if len(taken) < count:
                        if self.members.all_lost() and (taken or self.timeouts):
                            break  # what came in first (its timeouts counted); the next gather ends the run
                        self._check_workers_left()
                        if time.monotonic() >= deadline:
                            break
                        self.cond.wait(timeout=min(PUMP_WAIT_S, max(0.0, deadline - time.monotonic())))
            finally:
                if taken and self._holding(hold_until):
                    self.held[hold_until] = self.held.get(hold_until, 0) + len(taken)
                self.needed = self.in_hand = 0
            return self._hand_over(taken, min_version)

    def _gather_round(self, number: int) -> tuple:
        """Round ``number`` once it is complete, in worker order: ``(SampleReport, shards of rank 0, ...)`` as
        ``gather``. Gathers may run side by side (the next round's is sent before this one's is in): each takes its
        own."""
        with self.cond:
            self.asked = max(self.asked, number + 1)
            self._next_round()
            while number not in self.rounds_in:
                if self.error is not None:
                    raise self.error
                current = self.round
                if not self.timeouts and (current is None or current.number != number or not current.timeouts):
                    self._check_workers_left()  # a timeout is reported first, with the round it happened in
                self.cond.wait(timeout=PUMP_WAIT_S)
            done = self.rounds_in.pop(number)
            if not (
                done.batches or done.timeouts or self.timeouts
            ):  # nothing to hand over: with no worker left the run ends
                self._check_workers_left()
            return self._hand_over([done.batches[index] for index in sorted(done.batches)], timeouts=done.timeouts)

    def _hand_over(
        self, taken: list[tuple[SampleInfo, tuple]], min_version: int | None = None, timeouts: list | None = None
    ) -> tuple:
        """Under the lock: ``(SampleReport, shards of rank 0, ...)`` for the batches ``taken``, the report with what
        happened since the last (timeouts, resubmissions, stale batches, membership events); ``timeouts``: a round's
        own, reported with it."""
        report = SampleReport(
            [info for info, _ in taken],
            [*(timeouts or ()), *self.timeouts],
            self.resubmitted,
            self.stale,
            min_version=min_version,
            **self.members.events(),
        )
        self.timeouts, self.resubmitted, self.stale = [], [], 0
        return (report, *(tuple(shards[rank] for _, shards in taken) for rank in range(self.num_shards)))

    def _check_workers_left(self) -> None:
        """``WorkerFailure`` once no worker is left: the last one given up (its restarts spent, or its node gone)."""
        if not self.members.all_lost():
            return
        index, exc = self.gave_up if self.gave_up is not None else (len(self.workers) - 1, None)
        spent = self.members.budget.describe(index)
        last = f"; last: {str(exc).strip().splitlines()[0][:120]}" if exc is not None else ""
        raise WorkerFailure(
            f"worker-{index} ({self.env_id}) cannot go on: it is not restarted again (rollout.max_restarts="
            f"{self.members.budget.limit}){'; ' + spent if spent else ''}{last}"
        )

    def evict(self, index: int) -> None:
        """Worker ``index`` is being stopped for good (``SampleCoordinator.evict``): left out until ``replace``."""
        with self.cond:
            self.members.evict(index)
            entry = self.inflight.pop(index, None)
            if entry is not None:
                self.members.abandon(entry[1])
            self.retry_at.pop(index, None)
            if index in self.parked:
                self.parked.remove(index)

    def replace(self, index: int, worker) -> None:
        """``worker``: a new actor in evicted worker ``index``'s place: probed until it answers."""
        with self.cond:
            self.members.replace(index, worker)
            self._probe(index)

    def _holding(self, hold_until: int | None) -> bool:
        """Whether update ``hold_until``, running while a gather waits, is not over yet (``release``)."""
        return hold_until is not None and self.released < hold_until

    # --- the pump -------------------------------------------------------------------------
    def _send(self, index: int) -> None:
        weights, plan = (self.weights, self.plan) if self.round is None else (self.round.weights, self.round.plan)
        refs = self.submit(index, weights[0], plan[0] if plan else None)
        self.inflight[index] = ("sample", refs, time.monotonic())
        self.cond.notify_all()  # a pump waiting with nothing in flight waits for this

    def _probe(self, index: int) -> None:
        self.inflight[index] = ("probe", (self.workers[index].ready.remote(),), time.monotonic())
        self.cond.notify_all()

    def _pump(self) -> None:
        try:
            while True:  # for the coordinator's life: the run's teardown kills it
                with self.cond:
                    now = time.monotonic()
                    for index in [i for i, at in self.retry_at.items() if at <= now]:
                        del self.retry_at[index]
                        self._probe(index)
                    heads = {refs[0]: index for index, (_, refs, _) in self.inflight.items()}
                    waiting = [*heads, *self.landing.waiting()]
                    if not waiting:  # until a request is sent (a gather unparking the workers) or a retry is due
                        self._check_round()
                        self.cond.wait(timeout=RETRY_S if self.retry_at else PUMP_WAIT_S)
                        continue
                    wait_s = PARKED_WAIT_S if self.parked else PUMP_WAIT_S
                ready, rest = ray.wait(waiting, num_returns=1, timeout=wait_s)
                if ready and rest:  # everything else already in, in the same pass
                    ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                with self.cond:
                    for ref in ready:
                        if ref in heads:
                            entry = self.inflight.get(heads[ref])
                            if entry is not None and entry[1][0] == ref:  # not evicted since the wait began
                                self._arrived(heads[ref])
                        else:
                            batch = self.landing.pulled(ref)
                            if batch is not None:
                                self._batch_in(batch)
                    self._time_out()
                    self._check_round()
                    self.cond.notify_all()
                self.members.read_abandoned()
        except BaseException as exc:  # ours: the driver's next gather raises it
            with self.cond:
                self.error = exc
                self.cond.notify_all()

    def _arrived(self, index: int) -> None:
        kind, refs, since = self.inflight.pop(index)
        members = self.members
        try:
            result = ray.get(refs[0])
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError) as exc:
            if index in members.evicted:  # its replacement is probed once it exists
                return
            if isinstance(exc, ray.exceptions.ActorDiedError) and index not in members.budget.killed:
                members.lose(index)  # Ray will not restart it: given up (its restarts spent), or created never
                self.gave_up = (index, exc)
                return
            # It died and Ray is restarting it (a task that ran as distrl killed it for a restart fails as died)
            if kind == "sample":
                self.resubmitted.append(index)
            members.went_down(index)
            self.retry_at[index] = time.monotonic() + RETRY_S  # asked again shortly, not in a tight loop
            return
        incarnation = result.incarnation if kind == "sample" else result
        if not members.seen(index, incarnation):
            members.lose(index)  # its restarts are spent: killed for good
            self.gave_up = (index, None)
            return
        members.back(index)
        if kind == "sample":
            if self.round is not None:
                self.round.sampled.add(index)
            self.recent_s.append(time.monotonic() - since)
            members.sampled_on(index, result.node_id)
            batch = (result, refs[1:])
            if self.landing.land(batch, result.node_id, self.timeout_s):
                self._batch_in(batch)
        self.parked.append(index)
        self._unpark()

    def _batch_in(self, batch: tuple) -> None:
        """Every shard of ``batch`` is on its learner's node: it joins the queue, or its round."""
        if self.round is None:
            self.queue.append(batch)
        else:  # only the round sampling now has samples out: a round goes on without one only once it is dropped
            index = batch[0].worker_index
            self.round.batches[index] = batch
            self.round.done.add(index)

    def _unpark(self) -> None:
        """Send waiting workers their next request while the queue with the batches in copy and the samples in flight
        holds less than the bound (``max_queued``) plus what a waiting gather still needs: a gather never waits on a
        slow worker's sample while a fast one is parked, and no more is sampled ahead than the bound allows. In rounds:
        a member of the round sampling now whose batch is not in (Ray restarted it: its sample is sent again), or any
        worker that answers while no worker could join the round."""
        if self.round is not None:
            current = self.round
            if current.complete:
                return
            if not current.members:
                current.members.update(self.parked)
            for index in [i for i in self.parked if i in current.members and i not in current.sampled | current.done]:
                self.parked.remove(index)
                self._send(index)
            return
        room = self.max_queued + self.needed - self._outstanding()  # each request sent adds a sample on pace
        while self.parked and room > 0:
            self._send(self.parked.pop(0))
            room -= 1

    def _outstanding(self) -> int:
        """The queue, the batches in copy and the samples in flight on pace: one running past twice the median of the
        last samples' times and past ``SLOW_FLOOR_S`` (a slow worker's) does not hold up the others."""
        now = time.monotonic()
        pace = max(2 * statistics.median(self.recent_s), SLOW_FLOOR_S) if self.recent_s else float("inf")
        sampling = sum(1 for kind, _, since in self.inflight.values() if kind == "sample" and now - since <= pace)
        return len(self.queue) + len(self.landing) + sampling + self.in_hand + sum(self.held.values())

    def _time_out(self) -> None:
        now = time.monotonic()
        for index, (kind, refs, since) in list(self.inflight.items()):
            if kind == "sample" and now - since > self.timeout_s:
                # in rounds the sample was the round sampling now's: its gather reports it, not a later round's
                current = self.round
                timeouts = current.timeouts if current is not None and not current.complete else self.timeouts
                timeouts.append({"worker": index, "waited_s": round(now - since, 1)})
                self.members.abandon(refs)
                self.members.budget.timed_out(index)  # killed for a restart, or for good once its restarts are spent
                self._probe(index)
                if self.round is not None:  # the round goes on without its batch
                    self.round.done.add(index)

    # --- rounds (pipeline sync, overlap) ------------------------------------------------------
    def _check_round(self) -> None:
        """The round sampling now is complete once each member's batch is in or the round went on without it: timed
        out, lost, evicted, or down (Ray restarting it) with its node gone or past the sample bound since the round
        started. A complete round waits to be gathered; the next one starts once its weights are released."""
        current = self.round
        if current is None or current.complete:
            return
        members, now = self.members, time.monotonic()
        late = now > current.started_at + self.timeout_s
        for index in current.members - current.done:
            sampling = self.inflight.get(index, ("",))[0] == "sample" or index in current.sampled
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
        worker answering joins it."""
        current = self.round
        asked = self.asked > current.number + 1
        if not current.complete or not asked or self.released < current.number - self.lag:
            return
        members = self.members
        restarting = {  # killed by distrl for a restart (a timeout): waited for, sent its sample once it answers
            index
            for index, (kind, _, _) in self.inflight.items()
            if kind == "probe" and index in members.answered and index not in members.down | members.lost
        }
        self.round = Round(current.number + 1, set(self.parked) | restarting, self.weights, self.plan)
        for index in list(self.parked):
            self.parked.remove(index)
            self._send(index)
