"""The asynchronous loop (``rollout.pipeline: async``): no worker waits for another, sampling and learning overlap.

The coordinator keeps every worker sampling (``distrl/rollout/stream.py``): a worker's next rollout
starts the moment its last one is in, with the newest weights the coordinator has. The learner updates
whenever ``rollout.samples_per_update`` transitions are in, from whichever workers delivered them:
while it updates, the workers sample the next update's batches and no more (policy lag at most 1; a fraction or a
multiple with ``rollout.updates_ahead``), and its new weights reach the samples running at once. Every batch carries
the policy version it started with; one older than
``rollout.max_policy_lag`` versions behind the learner at its update is dropped and counted (``stale_batches``),
never trained on. Off-policy batches inside the bound are trained by the algorithm: PPO with ``ppo.proximal:
learner`` (the clipped ratio from the learner's policy) or ``algo: appo`` (V-trace targets).
"""

from __future__ import annotations

import math
import time

import ray

from distrl.common.log import get_logger
from distrl.driver.loops.base import TrainingLoop

log = get_logger("driver")


class AsyncLoop(TrainingLoop):
    def begin(self, new_run: bool) -> None:
        # A new run's workers hold the learner's initial weights: they start sampling while the learners start.
        self.stream_started = new_run
        self.answering = set(self.actors.started)
        if new_run:
            self._start_stream([None])

    def _start_stream(self, weights: list) -> None:
        # Batches sampled while the learner updates, whole ones (the epsilon: 0.3 x 10 is 2.9999999999999996)
        ahead = math.floor(self._batches_per_update() * self.config.rollout.updates_ahead + 1e-9)
        ray.get(self.actors.coordinator.start_stream.remote(weights, self.worker_plans(), self.bounds.sample_s(), ahead,
                                                            self.actors.started))  # fmt: skip

    def _batches_per_update(self) -> int:
        return self.config.update_size // (self.config.env.num_envs_per_worker * self.config.rollout.rollout_length)

    def _gather(self, min_version: int, weights_ref=None):
        """The next update's batches (refs); ``weights_ref``: the newest weights, for the samples this gather sends."""
        world = self.actors.world_size
        weights = () if weights_ref is None else ([weights_ref], self.worker_plans())
        return self.actors.coordinator.gather.options(num_returns=1 + world).remote(
            self._batches_per_update(), min_version, self.bounds.sample_s(), *weights)

    def iterate(self) -> str:
        cfg = self.config
        weights_ref = self.actors.learners[0].get_weights.remote()
        for observer in self.observers:
            observer.start(weights_ref)
        version = ray.get(self.actors.learners[0].policy_version.remote())
        if not self.stream_started:  # a resumed run: the workers start on the learner's restored weights
            self._start_stream([weights_ref])
        lag = cfg.rollout.max_policy_lag
        samples = self._gather(version - lag)
        while True:
            iter_start, cpu_start = time.perf_counter(), time.process_time()
            # Sent before the report is read: the learner starts the moment the batches are in. A gather that got none
            # makes no update (the learner returns at once, its version unchanged).
            update = self.launch_update(samples)
            report = self.await_report(samples[0])
            self.counters.stale_batches += report.stale_batches
            stop = self.follow_membership(report)
            if stop is not None:
                return stop
            learner_metrics, update, _ = self.await_update(update, samples)  # the workers sample on meanwhile
            version = learner_metrics["learner_version"]  # unchanged when every batch was lost with its node
            if not report.infos:
                samples = self._gather(version - lag)
                continue
            weights_ref = update[1]
            self.driver.snapshots.offer(update[2])
            # The new weights go with the next gather, in one call: the workers it unparks sample with them. The batches
            # sampled during the update (policy lag 1 at the next update) are in the queue already.
            samples = self._gather(version - lag, weights_ref)
            learner_metrics["workers_active"] = len(self.answering)
            reason = self.record(report.infos, learner_metrics, weights_ref, iter_start, cpu_start)
            if reason is not None:
                return reason
