"""Each rollout worker's restart budget (``rollout.max_restarts``): spent by its crashes and timeouts, never by its
node going away.

Ray restarts worker actors without limit (``driver/placement.py``) and this budget decides when a worker is given up:
Ray's own count cannot tell a crash from a lost node (a spot preemption). A restart is a crash when the node the worker
last sampled on is still alive and not draining once Ray has restarted it (Ray restarts a lost node's actors only after
calling the node dead), or when that node is unknown; restarts distrl causes (a timeout's kill, a drain) spend nothing
more.
"""

from __future__ import annotations

import ray


def draining_nodes() -> dict[str, int]:
    """Ray's draining nodes: hex node id -> deadline (ms since the epoch; 0: none given). The list Ray Train's
    preemption watcher reads (a private Ray API: there is no public one)."""
    return dict(ray._private.state.state.get_draining_nodes())


def node_usable(node_id: str) -> bool:
    """Whether node ``node_id`` is alive and not draining: Ray calls a lost node dead once its health checks fail, and
    places nothing new on a draining one."""
    alive = any(node["NodeID"] == node_id and node["Alive"] for node in ray.nodes())
    return alive and node_id not in draining_nodes()


class RestartBudget:
    def __init__(self, workers: list, limit: int):
        self.workers = workers
        self.limit = limit
        self.crashes = [0] * len(workers)
        self.timeouts = [0] * len(workers)
        self.killed: set[int] = set()  # killed by distrl (a timeout, a drain): their next restart is not a crash
        self.incarnations: dict[int, str] = {}  # the process each worker last answered from

    def seen(self, index: int, incarnation: str, last_node: str | None) -> str:
        """Worker ``index`` answered from process ``incarnation``; ``last_node``: where it sampled before. What the
        answer was: ``same`` (the process it knew, or its first), ``ours`` (the restart of distrl's own kill: a
        timeout's is counted as the timeout, a drain's spends nothing), ``node`` (a restart after its node was lost or
        drained: free), ``crash`` (a restart that spent one of the budget) or ``spent`` (the budget is spent: the
        worker is killed for good). Counting processes, not errors, counts a restart once however many calls failed
        while it happened."""
        known = self.incarnations.get(index)
        self.incarnations[index] = incarnation
        if known is None or known == incarnation:
            return "same"
        if index in self.killed:
            self.killed.discard(index)
            return "ours"
        if last_node and not node_usable(last_node):
            return "node"
        self.crashes[index] += 1
        return "crash" if self._within(index) else "spent"

    def timed_out(self, index: int) -> bool:
        """Worker ``index``'s sample passed its bound: killed for a restart while the budget lasts (True), else for
        good."""
        self.timeouts[index] += 1
        if not self._within(index):
            return False
        self.killed.add(index)
        ray.kill(self.workers[index], no_restart=False)  # Ray restarts it: a new process, a new env
        return True

    def move(self, index: int) -> None:
        """Worker ``index``'s node is draining: killed now for a restart, which Ray places on a node with room (none
        is placed on a draining node), before the node goes; spends nothing."""
        self.killed.add(index)
        ray.kill(self.workers[index], no_restart=False)

    def _within(self, index: int) -> bool:
        if self.crashes[index] + self.timeouts[index] <= self.limit:
            return True
        ray.kill(self.workers[index], no_restart=True)
        return False

    def describe(self, index: int) -> str:
        """What spent worker ``index``'s restarts, for the line that gives it up."""
        parts = []
        if self.crashes[index]:
            parts.append(f"its process died {self.crashes[index]} times")
        if self.timeouts[index]:
            parts.append(f"it timed out {self.timeouts[index]} times (rollout.sample_timeout_s)")
        return "; ".join(parts)
