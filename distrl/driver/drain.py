"""Drain notices: Ray says a node is about to go (``ray drain-node``, the autoscaler's idle and preemption
handling, KubeRay's); the run acts before it does.

A thread polls Ray's draining nodes (``{node id: deadline in ms}``, the list Ray Train's preemption
watcher reads) every ``POLL_S``. The first time a node the run uses is draining:

- the learners' node: a checkpoint is written at once (mirrored to the storage URI if set), from the
  newest snapshot the driver holds, so a preempted run resumes with at most that much lost;
- a rollout worker's node: said once; the workers sample until the node goes and are then restarted
  by Ray where there is room, as a lost node's are (killing them early lost them: Ray did not restart
  an actor killed on a draining node).
"""

from __future__ import annotations

import threading
import time

import ray

from distrl.common.log import get_logger

log = get_logger("driver")
POLL_S = 1.0


def draining_nodes() -> dict[str, int]:
    """Ray's draining nodes: hex node id -> deadline (ms since the epoch; 0: none given)."""
    return dict(ray._private.state.state.get_draining_nodes())


class DrainWatcher:
    def __init__(self, actors, checkpoint, poll_s: float = POLL_S):
        """``actors``: the run's ``RunActors`` (where each actor is); ``checkpoint()``: write one now."""
        self.actors = actors
        self.checkpoint = checkpoint
        self.poll_s = poll_s
        self.seen: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="distrl-drain-watch", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                draining = draining_nodes()
            except Exception as exc:  # the GCS is busy or restarting: the next poll asks again
                log.debug(f"drain poll failed: {exc}")
                continue
            for node_id, deadline_ms in draining.items():
                if node_id not in self.seen:
                    self.seen.add(node_id)
                    self._act(node_id, deadline_ms)

    def _act(self, node_id: str, deadline_ms: int) -> None:
        left = f", {max(0.0, deadline_ms / 1000 - time.time()):.0f} s before its deadline" if deadline_ms else ""
        placement = self.actors.placement
        on_node = sorted(name for name, spot in placement.items() if spot.get("node_id") == node_id)
        if not on_node:
            return
        short = node_id[:8]
        if any(name.startswith("learner-") for name in on_node):
            try:
                path = self.checkpoint()
                log.warning(f"the learners' node {short} is draining{left}: checkpoint written at once ({path})")
            except Exception as exc:  # the run goes on; the next periodic checkpoint tries again
                log.warning(f"the learners' node {short} is draining{left}; the checkpoint failed: {exc}")
        workers = [name for name in on_node if name.startswith("worker-")]
        if workers:
            # Left where they are until the node goes: a worker killed on a draining node was not restarted by Ray
            # (it was lost for good in tests/test_nodes.py), while one lost with its node is restarted where there
            # is room, as any lost node's are.
            log.warning(f"{', '.join(workers)} on draining node {short}{left}: they sample until it goes, then Ray "
                        "restarts them where there is room")  # fmt: skip

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
