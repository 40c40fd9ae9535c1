"""The pump: a thread that sends the workers their samples and waits on what comes back, for either way of handing
batches to the loop (``rounds.py``, ``continuous.py``).

It keeps the samples in flight (and the probes of workers Ray is restarting), and takes each reply as it comes: a
sample's batch is pulled to its learners' nodes (``landing.py``) and handed over once there; a worker that died is
probed until it answers (a round's sample is sent again); a sample past the bound (a stuck env) gets its worker
killed for a restart and counted as a timeout; a worker given up (``restarts.py``) is left out, and the last one's
loss ends the run with ``WorkerFailure``. Which worker samples next, and with which weights, is the handover's
choice: the pump asks it (``free``, ``weights``) and tells it (``sampled``, ``batch_in``, ``timed_out``).
"""

from __future__ import annotations

import collections
import statistics
import threading
import time

import ray

from distrl.common.errors import EnvFailure
from distrl.data.messages import SampleInfo, SampleReport
from distrl.rollout.landing import Landing
from distrl.rollout.membership import Membership

PUMP_WAIT_S = 0.5  # the pump's longest sleep: how soon it notices a timeout
# While a worker is parked, a gather may send it a request the pump's wait does not include yet: the pump looks again
# this often, so that sample's return is noticed at once rather than a whole PUMP_WAIT_S later.
PARKED_WAIT_S = 0.01
RETRY_S = 0.2  # how soon a worker Ray is restarting is asked again whether it answers
SLOW_FLOOR_S = 0.5  # a sample is a slow worker's only past this too: on short rollouts a scheduling hiccup is not one


class WorkerFailure(EnvFailure):
    """No rollout worker can go on: the last one died or timed out more often than ``rollout.max_restarts``
    allows."""


class Notes:
    """What happened since the last report (timeouts, samples sent again, stale batches), handed over once with the
    next batches as a ``SampleReport``."""

    def __init__(self, members: Membership, num_shards: int):
        self.members, self.num_shards = members, num_shards
        self.timeouts: list[dict] = []
        self.resubmitted: list[int] = []
        self.stale = 0

    def hand_over(
        self, taken: list[tuple[SampleInfo, tuple]], min_version: int | None = None, timeouts: list | None = None
    ) -> tuple:
        """Under the lock: ``(SampleReport, shards of rank 0, ...)`` for the batches ``taken``, the report with what
        happened since the last (and membership's events); ``timeouts``: a round's own, reported with it."""
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


