"""The driver: connects to Ray, starts the actors, runs a training loop, checkpoints, reports.

The loop (``distrl/driver/loops/``, by ``rollout.pipeline``) moves samples and weights; the driver
sets the run up, holds its state (counters, the newest learner snapshot, observers such as a
league) and writes checkpoints and the final summary.

Data path: each worker's sample returns its small ``info`` and one batch shard per learner
rank as separate objects, submitted and owned by the ``SampleCoordinator`` actor, so the
driver's work per iteration does not grow with the worker count; learner r fetches only
shard r, the driver one object holding every info. Rank 0
returns the new weights (one object every worker reads) and a snapshot of its full state,
which the driver keeps so that a dead learner can be rebuilt and its update run again.
Whatever ends the run (stop rule, Ctrl-C, SIGTERM from ``ray job stop``, an error), the
final checkpoint and ``summary.json`` are written from that snapshot and the actors and
placement group are torn down.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ray

from distrl.common.checkpoint import (
    BestCheckpoint,
    checkpoint_path,
    load_checkpoint,
    prune,
    save_checkpoint,
    write_best,
)
from distrl.common.errors import RunStalled
from distrl.common.log import get_logger
from distrl.common.text import fit, shown
from distrl.config import Config, config_to_yaml
from distrl.data.messages import EvalResult
from distrl.driver import report
from distrl.driver.actors import RunActors
from distrl.driver.artifacts import worker_artifacts
from distrl.driver.best import best_metric, better, resumed_best
from distrl.driver.connection import RayTarget, agent_port_of_its_own, resolve_target
from distrl.driver.drain import DrainWatcher
from distrl.driver.evaluation import Evaluation
from distrl.driver.loops import loop_class
from distrl.driver.placement import PlacementError, impossible_requests, shortfalls, this_machine
from distrl.driver.preflight import check_before_ray, check_gpus_of_this_machine
from distrl.driver.progress import ProgressReporter
from distrl.driver.run_state import RunState
from distrl.driver.signals import StopSignals
from distrl.driver.snapshots import SnapshotKeeper
from distrl.driver.storage import RunStorage
from distrl.driver.timeouts import WaitBounds
from distrl.envs import EnvFailure
from distrl.envs.kinds import resolve_agents
from distrl.rollout.coordinator import WorkerFailure

log = get_logger("driver")

SETUP_FILE = "setup.txt"  # the start-up summary in full, in the run directory


def connect_ray(target: RayTarget) -> RayTarget:
    """Join ``target``'s cluster, or start a private Ray in this process; returns what was joined.

    A Ray already initialised in this process (a notebook, a test) is used as it is: private
    when this process started it, a cluster otherwise.
    """
    if ray.is_initialized():
        if _started_here():
            return RayTarget(None, "private")
        return RayTarget(ray.get_runtime_context().gcs_address, "ray.init() before distrl")
    if target.private:
        # address="local": never join a cluster through Ray's address file (resolve_target already looked).
        agent_port_of_its_own()
        ray.init(address="local", include_dashboard=False, log_to_driver=True, configure_logging=False)
    else:
        ray.init(address=target.address, log_to_driver=True)
    return target


def _started_here() -> bool:
    """Whether this process started the Ray it is connected to (its GCS is a child of this process)."""
    import psutil

    return any("gcs_server" in (child.name() or "") for child in psutil.Process().children(recursive=True))


class Driver:
    def __init__(
        self,
        config: Config,
        run_dir: Path,
        console=None,
        resume: bool = False,
        storage: RunStorage | None = None,
        *,
        resume_payload: dict | None = None,
        on_iteration=None,
        placement_group=None,
        verbose: bool = False,
    ):
        """``resume_payload``: a loaded checkpoint to continue from (instead of ``run_dir``'s newest, ``resume``).
        ``on_iteration(row, driver)``: called after every iteration's metrics row (Ray Tune reports from it).
        ``placement_group``: place every actor in this group (a Tune trial's, laid out by
        ``distrl.tune.trainable.trial_resources``) instead of creating the learners' own."""
        self.config = config
        self.run_dir = Path(run_dir).absolute()  # what the run says of itself names it from anywhere (a job's cwd)
        self.storage = storage  # the run's mirror under a storage URI, if any
        self.console = console  # a rich Console for the live progress bar (the CLI on a terminal), else None
        self.progress: ProgressReporter | None = None  # started by run, after the checks before Ray
        self.resume = resume or resume_payload is not None
        self.on_iteration = on_iteration
        self.verbose = verbose  # the start-up summary in full on the screen, as setup.txt has it
        self.setup_lines: list[str] = []  # setup.txt's, written at start-up; the timeline joins after the 1st update
        self.placement_group = placement_group
        self.best: BestCheckpoint | None = None  # the best checkpoint so far (driver/best.py)
        self.run_id = uuid.uuid4().hex[:8]
        self.counters = RunState()
        self.resumed_learner_state: dict | None = None
        self.snapshots = SnapshotKeeper()  # the newest full learner state (rank 0's), held in this process
        self.drain_watch: DrainWatcher | None = None  # acts on Ray's drain notices (driver/drain.py)
        self.stop_signals = StopSignals()
        self._checkpoint_lock = threading.Lock()  # the drain watcher's checkpoint and the loop's never overlap
        self.worker_backends: list[str] = []
        self.learner_step: dict | None = None  # the step the learners run, why, and its first update's check
        self.bounds = WaitBounds(config.rollout.sample_timeout_s, config.learner.update_timeout_s)
        self.actors: RunActors | None = None
        self.timeline: dict[str, float] = {}  # start-up milestones, seconds from launch (export_s: a duration)
        self._launch = time.perf_counter()
        self._clock = self._launch  # what the run's time_s counts from in this command (a resumed run: its loop)
        league_state = None
        self.resumed_at: RunState | None = None  # where this command took the run up (None: a new run)
        if resume or resume_payload is not None:
            payload = resume_payload if resume_payload is not None else load_checkpoint(self.run_dir)
            self.counters = RunState.from_state(payload["counters"])
            self.resumed_at = RunState.from_state(payload["counters"])
            self.resumed_learner_state = payload["learner"]
            self.best = resumed_best(payload, self.run_dir, best_metric(config))
            league_state = payload.get("league")
        # What the loop tells about the run as it goes (driver/loops/host.py: LoopObserver): a self-play run's league.
        self.observers: list = []
        self.evaluation: Evaluation | None = None  # evaluation during training (driver/evaluation.py), when on
        self.final_eval: dict = {}  # the final checkpoint's evaluation (eval.final): summary.json's eval
        if config.eval.enabled(config.league is not None):
            self.evaluation = Evaluation(config, self.counters)
        if config.league is not None:
            from distrl.league.run import LeagueRun

            self.observers.append(LeagueRun(config, league_state, log.info))

    # --- set-up -------------------------------------------------------------------------
    def mark(self, milestone: str) -> None:
        self.timeline[milestone] = time.perf_counter() - self._launch

    @property
    def launch_wall(self) -> float:
        """The launch as a wall-clock time, to place the workers' timestamps."""
        return time.time() - (time.perf_counter() - self._launch)

    @staticmethod
    def _share(artifacts: dict | None):
        """What each worker's constructor gets: the artifacts inline when small, else one object-store ref."""
        if artifacts is None:
            return None
        # Small artifacts travel inline with each worker's constructor; large ones once, through the object store,
        # handed out by the coordinator (RunActors.start).
        import pickle

        return artifacts if len(pickle.dumps(artifacts)) < 100_000 else ray.put(artifacts)

    # --- the run -------------------------------------------------------------------------
    def run(self, target: RayTarget | str | None = None, launch: float | None = None) -> dict:
        """Train until a stop condition; ``launch`` (perf_counter) is when the command started.

        ``target``: from ``resolve_target``, or an address as ``--address`` takes it (None: as Ray finds one).
        """
        launch = time.perf_counter() if launch is None else launch
        self._launch = launch
        self.mark("imports")
        self.config = resolve_agents(self.config)  # an N-agent env's copies: the slots they fill, said and saved
        spaces = check_before_ray(self.config)
        self.mark("env_probe")
        if not isinstance(target, RayTarget):  # a Ray this process already joined is used as it is (connect_ray)
            target = RayTarget(None, "private") if ray.is_initialized() else resolve_target(target)
        if target.private and not ray.is_initialized():
            check_gpus_of_this_machine(self.config)
            if self.placement_group is None:  # a private Ray cannot grow: what this machine cannot hold, said now
                problems = shortfalls(self.config, this_machine(self.config), "this machine (a private Ray)")
                if problems:
                    raise PlacementError("; ".join(problems))
        # The bar names each start-up phase until the first update (after the checks: bad input is one line, no bar).
        self.progress = ProgressReporter(self.config, self.console, self.resumed_at and self.resumed_at.time_s)
        # Ctrl-C, `ray job stop`, `kill`: stop cleanly (driver/signals.py). From before Ray starts: a signal whose
        # KeyboardInterrupt Ray's start swallows is still seen, by the flag.
        self.stop_signals.install()
        try:
            return self._run(target, launch, spaces)
        finally:
            self.progress.close()
            self.stop_signals.restore()

    def _run(self, target: RayTarget, launch: float, spaces) -> dict:
        if target.warning:
            log.warning(target.warning)
        # The policy's export or compile overlaps Ray's start-up (ray.init waits on its processes).
        self.progress.phase(
            ("starting Ray" if target.private and not ray.is_initialized() else "joining Ray")
            + f", building the {self.config.rollout.compile.backend} policy"
        )
        with ThreadPoolExecutor(1, thread_name_prefix="distrl-artifacts") as pool:
            export_start = time.perf_counter()
            building = pool.submit(worker_artifacts, self.config, *spaces)
            building.add_done_callback(
                lambda _: self.timeline.__setitem__("export_s", time.perf_counter() - export_start)
            )
            try:
                joined = connect_ray(target)
            finally:
                self.stop_signals.reclaim()
                self.mark("ray_start")
                artifacts = building.result()
        self.mark("artifacts")
        if self.stop_signals.requested:  # its KeyboardInterrupt swallowed while Ray started
            raise KeyboardInterrupt
        problems = impossible_requests(self.config) if self.placement_group is None else []  # a trial's group is placed
        if problems and joined.private:  # a private Ray cannot grow: say so now
            raise PlacementError("; ".join(problems))
        for problem in problems:  # an autoscaling cluster may still provide it: wait, visibly
            log.warning(f"not yet available, waiting for the autoscaler: {problem}")
        self.actors = RunActors(
            self.config, self.run_id, spaces, self._share(artifacts), log.info, self.placement_group
        )
        loop = loop_class(self.config.rollout.pipeline)(self)
        if self.resumed_learner_state is not None:
            self.snapshots = SnapshotKeeper(self.resumed_learner_state)
        reason, failure, error, started = None, None, None, False
        loop_start, loop_steps_start = time.perf_counter(), self.counters.env_steps
        try:
            if self.stop_signals.requested:  # inside: the actors made above are torn down below
                raise KeyboardInterrupt
            workers = self.config.rollout.describe_workers()
            self.progress.phase(f"starting {workers} worker{'' if workers == '1' else 's'}")
            self.actors.start(self.counters.iteration)
            self.mark("workers_ready")
            resumed = self.resumed_learner_state is not None
            loop.begin(new_run=not resumed)
            self.progress.phase("the first batch; the learner starting")
            self.actors.learners_ready(self.snapshots.newest_ref() if resumed else None)
            self.mark("actors_ready")
            self.progress.phase("the first batch and update")
            started = True
            self._write_run_files(joined)
            self.drain_watch = DrainWatcher(self.actors, self._checkpoint_now)
            loop_start, loop_steps_start = time.perf_counter(), self.counters.env_steps
            # A resumed run's clock goes on from where it stopped once its loop starts: its own start-up is this
            # command's (this_command), not the run's time, which would otherwise jump with no step taken.
            self._clock = loop_start if self.resume else launch
            reason = loop.train(self._clock, loop_start, loop_steps_start)
        except KeyboardInterrupt:
            reason = "interrupted"
        except (
            EnvFailure
        ) as exc:  # Ray re-raises the worker's EnvFailure (or the coordinator's WorkerFailure) as a subclass
            cause = getattr(exc, "cause", None) or exc
            failure = EnvFailure(str(cause).strip().splitlines()[-1], getattr(cause, "errors", 0))
            self.counters.env_errors += failure.errors  # the sample that failed never reported them
            reason = "worker_failure" if isinstance(exc, WorkerFailure) else "env_failure"
        except BaseException as exc:  # ours: still keep the work done so far, then re-raise
            error, reason = exc, "error"
        finally:
            self.progress.close()  # the lines from here on (final checkpoint, summary) go below the bar
            if self.drain_watch is not None:  # before the final checkpoint: never two at once
                self.drain_watch.close()
            try:
                summary = self._finish(reason, launch, loop_start, loop_steps_start) if started else None
            finally:
                self.stop_signals.restore()  # after the final checkpoint: a second signal until then stops it
                if self.evaluation is not None:
                    self.evaluation.close()
                self.actors.teardown()
                self.snapshots.close()
        if error is not None:
            raise error
        if failure is not None:
            raise failure
        if summary is None:  # interrupted before anything ran
            raise KeyboardInterrupt
        return summary

    def _write_run_files(self, joined: RayTarget) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(config_to_yaml(self.config))
        self.write_placement()
        if self.resume:
            self._truncate_metrics()
        self.worker_backends = [info["backend"] for info in self.actors.backend_infos]
        self._say_start(joined)
        if self.storage is not None:
            self.storage.mirror(self.run_dir)

    def _say_start(self, joined: RayTarget) -> None:
        """The start-up summary: short on the screen (in full with ``verbose``), in full in ``setup.txt``."""
        described = (self.config, str(self.run_dir), joined, self.actors, self.resumed_at)
        storage = self.storage and self.storage.uri
        rate = [report.resumed_rate_line(self.config, self.resumed_learner_state)] if self.resumed_at else []
        self.setup_lines = [*report.start_details(*described, storage), *rate]
        self._replace(SETUP_FILE, "\n".join(self.setup_lines) + "\n")
        if self.verbose:
            screen = self.setup_lines
        else:
            details = f"  details  {shown(self.run_dir / SETUP_FILE)} (every auto choice and why)"
            on_screen = (self.config, shown(self.run_dir), *described[2:])  # the run's path as typed here
            screen = [fit(line) for line in [*report.start_screen(*on_screen, storage), *rate, details]]
        for line in screen:
            log.info(line)

    def _replace(self, name: str, text: str) -> None:
        """Write the run file ``name`` whole or not at all (a reader never sees half of it)."""
        tmp = self.run_dir / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.run_dir / name)

    def write_placement(self) -> None:
        """``placement.json``: where each actor runs (rewritten when a worker joins or moves)."""
        self._replace("placement.json", json.dumps(self.actors.placement, indent=2) + "\n")

    def _finish(self, reason: str | None, launch: float, loop_start: float, loop_steps_start: int) -> dict:
        """The final checkpoint and summary.json, whatever ended the run."""
        now = time.perf_counter()
        wall = self.counters.time_s + (now - (self._clock if self.resume else launch))
        self.counters.time_s = wall
        # Nothing trained and nothing resumed: no checkpoint, so the directory does not look like a run to resume.
        # The final policy evaluated too (eval.final), so the run's newest can be its best; not when stopping at once.
        evaluate = self.evaluation is not None and self.config.eval.final and reason not in ("interrupted", "error")
        checkpoint = self._checkpoint(final_eval=evaluate) if self.counters.iteration > 0 or self.resume else None
        loop_s = time.perf_counter() - loop_start
        summary = report.summary(
            self.counters,
            wall,
            (self.counters.env_steps - loop_steps_start) / max(loop_s, 1e-9),
            reason,
            checkpoint and str(checkpoint),
            self.worker_backends,
        )
        best = self.best is not None and self.best.path(self.run_dir)
        summary["best_checkpoint"] = str(best) if best and best.exists() else summary["checkpoint"]
        summary["best_checkpoint_metric"] = best_metric(self.config)
        summary["best_checkpoint_score"] = self.best.score if best and best.exists() else None
        if self.evaluation is not None:
            summary["final_eval"] = self.final_eval or None
            summary["eval_failures"] = self.counters.eval_failures
        summary["this_command"] = report.this_command(self.counters, self.resumed_at, now - launch)
        summary["storage"] = self.storage and self.storage.uri
        summary["startup"] = {k: round(v, 3) for k, v in self.timeline.items()}
        summary["learner_step"] = self.learner_step or self.actors.learner_info or None
        for observer in self.observers:
            summary[observer.name] = observer.summary()
        if self.counters.gradient_steps and self.counters.skipped_steps == self.counters.gradient_steps:
            log.error(
                f"every one of this run's {self.counters.gradient_steps} gradient steps was skipped (non-finite "
                "loss or gradients): the policy never learned"
            )
        self._replace("summary.json", json.dumps(summary, indent=2) + "\n")
        if self.storage is not None:  # summary.json last: its presence there means the rest is there too
            self.storage.put_bytes(json.dumps(self._stored(summary), indent=2).encode() + b"\n", "summary.json")
        return summary

    def _stored(self, summary: dict) -> dict:
        """The storage copy of ``summary.json``: its checkpoints named by their URIs (the local paths belong to the
        machine that ran it)."""
        stored = dict(summary)
        for key in ("checkpoint", "best_checkpoint"):
            if stored.get(key):
                stored[key] = f"{self.storage.uri}/{Path(stored[key]).relative_to(self.run_dir).as_posix()}"
        return stored

    # --- what a loop tells the run (driver/loops/host.py: RunHost) ------------------------------------
    @property
    def stop_requested(self) -> bool:
        """A stop signal came (its KeyboardInterrupt may have been swallowed where it landed: driver/signals.py)."""
        return self.stop_signals.requested

    def first_batch_done(self, finished_at: float) -> None:
        """The first batch was in at wall time ``finished_at`` (when its last worker finished it): a start-up mark."""
        if "first_batch" not in self.timeline:
            self.timeline["first_batch"] = finished_at - self.launch_wall

    def first_update_done(self) -> str | None:
        """The start-up line, once: after the run's first update (None after that)."""
        if "first_update" in self.timeline:
            return None
        self.mark("first_update")
        full = report.startup_line(self.timeline)
        if self.setup_lines:  # setup.txt gains where the start-up's time went
            self.setup_lines.append(full)
            self._replace(SETUP_FILE, "\n".join(self.setup_lines) + "\n")
        return full if self.verbose else report.started_line(self.timeline)

    def iteration_done(self, row: dict) -> None:
        """An iteration's metrics row is written: the caller's hook sees it (Ray Tune reports from it)."""
        if self.on_iteration is not None:
            self.on_iteration(row, self)

    def workers_act_with(self, backends: list[str]) -> None:
        """The policy backend each worker acted with in the newest batches (by worker index): for the summary."""
        self.worker_backends = backends

    def note_learner_step(self, step: dict) -> None:
        """The learner's way of running updates after its first update was tried and checked against the loop
        (``Learner.describe``, ``distrl/learner/trial.py``)."""
        self.learner_step = step
        check = step["step_check"]
        if check["ok"]:
            log.info(
                f"learner step {step['step']}, {step.get('kernels', 'eager')} kernels, "
                f"{step.get('precision', 'fp32')}: "
                f"its first update matched the loop's ({check['reason']})"
            )
        else:
            log.warning(f"learner: {step['step_reason']}")

    def _truncate_metrics(self) -> None:
        """Drop metrics rows written after the checkpoint a resumed run restarts from."""
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        keep = [
            line
            for line in path.read_text().splitlines()
            if line and json.loads(line)["iteration"] <= self.counters.iteration
        ]
        self._replace("metrics.jsonl", "".join(line + "\n" for line in keep))

    # --- checkpoints ---------------------------------------------------------------------
    def checkpoint_payload(self) -> dict:
        """What a checkpoint holds: the run's counters, the newest learner state the driver has, the config."""
        self._catch_up_snapshot()
        learner_state = self.snapshots.newest()
        if learner_state is None:  # nothing trained yet: the learner's initial state
            try:
                learner_state = ray.get(self.actors.learners[0].state.remote(), timeout=self.bounds.update_s())
            except ray.exceptions.GetTimeoutError:
                raise RunStalled(
                    f"learner-0 gave no state for the checkpoint within {self.bounds.update_s():.0f} s"
                ) from None
        payload = {
            "counters": self.counters.state(),
            "learner": learner_state,
            "config": self.config.model_dump(mode="json"),
            "best": self.best and self.best.state(),
        }
        for observer in self.observers:
            payload[observer.name] = observer.state()
        return payload

    def _catch_up_snapshot(self) -> None:
        """With snapshots on a budget (``learner.snapshot_every_s``) the state held may be behind the learner's: a
        checkpoint takes learner-0's state now, so it holds what its counters describe (the async loop's one update
        queued behind the newest may be in it too). A learner that cannot answer leaves the held one, said."""
        behind = self.snapshots.behind()
        if not behind:
            return
        try:
            self.snapshots.take(ray.get(self.actors.learners[0].snapshot.remote(), timeout=self.bounds.update_s()))
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            log.warning(
                f"learner-0 gave no state for the checkpoint ({str(exc).strip().splitlines()[0][:120]}); it "
                f"holds the newest the driver has, {behind} update{'s' if behind > 1 else ''} behind its "
                "counters"
            )

    def _checkpoint_now(self) -> Path:
        """A checkpoint at this moment, its time included (the drain watcher's, from its thread)."""
        return self.checkpoint_at(self.counters.time_s + (time.perf_counter() - self._clock))

    def _checkpoint(self, evaluate: bool = False, final_eval: bool = False) -> Path:
        """Write a checkpoint from the newest learner state the driver holds (alive learners or not); ``evaluate``:
        hand it to the eval actor; ``final_eval``: evaluate it first and wait (the run's last), so it names the best
        that evaluation chose."""
        iteration, metric = self.counters.iteration, best_metric(self.config)
        if metric == "episode_return_mean":  # scored as it is written; an evaluation scores it when its result is in
            self._set_best(better(self.best, self.counters.return_mean(), iteration, metric))
        payload = self.checkpoint_payload()
        path = checkpoint_path(self.run_dir, iteration)
        if final_eval:
            self._final_round(iteration, payload["learner"], path)
            payload["best"] = self.best and self.best.state()
        # the best is kept beside the newest `keep`, and named in the checkpoint, which may be it; so is one waiting
        # for its evaluation
        protect = [self.best.path(self.run_dir)] if self.best else []
        if evaluate:
            self.evaluation.submit(iteration, payload["learner"], path)
        if self.evaluation is not None:
            protect += self.evaluation.protected
        save_checkpoint(self.run_dir, iteration, payload, self.config.checkpoint.keep, protect=protect)
        if self.storage is not None:
            self.storage.mirror(self.run_dir)
        return path

    def evaluated(self, result: EvalResult | None) -> dict:
        """An evaluation's result is in (None: none, or it failed): the newest for the stop rule, the best where
        evaluation chooses it; the metrics row's ``eval_*`` keys."""
        if result is None:
            return {}
        self.counters.eval_return_mean = result.return_mean
        if best_metric(self.config) == "eval_return_mean" and result.returns:
            self._evaluated_best(better(self.best, result.return_mean, result.iteration, "eval_return_mean"))
        return result.metrics()

    def _final_round(self, iteration: int, learner_state: dict, path: Path) -> None:
        """The run's last evaluation (``eval.final``): the one in flight first; then the newest checkpoint and the best
        so far each play ``eval.final_scale`` times the episodes on seeds of their own, and the better is the best.
        A best chosen as the highest of many evaluations was chosen partly for its luck; judged again on a larger
        sample beside the newest, it keeps its place only on the merit of those games."""
        self.evaluated(self.evaluation.wait())
        scale = self.config.eval.final_scale
        final = self.evaluation.run_now(iteration, learner_state, path, scale)
        self.final_eval = final.metrics() if final is not None else {}
        if best_metric(self.config) != "eval_return_mean" or final is None or not final.returns:
            self.evaluated(final)
            return
        scores = {iteration: final.return_mean}
        best = self.best
        if best is not None and best.iteration != iteration and best.path(self.run_dir).is_file():
            state = load_checkpoint(best.path(self.run_dir))["learner"]
            again = self.evaluation.run_now(best.iteration, state, best.path(self.run_dir), scale)
            if again is not None and again.returns:
                scores[best.iteration] = again.return_mean
                self.final_eval["eval_best_again"] = {"iteration": best.iteration, **again.metrics()}
        self.counters.eval_return_mean = final.return_mean
        chosen = max(scores, key=lambda k: (scores[k], -k))  # a tie keeps the earlier
        self._evaluated_best(BestCheckpoint(scores[chosen], chosen, "eval_return_mean"))

    def _evaluated_best(self, best: BestCheckpoint | None) -> None:
        """An evaluation chose ``best``: where it changed, the older best may go (the checkpoint waiting for its own
        evaluation stays)."""
        if self._set_best(best):
            pending = self.evaluation.protected if self.evaluation is not None else []
            prune(self.run_dir, self.config.checkpoint.keep, [self.best.path(self.run_dir), *pending])

    def _set_best(self, best: BestCheckpoint | None) -> bool:
        """The run's best is ``best``; where it changed, ``checkpoints/best.json`` says so at once (checkpoints name
        it from the next on). Returns whether it changed."""
        if best is self.best:
            return False
        self.best = best
        if best is not None:
            write_best(self.run_dir, best)
        return True

    def checkpoint_at(self, elapsed: float, evaluate: bool = False) -> Path:
        """A checkpoint recording ``elapsed`` as the run's time; ``evaluate``: hand it to the eval actor."""
        # RunState.time_s holds earlier segments only; a checkpoint records the full elapsed time.
        with self._checkpoint_lock:
            saved = self.counters.time_s
            self.counters.time_s = elapsed
            try:
                return self._checkpoint(evaluate)
            finally:
                self.counters.time_s = saved
