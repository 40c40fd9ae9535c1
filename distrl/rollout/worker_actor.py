"""The rollout worker as Ray runs it: a shell whose module imports neither torch nor the worker's code.

Ray loads an actor's class wherever a handle to the actor is deserialised, not only where the actor runs: the
coordinator, which holds every worker's handle, would otherwise import ``distrl.rollout.worker`` and with it
torch (2-3 s of CPU on a 2-core machine, on the way to the first update) only to route calls. So the class Ray
sees is this shell: it builds the worker ``config`` needs (``worker_class.make_worker``) in its own process, on
construction, and hands each call on. In-process users (tests, ``distrl diagnose``, benchmarks) build the worker
itself.
"""

from __future__ import annotations

import ray

from distrl.rollout.stream import WEIGHTS_GROUP


class RolloutWorkerActor:
    """``RolloutWorker`` (or ``PolicySetWorker``) with its calls forwarded; see those for each call."""

    def __init__(self, config, *args, **kwargs):
        from distrl.rollout.worker_class import make_worker

        self.worker = make_worker(config, *args, **kwargs)

    def ready(self) -> str:
        return self.worker.ready()

    def backend_info(self) -> dict:
        return self.worker.backend_info()

    def placement(self) -> dict:
        return self.worker.placement()

    def set_weights(self, weights) -> None:
        self.worker.set_weights(weights)

    def stage_weights(self, weights) -> int:
        return self.worker.stage_weights(weights)

    def sample(self, weights=None, league=None) -> tuple:
        return self.worker.sample(weights, league)

    def sample_shards(self, weights=None, num_shards: int = 1, league=None) -> tuple:
        return self.worker.sample_shards(weights, num_shards, league)

    def close(self) -> None:
        self.worker.close()


def remote_worker_class():
    """The rollout worker as a Ray actor class: ``stage_weights`` runs on a thread of its own (call it with
    ``.options(concurrency_group=WEIGHTS_GROUP)``), beside the sample it updates; every other method runs one at a
    time as in a plain actor."""
    return ray.remote(concurrency_groups={WEIGHTS_GROUP: 1})(RolloutWorkerActor)
