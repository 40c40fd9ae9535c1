"""The asynchronous loop (``rollout.pipeline: async``): no worker waits for another, sampling and learning overlap.

The coordinator keeps every worker sampling (``distrl/rollout/stream.py``): a worker's next rollout
starts the moment its last one is in, with the newest weights the coordinator has. The learner updates
whenever ``rollout.samples_per_update`` transitions are in, from whichever workers delivered them:
while it updates, the workers fill the queue for the next update. Every batch carries the policy version
that acted; one older than ``rollout.max_policy_lag`` versions behind the learner at its update is
dropped and counted (``stale_batches``), never trained on. Off-policy batches inside the bound are
corrected by the algorithm (``algo: appo``: V-trace targets), or trained as PPO does with lag 1.
"""

from __future__ import annotations

import time

import ray

from distrl.common.log import get_logger
from distrl.driver.loops.base import TrainingLoop

log = get_logger("driver")


class AsyncLoop(TrainingLoop):
    def begin(self, new_run: bool) -> None:
        # A new run's workers hold the learner's initial weights: they start sampling while the learners start.
        self.stream_started = new_run
        self.answering = set(self.actors.started)  # workers that answer now (as the driver last heard)
        self.below_min_since: float | None = None
        if new_run:
            self._start_stream([None])

    def _start_stream(self, weights: list) -> None:
        ray.get(self.actors.coordinator.start_stream.remote(weights, self.worker_plans(), self.bounds.sample_s(),
                                                            self._batches_per_update(), self.actors.started))  # fmt: skip

    def _batches_per_update(self) -> int:
        return self.config.update_size // (self.config.env.num_envs_per_worker * self.config.rollout.rollout_length)

    def _gather(self, min_version: int):
        world = self.actors.world_size
        return self.actors.coordinator.gather.options(num_returns=1 + world).remote(self._batches_per_update(), min_version,
                                                                                   self.bounds.sample_s())  # fmt: skip

    # --- who is in the run -----------------------------------------------------------------
    def _where(self, index: int) -> str:
        spot = self.actors.placement.get(f"worker-{index}", {})
        return f"node {spot.get('node_ip', '?')} ({str(spot.get('node_id', '?'))[:8]})"

    def _follow_membership(self, report) -> str | None:
        """Say once when a worker stops answering, comes back, joins or is lost for good; the stop reason when fewer
        than the range's min have answered for longer than ``rollout.min_workers_wait_s``."""
        for index in report.workers_down:
            self.answering.discard(index)
            self.counters.workers_lost += 1
            log.warning(f"worker-{index} on {self._where(index)} stopped answering (its process or node is gone); the "
                        f"run goes on with {len(self.answering)} workers, and takes it back once Ray restarts it")  # fmt: skip
        for index in report.workers_back:
            joined = f"worker-{index}" not in self.actors.placement  # a range's worker, started on a node that joined
            self.actors.worker_joined(index)  # where it runs now (Ray may have restarted it on another node)
            self.driver.write_placement()
            self.answering.add(index)
            log.info(f"worker-{index} {'joined' if joined else 'is back'} on {self._where(index)} "
                     f"({len(self.answering)} workers)")  # fmt: skip
        for index in report.workers_lost:
            if index in self.lost_for_good:
                continue
            self.lost_for_good.add(index)
            if index in self.answering:  # not counted yet: it had not stopped answering before
                self.counters.workers_lost += 1
            self.answering.discard(index)
            log.warning(f"worker-{index} on {self._where(index)} is lost for good (Ray will not restart it); the run "
                        f"goes on with {len(self.answering)} workers")  # fmt: skip
        rollout = self.config.rollout
        if len(self.answering) >= rollout.min_workers:
            self.below_min_since = None
            return None
        now = time.monotonic()
        self.below_min_since = self.below_min_since or now
        if len(self.lost_for_good) == rollout.max_workers or now - self.below_min_since > rollout.min_workers_wait_s:
            log.error(f"only {len(self.answering)} of the {rollout.min_workers} rollout workers the run needs answer, "
                      f"for {now - self.below_min_since:.0f} s (rollout.min_workers_wait_s={rollout.min_workers_wait_s:g}); "
                      "stopping with a final checkpoint")  # fmt: skip
            return "too_few_workers"
        return None

    def iterate(self) -> str:
        cfg = self.config
        self.lost_for_good: set[int] = set()
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
            report = self.await_report(samples[0])
            self.counters.stale_batches += report.stale_batches
            stop = self._follow_membership(report)
            if stop is not None:
                return stop
            if not report.infos:
                samples = self._gather(version - lag)
                continue
            update = self.launch_update(samples)
            learner_metrics, update, _ = self.await_update(update, samples)  # the workers sample on meanwhile
            version = learner_metrics["learner_version"]  # unchanged when every batch was lost with its node
            weights_ref = update[1]
            self.driver.snapshots.offer(update[2])
            self.actors.coordinator.set_stream_weights.remote([weights_ref], self.worker_plans(), self.bounds.sample_s())
            # Taken now, not while the update ran: the batches sampled during it (policy lag 1 at the next update)
            # are in the queue already, and the ones after them act with the weights just made.
            samples = self._gather(version - lag)
            learner_metrics["workers_active"] = len(self.answering)
            reason = self.record(report.infos, learner_metrics, weights_ref, iter_start, cpu_start)
            if reason is not None:
                return reason
