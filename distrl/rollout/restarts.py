"""Each rollout worker's restart budget (``rollout.max_restarts``): spent by its crashes and timeouts, never by its
node going away.

Ray restarts worker actors without limit (``max_restarts=-1``, ``driver/placement.py``) and this budget decides
when a worker is given up: Ray's own count cannot tell a process that crashed from a node that was lost (a spot
preemption), so a lost node would spend the budget meant for an env that keeps crashing. A restart is a crash when
the node the worker last sampled on is still alive once Ray has restarted it (Ray restarts a lost node's actors
only after calling the node dead), or when that node is unknown.
"""

from __future__ import annotations

import ray


def node_alive(node_id: str) -> bool:
    """Whether Ray still counts node ``node_id`` alive (a lost node is called dead once its health checks fail)."""
    return any(node["NodeID"] == node_id and node["Alive"] for node in ray.nodes())


class RestartBudget:
    def __init__(self, workers: list, limit: int):
        self.workers = workers
        self.limit = limit
        self.crashes = [0] * len(workers)
        self.timeouts = [0] * len(workers)

    def restarted(self, index: int, last_node: str | None) -> bool:
        """Worker ``index`` was restarted (it answers again); ``last_node``: where it sampled before. A crash spends
        one restart; False once the budget is spent (the worker is then killed for good)."""
        if last_node and not node_alive(last_node):
            return True  # its node is gone: free
        self.crashes[index] += 1
        return self._within(index)

    def timed_out(self, index: int) -> bool:
        """Worker ``index``'s sample passed its bound: killed for a restart while the budget lasts (True), else for good."""
        self.timeouts[index] += 1
        if not self._within(index):
            return False
        ray.kill(self.workers[index], no_restart=False)  # Ray restarts it: a new process, a new env
        return True

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
