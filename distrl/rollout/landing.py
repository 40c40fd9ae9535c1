"""Landing: each batch's shards pulled to the node of the learner rank that trains them, as soon as the sample returns.

A sample's shards are created in its worker's object store. The learner that trains shard r reads it from wherever it
is; a batch is in (it can join the queue or its round) once each shard is on its learner's node, so the worker's node
may go after that without costing the batch (Ray's owner finds the copy on the learner's node). The bytes go from the
worker's node to the learner's and nowhere else: the coordinator, on the driver's node, keeps refs and metadata only.

Ray has no call that pushes an object to another node, so a ``ShardPuller`` on each learner's node (on no resources)
waits on the shards with ``fetch_local``. Shards already on their learner's node (a worker beside its learner, every
run on one machine) and every shard while no learner node is known are in at once. A puller lost with its node, or a
pull past its bound, leaves the batch where it is: the learner reads it from the worker's node, or counts it lost
with that node (``learner/refs.py``), as it would any batch lost before it was in.

Shards under Ray's inline size (100 KiB) are not stored on the worker's node at all: they travel in the sample task's
reply to its owner, the coordinator, and from there to the learner (docs/scaling.md says where that matters).
"""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

PULLS_AT_ONCE = 64  # a puller's concurrent pulls: the batches landing at once, each waiting on the network


class ShardPuller:
    """On a learner's node: makes the shards it is given local to this node's object store."""

    def pull(self, shards: list, timeout_s: float) -> int:
        """Wait until every shard in ``shards`` (``[ObjectRef]``, not resolved) is in this node's store, at most
        ``timeout_s``; how many are."""
        ready, _ = ray.wait(shards, num_returns=len(shards), timeout=timeout_s, fetch_local=True)
        return len(ready)


class Landing:
    """The coordinator's side: where each rank's learner runs, a puller per learner node, and the batches whose
    shards are on their way there. Used under the sampler's lock."""

    def __init__(self):
        self.rank_nodes: list[str] = []  # the node of each learner rank ([]: not known yet)
        self.pullers: dict[str, object] = {}  # learner node -> its puller's handle
        self.pulls: dict = {}  # a pull's reply ref -> id of its batch
        self.batches: dict[int, list] = {}  # id of a batch landing -> [pulls left, batch]

    def learners_at(self, rank_nodes: list[str]) -> None:
        """The learners run on ``rank_nodes`` (rank r's node id) from now on; pullers on nodes no rank uses any more
        are let go (a pull of theirs in flight still answers, or fails with the node)."""
        self.rank_nodes = list(rank_nodes)
        for node in [node for node in self.pullers if node not in self.rank_nodes]:
            ray.kill(self.pullers.pop(node), no_restart=True)

    def land(self, batch: tuple, sampled_on: str, timeout_s: float) -> bool:
        """Start pulling ``batch`` (``(info, shard refs by rank)``), sampled on node ``sampled_on``, to its learners'
        nodes; True when it is in already (nothing to move)."""
        elsewhere: dict[str, list] = {}
        for rank, shard in enumerate(batch[1]):
            node = self.rank_nodes[rank] if rank < len(self.rank_nodes) else ""
            if node and node != sampled_on:
                elsewhere.setdefault(node, []).append(shard)
        if not elsewhere:
            return True
        key = id(batch)
        self.batches[key] = [len(elsewhere), batch]
        for node, shards in elsewhere.items():
            self.pulls[self._puller(node).pull.remote(shards, timeout_s)] = key
        return False

    def waiting(self) -> list:
        """The pulls in flight: their replies say a batch's shards are on a learner's node."""
        return list(self.pulls)

    def pulled(self, reply) -> tuple | None:
        """A pull answered (or failed: its puller's node is gone); the batch once every pull of it has."""
        key = self.pulls.pop(reply)
        try:
            ray.get(reply)
        except ray.exceptions.RayError:  # the learner's node went: the shards stay where they were sampled
            pass
        entry = self.batches[key]
        entry[0] -= 1
        if entry[0] > 0:
            return None
        del self.batches[key]
        return entry[1]

    def __len__(self) -> int:
        """Batches landing."""
        return len(self.batches)

    def _puller(self, node: str):
        if node not in self.pullers:
            self.pullers[node] = (
                ray.remote(ShardPuller)
                .options(
                    num_cpus=0,
                    max_concurrency=PULLS_AT_ONCE,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                )
                .remote()
            )
        return self.pullers[node]
