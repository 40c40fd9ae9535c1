"""SampleCoordinator: the actor that drives every rollout worker's sampling for the driver.

Whoever submits a Ray task owns its return objects and does the bookkeeping for each one
(locations, borrowers, freeing). With N workers and M learners that is N x (1 + M) objects
per iteration; done by the driver, its CPU per iteration grew with N. The coordinator takes
that work: the driver makes a constant number of calls per iteration (one ``sample``, one
``gather``, one update per learner) and passes along a few small objects that hold refs,
never the refs one by one. Learner r fetches the shards its object names.
"""

from __future__ import annotations

import ray


class SampleCoordinator:
    def __init__(self, workers: list, num_shards: int):
        self.workers = workers
        self.num_shards = num_shards

    def sample(self, weights: list) -> tuple[list, ...]:
        """Start every worker's next sample; at once returns ``(info refs, shard refs of rank 0, of rank 1, ...)``.

        ``weights`` is ``[ObjectRef]`` (wrapped, so it reaches the workers as a ref, not as a copy made here).
        """
        world = self.num_shards
        refs = [w.sample_shards.options(num_returns=1 + world).remote(weights[0], world) for w in self.workers]
        return (tuple(r[0] for r in refs), *(tuple(r[1 + rank] for r in refs) for rank in range(world)))

    def gather(self, info_refs: tuple) -> list[dict]:
        """The workers' infos (a few hundred bytes each), fetched here and returned as one object."""
        return ray.get(list(info_refs))
