"""What every training loop shares: observers, the learners' update with restarts, and one iteration's record.

A loop (``sync.py``) decides only how samples move from the workers to the learners and weights
back. After each update it calls ``record``: the run's counters, the metrics row, the observers'
keys, the metrics files and progress, videos, the stop rules and periodic checkpoints, the same in
every loop. The run's state (counters, the newest learner snapshot, checkpoints, the final summary)
stays with the ``Driver``, which builds the loop.

Observers attach to a loop as Sample Factory's runner observers do (a league run's ``LeagueRun``),
instead of branches in the loop: ``LoopObserver`` says what they offer.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

import ray

from distrl.common.errors import RunStalled
from distrl.common.log import get_logger
from distrl.data.messages import SampleInfo, SampleReport, UpdateResult
from distrl.driver import report
from distrl.driver.metrics import MetricsWriter
from distrl.driver.progress import ProgressReporter
from distrl.driver.roster import Roster
from distrl.driver.run_state import stop_reason

if TYPE_CHECKING:
    from pathlib import Path

    from distrl.config import Config
    from distrl.driver.actors import RunActors
    from distrl.driver.run_state import RunState
    from distrl.driver.snapshots import SnapshotKeeper
    from distrl.driver.timeouts import WaitBounds

log = get_logger("driver")


class LoopObserver(Protocol):
    """Something a loop tells about the run as it goes (``distrl.league.run.LeagueRun``).

    ``name`` keys its ``state()`` in checkpoints and its ``summary()`` in ``summary.json``.
    """

    name: str

    def start(self, weights_ref) -> None:
        """The loop is about to run; ``weights_ref``: the learner's current weights."""

    def worker_plan(self) -> Any:
        """What every worker gets with its next sample request (None: nothing)."""

    def after_iteration(self, infos: list[SampleInfo], iteration: int, weights_ref) -> dict:
        """An update has landed; returns keys for the iteration's metrics row."""

    def state(self) -> dict:
        """What a checkpoint keeps of it."""

    def summary(self) -> dict:
        """What ``summary.json`` says of it."""


class RunHost(Protocol):
    """What a loop needs of the run around it (the ``Driver``), and all it may touch: the run's parts, and the few
    things a loop tells the run."""

    config: Config
    actors: RunActors  # the learners, the workers and their coordinator, with their placement
    counters: RunState  # the run's counters, kept across a resume
    bounds: WaitBounds  # how long a sample and an update may take
    observers: list[LoopObserver]
    snapshots: SnapshotKeeper  # each update's learner state is offered; a rebuilt learner starts from the newest
    run_dir: Path
    progress: ProgressReporter  # the live bar (or progress lines), started with the run

    @property
    def stop_requested(self) -> bool: ...

    def write_placement(self) -> None: ...  # a worker joined or moved

    def note_learner_step(self, step: dict) -> None: ...  # the device step's first update was checked

    def first_batch_done(self, finished_at: float) -> None: ...

    def first_update_done(self) -> str | None: ...  # the start-up line, once

    def iteration_done(self, row: dict) -> None: ...

    def workers_act_with(self, backends: list[str]) -> None: ...

    def checkpoint_at(self, elapsed: float) -> Path: ...


