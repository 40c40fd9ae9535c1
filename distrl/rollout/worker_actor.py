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


def _forward(name: str):
    def call(self, *args, **kwargs):
        return getattr(self.worker, name)(*args, **kwargs)

    call.__name__, call.__qualname__ = name, f"RolloutWorkerActor.{name}"
    return call


# Ray makes an actor method of each function on the class when it is made remote.
for _name in ("ready", "backend_info", "placement", "set_weights", "stage_weights", "sample", "sample_shards", "close"):
    setattr(RolloutWorkerActor, _name, _forward(_name))


def remote_worker_class():
    """The rollout worker as a Ray actor class: ``stage_weights`` runs on a thread of its own (call it with
    ``.options(concurrency_group=WEIGHTS_GROUP)``), beside the sample it updates; every other method runs one at a
    time as in a plain actor."""
    return ray.remote(concurrency_groups={WEIGHTS_GROUP: 1})(RolloutWorkerActor)