class Pump:
    def __init__(
        self,
        members: Membership,
        cond: threading.Condition,
        notes: Notes,
        submit,
        timeout_s: float,
        weights: list,
        plan: list | None,
        learner_nodes: list[str],
        env_id: str,
    ):
        """``submit(index, weights_ref, plan_ref) -> refs``: a worker's sample task (``(info, shard_0, ...)`` refs);
        ``timeout_s``: the sample bound; ``weights``, ``plan``: the newest (``[ObjectRef]``; ``[None]``: the workers'
        own); ``learner_nodes``: each learner rank's node (``landing.py``)."""
        self.members, self.cond, self.notes = members, cond, notes
        self.submit, self.env_id = submit, env_id
        self.timeout_s = timeout_s
        self.weights, self.plan = weights, plan  # the newest, set by the loop's release
        self.handover = None  # Rounds or Continuous: who samples next, with which weights, and where batches go
        self.inflight: dict[int, tuple[str, tuple, float]] = {}  # index -> ("sample" | "probe", refs, submitted at)
        self.retry_at: dict[int, float] = {}  # workers to probe again (Ray is restarting them), and when
        self.recent_s: collections.deque[float] = collections.deque(maxlen=32)  # the last samples' times
        self.landing = Landing()  # batches whose shards are on their way to their learners' nodes
        self.landing.learners_at(learner_nodes)
        self.error: BaseException | None = None  # the pump's own failure: the next gather raises it
        self.gave_up: tuple[int, BaseException | None] | None = None  # the last worker lost for good, and why
        self.thread = threading.Thread(target=self._run, name="distrl-sample-pump", daemon=True)

    # --- what the handover asks -------------------------------------------------------------------
    def send(self, index: int) -> None:
        """Under the lock: worker ``index`` samples now, with the weights the handover gives it."""
        weights, plan = self.handover.weights()
        refs = self.submit(index, weights[0], plan[0] if plan else None)
        self.inflight[index] = ("sample", refs, time.monotonic())
        self.cond.notify_all()  # a pump waiting with nothing in flight waits for this

    def probe(self, index: int) -> None:
        self.inflight[index] = ("probe", (self.members.workers[index].ready.remote(),), time.monotonic())
        self.cond.notify_all()

    def sampling_on_pace(self) -> int:
        """Samples in flight, less those running past twice the median of the last samples' times and past
        ``SLOW_FLOOR_S`` (a slow worker's: it does not hold up the others)."""
        now = time.monotonic()
        pace = max(2 * statistics.median(self.recent_s), SLOW_FLOOR_S) if self.recent_s else float("inf")
        return sum(1 for kind, _, since in self.inflight.values() if kind == "sample" and now - since <= pace)

    def restarting(self) -> set[int]:
        """Workers distrl killed for a restart (a timeout) that answered before: a round waits for them."""
        members = self.members
        return {
            index
            for index, (kind, _, _) in self.inflight.items()
            if kind == "probe" and index in members.answered and index not in members.down | members.lost
        }

    def drop(self, index: int) -> None:
        """Worker ``index`` is evicted: what it has in flight is abandoned, and it is not probed again."""
        entry = self.inflight.pop(index, None)
        if entry is not None:
            self.members.abandon(entry[1])
        self.retry_at.pop(index, None)

    def check_workers_left(self) -> None:
        """``WorkerFailure`` once no worker is left: the last one given up (its restarts spent, or its node gone)."""
        members = self.members
        if not members.all_lost():
            return
        index, exc = self.gave_up if self.gave_up is not None else (len(members.workers) - 1, None)
        spent = members.budget.describe(index)
        last = f"; last: {str(exc).strip().splitlines()[0][:120]}" if exc is not None else ""
        raise WorkerFailure(
            f"worker-{index} ({self.env_id}) cannot go on: it is not restarted again (rollout.max_restarts="
            f"{members.budget.limit}){'; ' + spent if spent else ''}{last}"
        )

    # --- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:  # for the coordinator's life: the run's teardown kills it
                with self.cond:
                    now = time.monotonic()
                    for index in [i for i, at in self.retry_at.items() if at <= now]:
                        del self.retry_at[index]
                        self.probe(index)
                    heads = {refs[0]: index for index, (_, refs, _) in self.inflight.items()}
                    waiting = [*heads, *self.landing.waiting()]
                    if not waiting:  # until a request is sent (a gather unparking the workers) or a retry is due
                        self.handover.tick()
                        self.cond.wait(timeout=RETRY_S if self.retry_at else PUMP_WAIT_S)
                        continue
                    wait_s = PARKED_WAIT_S if self.handover.parked else PUMP_WAIT_S
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
                                self.handover.batch_in(batch)
                    self._time_out()
                    self.handover.tick()
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
                self.notes.resubmitted.append(index)
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
            self.handover.sampled(index)
            self.recent_s.append(time.monotonic() - since)
            members.sampled_on(index, result.node_id)
            batch = (result, refs[1:])
            if self.landing.land(batch, result.node_id, self.timeout_s):
                self.handover.batch_in(batch)
        self.handover.free(index)

    def _time_out(self) -> None:
        now = time.monotonic()
        for index, (kind, refs, since) in list(self.inflight.items()):
            if kind == "sample" and now - since > self.timeout_s:
                self.handover.timed_out(index, {"worker": index, "waited_s": round(now - since, 1)})
                self.members.abandon(refs)
                self.members.budget.timed_out(index)  # killed for a restart, or for good once its restarts are spent
                self.probe(index)