class TrainingLoop(ABC):
    def __init__(self, driver: RunHost):
        self.driver = driver
        self.config = driver.config
        self.actors = driver.actors
        self.counters = driver.counters
        self.bounds = driver.bounds
        self.observers: list[LoopObserver] = driver.observers
        self.incarnations: dict[int, tuple[str, int]] = {}  # worker index -> (incarnation, seed)
        self._warned_all_skipped = False
        self.roster: Roster | None = None  # the workers answering, as the driver last heard (``begin`` starts it)
        self._snapshot_sent_at: float | None = None  # when an update last sent learner-0's state (snapshot_every_s)

    # --- what a loop implements ---------------------------------------------------------
    @abstractmethod
    def begin(self, new_run: bool) -> None:
        """Start sampling as soon as the workers are up (a new run's workers hold the learner's initial
        weights: they sample while the learners start)."""

    @abstractmethod
    def iterate(self) -> str:
        """Train until a stop rule fires (``record`` says when); returns the stop reason."""

    # --- the run around it ----------------------------------------------------------------
    def train(self, launch: float, loop_start: float, loop_steps_start: int) -> str:
        """``iterate`` with the run's metrics files and videos open (the driver's progress shows each row)."""
        cfg = self.config
        self.launch, self.loop_start, self.loop_steps_start = launch, loop_start, loop_steps_start
        self.metrics_writer = MetricsWriter(self.driver.run_dir, cfg)
        self.progress = self.driver.progress
        self.videos = None
        if cfg.logging.video_every_iterations:
            from distrl.deploy.video import TrainingVideos

            self.videos = TrainingVideos(cfg, self.actors.spaces, self.driver.run_dir)
        try:
            return self.iterate()
        finally:
            self.metrics_writer.close()
            if self.videos is not None:
                self.videos.close()

    def sample(self, weights_ref):
        """Every worker's next sample, through the coordinator: a ref to the round (its refs, owned there).

        ``weights_ref`` None: with the weights the workers hold (a new run's first batch).
        """
        return self.actors.coordinator.sample.remote([weights_ref], self.worker_plans())

    def worker_plans(self) -> list | None:
        """``[plan]`` of the observer that sends workers one (a league's matchmaking), or None."""
        plans = [plan for plan in (o.worker_plan() for o in self.observers) if plan is not None]
        return plans[:1] or None

    # --- who is in the run -----------------------------------------------------------------
    def start_roster(self) -> None:
        """Follow the workers answering from the run's start (``begin``): ``driver/roster.py``."""
        self.roster = Roster(self.config.rollout, self.counters, self.actors.started, self._where, self._placed)

    def _where(self, index: int) -> str:
        spot = self.actors.placement.get(f"worker-{index}", {})
        return f"node {spot.get('node_ip', '?')} ({str(spot.get('node_id', '?'))[:8]})"

    def _placed(self, index: int) -> bool:
        """Record where worker ``index`` runs now (Ray may have restarted it on another node); True: new to the run."""
        joined = f"worker-{index}" not in self.actors.placement  # a range's worker, started on a node that joined
        self.actors.worker_joined(index)
        self.driver.write_placement()
        return joined

    # --- the learners' update -------------------------------------------------------------
    def launch_update(self, samples: list, ahead: int = 1) -> tuple:
        """Learner r gets the round's report and its own shards; returns (metrics_ref, weights_ref, state_ref, other
        ranks), state_ref None when this update sends no snapshot (``_snapshot_due``; ``ahead``: how many updates from
        now it is recorded, 2 for one queued behind the update running)."""
        learners = self.actors.learners
        snapshot = self._snapshot_due(ahead)
        lead = learners[0].update_refs_and_snapshot.options(num_returns=3).remote(samples[0], samples[1], snapshot)
        others = [
            learner.update_refs.remote(samples[0], samples[1 + rank])
            for rank, learner in enumerate(learners[1:], start=1)
        ]
        return (*lead[:2], lead[2] if snapshot else None, others)

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

    def await_update(self, update: tuple, samples: list) -> tuple[UpdateResult, tuple, bool]:
        """Rank 0's update result; a learner that dies or passes the update bound is rebuilt and the update run
        again."""
        restarted = False
        while True:
            bound = self.bounds.update_s()
            try:
                result: UpdateResult = ray.get(update[0], timeout=bound)
                if update[3]:  # the bytes each rank fetched: its shards only
                    others = ray.get(update[3], timeout=bound)
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
                update = self.launch_update(samples)
                restarted = True

    def await_report(self, report_ref) -> SampleReport:
        """A round's report (infos of the batches that came in, timeouts); warns of each timeout."""
        bound = 2 * self.bounds.sample_s() + 60  # the coordinator bounds its own waits; this bounds the coordinator
        try:
            sample_report = ray.get(report_ref, timeout=bound)
        except ray.exceptions.GetTimeoutError:
            raise RunStalled(f"the sample coordinator did not answer within {bound:.0f} s") from None
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

    # --- one iteration's record -------------------------------------------------------------
    def record(
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
        if every and self.counters.iteration % every == 0:
            self.metrics_writer.flush()  # the checkpoint's mirror uploads metrics and events up to here
            driver.checkpoint_at(elapsed)
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
