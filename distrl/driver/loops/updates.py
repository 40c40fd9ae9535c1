"""The learners' update: learner r is sent the batches' report and its own shards, rank 0 answers with the new
weights (and, when due, a snapshot of its whole state); a learner that dies or passes the update bound is rebuilt
from the newest state the driver holds and the update is run again."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import ray

from distrl.common.errors import RunStalled
from distrl.common.log import get_logger
from distrl.data.messages import UpdateResult

if TYPE_CHECKING:
    from distrl.driver.loops.host import RunHost

log = get_logger("driver")


class PendingSamples(NamedTuple):
    """A gather sent to the coordinator: refs to its report and, for each learner rank, that rank's shards."""

    report: ray.ObjectRef  # SampleReport
    shards: list  # per rank: the ref to its tuple of shard refs


class PendingUpdate(NamedTuple):
    """An update sent to the learners: refs to what they will answer."""

    result: ray.ObjectRef  # rank 0's UpdateResult
    weights: ray.ObjectRef  # the new weights (one object every worker reads)
    state: ray.ObjectRef | None  # rank 0's full state, when this update sends a snapshot (``snapshot_due``)
    others: list  # the other ranks' UpdateResults


class LearnerUpdates:
    def __init__(self, driver: RunHost):
        self.driver = driver
        self.config = driver.config
        self.actors = driver.actors
        self.counters = driver.counters
        self.bounds = driver.bounds
        self._snapshot_sent_at: float | None = None  # when an update last sent learner-0's state (snapshot_every_s)

    def launch(self, samples: PendingSamples, ahead: int = 1) -> PendingUpdate:
        """Learner r gets the batches' report and its own shards (``ahead``: how many updates from now it is recorded,
        2 for one queued behind the update running)."""
        learners = self.actors.learners
        snapshot = self._snapshot_due(ahead)
        lead = (
            learners[0]
            .update_refs_and_snapshot.options(num_returns=3)
            .remote(samples.report, samples.shards[0], snapshot)
        )
        others = [
            learner.update_refs.remote(samples.report, samples.shards[rank])
            for rank, learner in enumerate(learners[1:], start=1)
        ]
        return PendingUpdate(lead[0], lead[1], lead[2] if snapshot else None, others)

    def _snapshot_due(self, ahead: int) -> bool:
        """Whether this update sends learner-0's full state to the driver: every update with
        ``learner.snapshot_every_s`` 0; else the first, one that many seconds after the last sent, and one whose row
        may write a checkpoint (so that checkpoint holds the state its counters describe). A queued update's row is
        the one after next, or the next where the update running makes none (its batches all stale or lost): both
        count."""
        every_s = self.config.learner.snapshot_every_s
        if every_s == 0:
            return True
        every_it = self.config.checkpoint.every_iterations
        checkpoint = every_it and any((self.counters.iteration + n) % every_it == 0 for n in range(1, ahead + 1))
        now, last = time.monotonic(), self._snapshot_sent_at
        if last is None or now - last >= every_s or checkpoint:
            self._snapshot_sent_at = now
            return True
        return False

    def wait(self, update: PendingUpdate, samples: PendingSamples) -> tuple[UpdateResult, PendingUpdate, bool]:
        """Rank 0's update result; a learner that dies or passes the update bound is rebuilt and the update run
        again."""
        restarted = False
        while True:
            bound = self.bounds.update_s()
            try:
                result: UpdateResult = ray.get(update.result, timeout=bound)
                if update.others:  # the bytes each rank fetched: its shards only
                    others = ray.get(update.others, timeout=bound)
                    result.learner_batch_bytes = max(
                        [result.learner_batch_bytes] + [o.learner_batch_bytes for o in others]
                    )
                if result.updated:
                    self.bounds.saw_update(result.learn_s)
                return result, update, restarted
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                limit = self.config.learner.max_restarts
                timed_out = isinstance(exc, ray.exceptions.GetTimeoutError)
                cause = (
                    f"no update within {bound:.0f} s (learner.update_timeout_s)"
                    if timed_out
                    else str(exc).strip().splitlines()[0][:200]
                )
                if self.counters.learner_restarts >= limit:
                    if timed_out:
                        raise RunStalled(f"learner: {cause}, and learner.max_restarts={limit} is spent") from None
                    raise
                self.counters.learner_restarts += 1
                snapshots = self.driver.snapshots
                behind = snapshots.behind()
                since = (
                    f", {behind} update{'s' if behind > 1 else ''} older than the learner's last: their learning is "
                    f"lost (learner.snapshot_every_s={self.config.learner.snapshot_every_s:g})"
                    if behind
                    else ""
                )
                log.warning(
                    f"a learner {'stalled' if timed_out else 'died'} ({cause}); restarting the learners from the "
                    f"newest state the driver holds{since} (restart {self.counters.learner_restarts} of "
                    f"{limit})"
                )
                self.actors.restart_learners(snapshots.newest_ref(), self.counters.iteration)
                update = self.launch(samples)
                restarted = True
