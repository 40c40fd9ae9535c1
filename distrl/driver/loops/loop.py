"""The training loop of every pipeline: sample -> update -> record.

The coordinator's sampler (``distrl/rollout/stream.py``) hands the loop the batches of its next update: a round
(``sync``: lag 0; ``overlap``: lag 1) or whichever batches are in within ``rollout.max_policy_lag`` (``async``). The
loop asks for the next update's batches while the update before it runs (async also queues that update on the learner
behind it); once an update is over it releases the weights to the sampler and records the iteration. Sample Factory
keeps sync and async on one path the same way.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import ray

from distrl.common.errors import RunStalled
from distrl.common.log import get_logger
from distrl.data import staleness
from distrl.data.messages import SampleReport
from distrl.driver.loops.record import IterationRecord
from distrl.driver.loops.updates import LearnerUpdates, PendingSamples
from distrl.driver.roster import Roster
from distrl.rollout.stream import ROUND_LAG

if TYPE_CHECKING:
    from distrl.driver.loops.host import LoopObserver, RunHost

log = get_logger("driver")


class TrainingLoop:
    def __init__(self, driver: RunHost):
        self.driver = driver
        self.config = driver.config
        self.actors = driver.actors
        self.counters = driver.counters
        self.bounds = driver.bounds
        self.observers: list[LoopObserver] = driver.observers
        self.updates = LearnerUpdates(driver)
        self.roster: Roster | None = None  # the workers answering, as the driver last heard (``begin`` starts it)
        self.sampling = False

    def begin(self, new_run: bool) -> None:
        """Start sampling as soon as the workers are up: a new run's workers hold the learner's initial weights, so
        they sample while the learners start (a resumed run's start on the learner's restored weights, ``train``)."""
        self.roster = Roster(self.config.rollout, self.counters, self.actors.started, self._where, self._placed)
        if new_run:
            self._start([None])

    def train(self, launch: float, loop_start: float, loop_steps_start: int) -> str:
        """Train until a stop rule fires (the record says when); returns the stop reason."""
        record = IterationRecord(self.driver, self.roster, launch, loop_start, loop_steps_start)
        try:
            return self._iterate(record)
        finally:
            record.close()

    def _iterate(self, record: IterationRecord) -> str:
        weights = self.actors.learners[0].get_weights.remote()
        for observer in self.observers:
            observer.start(weights)
        if self.sampling:  # every sample from the second round on acts with the learner's weights, sent as such
            self._release(-1, weights)
        else:  # a resumed run: the workers start on the learner's restored weights
            self._start([weights])
        version = ray.get(self.actors.learners[0].policy_version.remote())
        samples = self._gather(version)
        update = self.updates.launch(samples)  # a gather that gets none makes no update (the learner returns at once)
        number = 0  # the update running: each one's batches are gathered while the one before it runs
        # async queues the next update on the learner behind the one running, so it starts the moment that one ends;
        # a round's update waits for its round anyway, and is sent once the update before it is recorded (so the
        # learner's state at a stop is the state the run's counters describe)
        queue_ahead = self.config.rollout.pipeline not in ROUND_LAG
        while True:
            iter_start, cpu_start = time.perf_counter(), time.process_time()
            # rounds: the next round is asked for at once, so it starts the moment this one is in
            following = None if queue_ahead else self._gather(version, hold_until=number)
            report = self._await_report(samples.report)
            stop = self.roster.follow(report)
            if stop is not None:
                return stop
            if following is None:  # async: the next batches are checked against the version this update makes
                following = self._gather(version + (1 if report.infos else 0), hold_until=number)
            queued = self.updates.launch(following, ahead=2) if queue_ahead else None
            result, update, restarted = self.updates.wait(update, samples)  # the workers sample on meanwhile
            if restarted and queued is not None:  # the queued update went to the learners that died
                queued = self.updates.launch(following, ahead=2)
            version = result.version  # unchanged when every batch was lost with its node
            self._release(number, update.weights if report.infos else None)
            if report.infos:
                self.driver.snapshots.offer(update.state, result.version)
                reason = record(report.infos, result, update.weights, iter_start, cpu_start)
                if reason is not None:
                    return reason
            samples, number = following, number + 1
            update = queued if queued is not None else self.updates.launch(following)

    # --- the sampler, through the coordinator ---------------------------------------------------
    def _start(self, weights: list) -> None:
        # async: the batches sampled while the learner updates, whole ones (the epsilon: 0.3 x 10 is 2.9999999999999996)
        ahead = math.floor(self.config.batches_per_update * self.config.rollout.updates_ahead + 1e-9)
        start = self.actors.coordinator.start_stream.remote(
            weights, self._plans(), self.bounds.sample_s(), ahead, self.actors.started, self.config.rollout.pipeline
        )
        ray.get(start)
        self.sampling = True

    def _gather(self, version: int, hold_until: int | None = None) -> PendingSamples:
        """The next update's batches, for the learner at ``version`` once the update running is over (``hold_until``:
        its number); async leaves out what is older than ``rollout.max_policy_lag`` allows."""
        refs = self.actors.coordinator.gather.options(num_returns=1 + self.actors.world_size).remote(
            self.config.batches_per_update,
            staleness.min_version(version, self.config.rollout.max_policy_lag),
            self.bounds.sample_s(),
            hold_until=hold_until,
            plan=self._plans(),
        )
        return PendingSamples(refs[0], refs[1:])

    def _release(self, number: int, weights) -> None:
        """Update ``number`` is over: the samples sent from now on act with its ``weights`` (None: it made none). The
        league's plan went with this iteration's gather: nothing has changed it since (the record comes after)."""
        self.actors.coordinator.release.remote(
            number, [weights] if weights is not None else None, None, self.bounds.sample_s()
        )

    def _plans(self) -> list | None:
        """``[plan]`` of the observer that sends workers one (a league's matchmaking), or None."""
        plans = [plan for plan in (o.worker_plan() for o in self.observers) if plan is not None]
        return plans[:1] or None

    def _await_report(self, report_ref) -> SampleReport:
        """The batches' report (their infos, timeouts); warns of each timeout."""
        bound = 2 * self.bounds.sample_s() + 60  # the coordinator bounds its own waits; this bounds the coordinator
        try:
            sample_report = ray.get(report_ref, timeout=bound)
        except ray.exceptions.GetTimeoutError:
            raise RunStalled(f"the sample coordinator did not answer within {bound:.0f} s") from None
        self.counters.stale_batches += sample_report.stale_batches
        for timeout in sample_report.timeouts:
            self.counters.worker_timeouts += 1
            log.warning(
                f"worker-{timeout['worker']} ({self.config.env.id}) returned no sample within "
                f"{timeout['waited_s']:g} s (rollout.sample_timeout_s): killed for a restart, and this "
                f"iteration goes on without its batch (worker_timeouts {self.counters.worker_timeouts})"
            )
        for info in sample_report.infos:
            self.bounds.saw_sample(info.sample_s)
        return sample_report

    # --- who is in the run -----------------------------------------------------------------
    def _where(self, index: int) -> str:
        spot = self.actors.placement.get(f"worker-{index}", {})
        return f"node {spot.get('node_ip', '?')} ({str(spot.get('node_id', '?'))[:8]})"

    def _placed(self, index: int) -> bool:
        """Record where worker ``index`` runs now (Ray may have restarted it on another node); True: new to the run."""
        joined = f"worker-{index}" not in self.actors.placement  # a range's worker, started on a node that joined
        self.actors.worker_joined(index)
        self.driver.write_placement()
        return joined
