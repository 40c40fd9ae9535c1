"""The lockstep loop (``rollout.pipeline: sync`` and ``overlap``): rounds of every worker's batch, then an update.

Each round the coordinator sends every worker a sample request and ``collect`` waits for all of
them, each for at most the sample bound (``rollout.sample_timeout_s``); the learners then update
on the round's batches. ``sync`` queues the next round on the new weights, so workers start the
moment the update lands (policy lag 0); ``overlap`` sends it as soon as a round is collected, with
the weights the learner is updating away from, so workers sample while the learner learns (lag 1).
Either way a round waits for its slowest worker, but not for one whose node is gone: the coordinator
leaves it out of rounds until Ray restarts it where there is room (said once each way, as in async).
"""

from __future__ import annotations

import time

from distrl.driver.loops.base import TrainingLoop


class LockstepLoop(TrainingLoop):
    def begin(self, new_run: bool) -> None:
        self.start_roster()
        self.first_round = self.sample(None) if new_run else None

    def _collect(self, round_ref) -> list:
        """The round's results, each sample waited for at most the sample bound: ``[report, shards of rank 0, ...]``."""
        world = self.actors.world_size
        return self.actors.coordinator.collect.options(num_returns=1 + world).remote(round_ref, self.bounds.sample_s())

    def iterate(self) -> str:
        overlap = self.config.rollout.pipeline == "overlap"
        weights_ref = self.actors.learners[0].get_weights.remote()
        for observer in self.observers:
            observer.start(weights_ref)
        round_ref = self.first_round if self.first_round is not None else self.sample(weights_ref)
        while True:
            iter_start, cpu_start = time.perf_counter(), time.process_time()
            samples = self._collect(round_ref)
            if overlap:  # sample the next batch with the weights the learner is updating away from (lag 1)
                round_ref = self.sample(weights_ref)
            sample_report = self.await_report(samples[0])
            stop = self.roster.follow(sample_report)
            if stop is not None:
                return stop
            if not sample_report.infos:  # every worker timed out: nothing to learn from this time
                if not overlap:
                    round_ref = self.sample(weights_ref)
                continue
            update = self.launch_update(samples)
            if not overlap:  # queue the next batch on the new weights, so workers start the moment the update lands
                round_ref = self.sample(update[1])
            result, update, restarted = self.await_update(update, samples)
            if restarted and not overlap:  # those samples waited on weights that never came
                round_ref = self.sample(update[1])
            self.driver.snapshots.offer(update[2], result.version)
            weights_ref = update[1]
            reason = self.record(sample_report.infos, result, weights_ref, iter_start, cpu_start)
            if reason is not None:
                return reason
