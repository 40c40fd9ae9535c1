"""What a training loop meets around it: the run (``RunHost``, the ``Driver``) and the observers it tells (a league).

Observers attach to the loop as Sample Factory's runner observers do (a league run's ``LeagueRun``), instead of
branches in the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from distrl.config import Config
    from distrl.data.messages import EvalResult, SampleInfo
    from distrl.driver.actors import RunActors
    from distrl.driver.evaluation import Evaluation
    from distrl.driver.progress import ProgressReporter
    from distrl.driver.run_state import RunState
    from distrl.driver.snapshots import SnapshotKeeper
    from distrl.driver.timeouts import WaitBounds


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
    evaluation: Evaluation | None  # evaluation during training, when on: when one is due, the one in flight

    @property
    def stop_requested(self) -> bool: ...
    def write_placement(self) -> None: ...  # a worker joined or moved
    def note_learner_step(self, step: dict) -> None: ...  # the device step's first update was checked
    def first_batch_done(self, finished_at: float) -> None: ...
    def first_update_done(self) -> str | None: ...  # the start-up line, once
    def iteration_done(self, row: dict) -> None: ...
    def workers_act_with(self, backends: list[str]) -> None: ...
    def checkpoint_at(self, elapsed: float, evaluate: bool = False) -> Path: ...
    def evaluated(self, result: EvalResult | None) -> dict: ...  # an evaluation's result in: the row's eval keys
