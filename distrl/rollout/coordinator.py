"""SampleCoordinator: the actor that drives every rollout worker's sampling for the driver.

Whoever submits a Ray task owns its return objects and does the bookkeeping for each one: N workers and M learners
make N x (1 + M) objects per iteration, which the driver's CPU would grow with. The coordinator takes that work, so
the driver makes a constant number of calls per update (a ``gather``, a ``release``, one update per learner). It holds
the run's membership (``membership.py``) and the one sampler over it (``stream.py``); it owns every batch but holds
none: their shards go from the workers' nodes to the learners' (``landing.py``).
"""

from __future__ import annotations

import ray

from distrl.rollout.membership import Membership
from distrl.rollout.stream import WEIGHTS_GROUP, SampleStream, WorkerFailure

__all__ = ["SampleCoordinator", "WorkerFailure"]


class SampleCoordinator:
    def __init__(
        self,
        num_shards: int,
        env_id: str = "",
        max_restarts: int = 0,
        artifacts: list | None = None,
        learner_nodes: list[str] | None = None,
    ):
        """``artifacts``: ``[ObjectRef]`` to large compile artifacts, handed to workers by ``artifacts()``;
        ``learner_nodes``: the node of each learner rank, where the batches' shards go (``landing.py``)."""
        self.workers: list = []
        self.num_shards = num_shards
        self.env_id = env_id
        self.max_restarts = max_restarts
        self._artifacts = artifacts
        self.learner_nodes = learner_nodes or []
        self.members = Membership([], max_restarts)
        self.stream: SampleStream | None = None

    def attach(self, workers: list) -> bool:
        """The workers to drive (created after the coordinator, which their constructors may ask for artifacts)."""
        self.workers = workers
        self.members = Membership(workers, self.max_restarts)
        return True

    def artifacts(self) -> list | None:
        """``[ObjectRef]`` to the shared compile artifacts (a worker's constructor fetches them, after a restart
        too)."""
        return self._artifacts

    # --- sampling (stream.py) ------------------------------------------------------------------
    def start_stream(
        self,
        weights: list,
        plan: list | None,
        timeout_s: float,
        max_queued: int,
        started: list[int] | None = None,
        pipeline: str = "async",
    ) -> bool:
        """The workers sample from now on, in rounds or continuously (``pipeline``), with ``weights`` (``[ObjectRef]``,
        or ``[None]``: what the workers hold) until a ``release`` names newer ones."""

        def submit(index, weights_ref, plan_ref):
            return (
                self.workers[index]
                .sample_shards.options(num_returns=1 + self.num_shards, max_task_retries=0)
                .remote(weights_ref, self.num_shards, plan_ref)
            )

        def stage(index, weights_ref):
            return self.workers[index].stage_weights.options(concurrency_group=WEIGHTS_GROUP).remote(weights_ref)

        members, shards = self.members, self.num_shards
        self.stream = SampleStream(
            members,
            shards,
            submit,
            stage,
            timeout_s,
            weights,
            plan,
            max_queued,
            started,
            pipeline,
            self.env_id,
            self.learner_nodes,
        )
        return True

    def learners_at(self, rank_nodes: list[str]) -> bool:
        """The learners were rebuilt: rank r runs on ``rank_nodes[r]`` from now on, where its shards go."""
        self.learner_nodes = list(rank_nodes)
        if self.stream is not None:
            self.stream.learners_at(rank_nodes)
        return True

    def gather(
        self, count: int, min_version: int, timeout_s: float, hold_until: int | None = None, plan: list | None = None
    ) -> tuple:
        """The next update's batches (``SampleStream.gather``: a round, or ``count`` batches of policy version >=
        ``min_version``): ``(SampleReport, shards of rank 0, ...)``. ``hold_until``: the number of the update running
        while this gather waits, told over by ``release``; ``plan``: the league's plan now."""
        return self.stream.gather(count, min_version, timeout_s, hold_until, plan)

    def release(self, update: int, weights: list | None, plan: list | None, timeout_s: float) -> None:
        """Update number ``update`` is over. Its ``weights`` (``[ObjectRef]``, one object per update; None when it made
        none) and the league ``plan`` (None: the one the stream has) are set first, for every sample sent from now on,
        and staged to the ones running (``timeout_s`` bounds them); then the next update's batches, gathered while it
        ran, stop holding the workers back, so the workers this unparks act with them, with no round trip between."""
        if weights is not None:
            self.stream.set_weights(weights, plan, timeout_s)
        self.stream.release(update)

    # --- membership: the driver's side ------------------------------------------------------------
    def move_workers(self, indices: list[int]) -> None:
        """Their node is draining: each is restarted now on a node with room, before the node goes; until it answers
        again no sample waits for it (its node counts as gone), and the restart spends none of its budget."""
        with self.members.lock:
            self.members.move(indices)

    def evict(self, index: int) -> None:
        """Stop worker ``index`` for good (Ray does not restart it): its resources go to a learner that could not be
        placed. Left out until ``replace`` hands over its successor; spends no restart."""
        if self.stream is not None:
            self.stream.evict(index)
        else:  # before sampling starts: the stream leaves it out when it starts
            with self.members.lock:
                self.members.evict(index)
        ray.kill(self.workers[index], no_restart=True)

    def replace(self, index: int, worker) -> None:
        """``worker``: a new actor in evicted worker ``index``'s place; it rejoins once it answers (placed when a node
        has room, as a worker range's are)."""
        if self.stream is not None:
            self.stream.replace(index, worker)
        else:  # before sampling starts: the stream probes it when it starts
            with self.members.lock:
                self.members.replace(index, worker)
