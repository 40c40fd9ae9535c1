"""One iteration's record, the same in every pipeline: the run's counters, the metrics row, the observers' keys, the
metrics files and progress, videos, the stop rules and periodic checkpoints."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import ray

from distrl.common.log import get_logger
from distrl.data.messages import SampleInfo, UpdateResult
from distrl.driver import report
from distrl.driver.metrics import MetricsWriter
from distrl.driver.run_state import stop_reason

if TYPE_CHECKING:
    from distrl.driver.loops.host import RunHost
    from distrl.driver.roster import Roster

log = get_logger("driver")


class IterationRecord:
    def __init__(self, driver: RunHost, roster: Roster, launch: float, loop_start: float, loop_steps_start: int):
        """``launch``: when the command started (perf_counter); ``loop_start``, ``loop_steps_start``: when the loop
        started, and the env steps then (the rows' average rate counts from there)."""
        self.driver = driver
        self.config = cfg = driver.config
        self.counters = driver.counters
        self.observers = driver.observers
        self.progress = driver.progress
        self.roster = roster
        self.launch, self.loop_start, self.loop_steps_start = launch, loop_start, loop_steps_start
        self.incarnations: dict[int, tuple[str, int]] = {}  # worker index -> (incarnation, seed)
        self._warned_all_skipped = False
        self.metrics_writer = MetricsWriter(driver.run_dir, cfg)
        self.videos = None
        if cfg.logging.video_every_iterations:
            from distrl.deploy.video import TrainingVideos

            self.videos = TrainingVideos(cfg, driver.actors.spaces, driver.run_dir)

    def close(self) -> None:
        self.metrics_writer.close()
        if self.videos is not None:
            self.videos.close()

    def __call__(
        self, infos: list[SampleInfo], update: UpdateResult, weights_ref, iter_start: float, cpu_start: float
    ) -> str | None:
        """Count an update and the batches it trained on, write its metrics row, tell the observers, record a video
        and checkpoint when due; returns the stop reason once a stop rule fires (else None).

        Batches the learner could not fetch (``update.lost_batches``: their node died with them) are counted as lost and
        nothing else: their env steps and episodes are not the run's. With none left there was no update and
        there is no row."""
        driver, cfg = self.driver, self.config
        lost = set(update.lost_batches)
        if lost:
            self.counters.batches_lost += len(lost)
            log.warning(
                f"{len(lost)} of this update's batches were lost with their node before the learner fetched "
                f"them: not trained on, not counted (batches_lost {self.counters.batches_lost})"
            )
            infos = [info for i, info in enumerate(infos) if i not in lost]
        if not infos:
            return "interrupted" if driver.stop_requested else None
        if update.learner_step is not None:  # the device step's first update, against the loop's
            driver.note_learner_step(update.learner_step)
        driver.first_batch_done(max(i.finished_at for i in infos))
        now = time.perf_counter()
        elapsed = self.counters.time_s + (now - self.launch)
        self._count(infos, elapsed)
        self._count_update(update.metrics)
        self.counters.stale_steps += update.stale_steps
        sps_avg = (self.counters.env_steps - self.loop_steps_start) / max(now - self.loop_start, 1e-9)
        row = report.iteration_row(self.counters, infos, update, now - iter_start, elapsed, sps_avg)
        row["workers_active"] = len(self.roster.answering)
        for observer in self.observers:
            row.update(observer.after_iteration(infos, self.counters.iteration, weights_ref))
        evaluation = driver.evaluation
        if evaluation is not None:  # an evaluation's result lands in the row of the iteration it came in during
            evaluation.start()
            row.update(driver.evaluated(evaluation.poll()))
            row["eval_failures"] = self.counters.eval_failures
        row["driver_cpu_s"] = time.process_time() - cpu_start  # this process only: its share of the loop
        startup = driver.first_update_done()
        if startup is not None:
            log.info(startup)
        self.metrics_writer.write(row)
        self.progress.update(row)
        driver.iteration_done(row)
        if self.videos is not None and self.counters.iteration % cfg.logging.video_every_iterations == 0:
            self.videos.maybe_record(self.counters.iteration, ray.get(weights_ref))
        if driver.stop_requested:  # a signal whose KeyboardInterrupt was swallowed (driver/signals.py)
            return "interrupted"
        reason = stop_reason(cfg.stop, self.counters, elapsed)
        if reason is not None:
            return reason
        every = cfg.checkpoint.every_iterations
        evaluate = evaluation is not None and evaluation.due(self.counters.iteration)
        if evaluate or (every and self.counters.iteration % every == 0):
            self.metrics_writer.flush()  # the checkpoint's mirror uploads metrics and events up to here
            driver.checkpoint_at(elapsed, evaluate)
        return None

    def _count(self, infos: list[SampleInfo], elapsed: float) -> None:
        """Fold the workers' reports into the run state, saying what went wrong on the way."""
        for info in infos:
            known, seed = self.incarnations.setdefault(info.worker_index, (info.incarnation, info.seed))
            if known != info.incarnation:
                self.counters.worker_restarts += 1
                self.incarnations[info.worker_index] = (info.incarnation, info.seed)
                log.warning(
                    f"worker-{info.worker_index} was restarted (restart {self.counters.worker_restarts}); "
                    f"it resumed with the current weights and a new random stream (seed {info.seed}, "
                    f"was {seed})"
                )
            if info.env_errors:
                self.counters.env_errors += info.env_errors
                for message in info.env_error_messages[:1]:
                    log.warning(f"env error (reset and masked): {message}")
            if info.env_nonfinite:
                if self.counters.env_nonfinite == 0:  # the first time in the run; the count goes on in the metrics
                    log.warning(
                        f"worker-{info.worker_index} ({self.config.env.id}), {info.env_nonfinite_messages[0]}: "
                        "the step was reset and masked, and is counted as env_nonfinite (further ones "
                        "are counted without a warning)"
                    )
                self.counters.env_nonfinite += info.env_nonfinite
        self.driver.workers_act_with([info.policy_backend for info in sorted(infos, key=lambda i: i.worker_index)])
        self.counters.add_iteration(
            sum(info.env_steps for info in infos),
            [r for info in infos for r in info.episode_returns],
            [n for info in infos for n in info.episode_lengths],
            elapsed,
            self.config.stop.episode_return_mean,
            _returns_by_policy(infos),
        )

    def _count_update(self, metrics: dict) -> None:
        """Count the update's gradient steps; say so when the learner's non-finite guard skipped them."""
        steps, skipped = metrics["gradient_steps"], metrics["skipped_steps"]
        first = self.counters.skipped_steps == 0
        self.counters.gradient_steps += steps
        self.counters.skipped_steps += skipped
        if skipped and first:
            log.warning(
                f"iteration {self.counters.iteration}: {skipped} of {steps} gradient steps skipped (non-finite "
                "loss or gradients; the weights are kept): counted as skipped_steps"
            )
        if steps and skipped == steps and not self._warned_all_skipped:
            self._warned_all_skipped = True
            log.warning(
                f"iteration {self.counters.iteration}: every gradient step was skipped; the policy did not change "
                "(said once; summary.json has skipped_steps)"
            )


def _returns_by_policy(infos: list[SampleInfo]) -> dict[str, list[float]]:
    """Several trained policies: each one's episode returns in the workers' reports ({}: one policy)."""
    out: dict[str, list[float]] = {}
    for info in infos:
        for name, part in (info.policies or {}).items():
            out.setdefault(name, []).extend(part.episode_returns)
    return out
