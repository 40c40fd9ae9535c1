"""The asynchronous loop (``rollout.pipeline: async``): no worker waits for another, sampling and learning overlap.

The coordinator keeps every worker sampling (``distrl/rollout/stream.py``): a worker's next rollout
starts the moment its last one is in, with the newest weights the coordinator has. The learner updates
whenever ``rollout.samples_per_update`` transitions are in, from whichever workers delivered them:
while it updates, the workers sample the next update's batches and no more (policy lag at most 1; a fraction or a
multiple with ``rollout.updates_ahead``), and its new weights reach the samples running at once. Every batch carries
the policy version of each step; steps more than ``rollout.max_policy_lag`` versions behind the learner at its update
are left out of it (``stale_steps``), and a batch with no newer step is dropped and counted (``stale_batches``), never
trained on. Off-policy batches inside the bound are trained by the algorithm: PPO with ``ppo.proximal: learner`` (the
clipped ratio from the learner's policy) or ``algo: appo`` (V-trace targets).
"""

from __future__ import annotations

import math
import time

import ray

from distrl.common.log import get_logger
from distrl.data import staleness
from distrl.driver.loops.base import TrainingLoop

log = get_logger("driver")


class AsyncLoop(TrainingLoop):
    def begin(self, new_run: bool) -> None:
        # A new run's workers hold the learner's initial weights: they start sampling while the learners start.
        self.stream_started = new_run
        self.start_roster()
        if new_run:
            self._start_stream([None])

    def _start_stream(self, weights: list) -> None:
        # Batches sampled while the learner updates, whole ones (the epsilon: 0.3 x 10 is 2.9999999999999996)
        ahead = math.floor(self.config.batches_per_update * self.config.rollout.updates_ahead + 1e-9)
        ray.get(
            self.actors.coordinator.start_stream.remote(
                weights, self.worker_plans(), self.bounds.sample_s(), ahead, self.actors.started
            )
        )

    def _gather(self, min_version: int, hold_until: int | None = None):
        """The next update's batches (refs); ``hold_until``: the number of the update running meanwhile."""
        world = self.actors.world_size
        return self.actors.coordinator.gather.options(num_returns=1 + world).remote(
            self.config.batches_per_update, min_version, self.bounds.sample_s(), hold_until=hold_until
        )

    def iterate(self) -> str:
        cfg = self.config
        weights_ref = self.actors.learners[0].get_weights.remote()
        for observer in self.observers:
            observer.start(weights_ref)
        version = ray.get(self.actors.learners[0].policy_version.remote())
        if not self.stream_started:  # a resumed run: the workers start on the learner's restored weights
            self._start_stream([weights_ref])
        lag = cfg.rollout.max_policy_lag
        samples = self._gather(staleness.min_version(version, lag))
        update = self.launch_update(samples)  # a gather that gets none makes no update (the learner returns at once)
        number = 0  # the update running: each one's batches are gathered while the one before it runs
        while True:
            iter_start, cpu_start = time.perf_counter(), time.process_time()
            report = self.await_report(samples[0])
            self.counters.stale_batches += report.stale_batches
            stop = self.roster.follow(report)
            if stop is not None:
                return stop
            # The next update's batches are taken as they come in while this update runs, and the next update is queued
            # on the learner behind it: it starts the moment this one ends, with no round trip through the driver
            # (measured: 14 ms of a 140 ms update on Pendulum). Their versions are checked against the version this
            # update makes; a batch that is lost with its node instead only makes the check one version stricter this
            # once.
            made = version + (1 if report.infos else 0)  # the version this update makes
            following = self._gather(staleness.min_version(made, lag), hold_until=number)
            queued = self.launch_update(following, ahead=2)
            result, update, restarted = self.await_update(update, samples)  # the workers sample on meanwhile
            if restarted:  # the queued update went to the learners that died
                queued = self.launch_update(following, ahead=2)
            version = result.version  # unchanged when every batch was lost with its node
            # The new weights for the samples sent from now on; the workers parked behind the next update's batches go.
            self.actors.coordinator.release.remote(
                number, [update[1]] if report.infos else None, self.worker_plans(), self.bounds.sample_s()
            )
            if report.infos:
                weights_ref = update[1]
                self.driver.snapshots.offer(update[2], result.version)
                reason = self.record(report.infos, result, weights_ref, iter_start, cpu_start)
                if reason is not None:
                    return reason
            samples, update, number = following, queued, number + 1
