"""Drain notices: Ray says a node is about to go (``ray drain-node``, the autoscaler's idle and preemption
handling, KubeRay's); the run acts before it does.

A thread polls Ray's draining nodes (``{node id: deadline in ms}``, the list Ray Train's preemption
watcher reads) every ``POLL_S``. The first time a node the run uses is draining:

- the learners' node: a checkpoint is written at once (mirrored to the storage URI if set), from the
  newest snapshot the driver holds, so a preempted run resumes with at most that much lost;
- a rollout worker's node: its workers are restarted at once (by the coordinator, which keeps their
  restart budget: a move spends none), and Ray places them on nodes with room, never on a draining
  one; no round waits for them meanwhile. With no room they wait as pending actors (an autoscaler's
  demand) and rejoin when a node with room comes, as a lost node's workers do.
"""

from __future__ import annotations

import threading
import time

from distrl.common.log import get_logger
from distrl.rollout.restarts import draining_nodes

log = get_logger("driver")
POLL_S = 1.0


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
            self.actors.coordinator.move_workers.remote([int(name.split("-")[1]) for name in workers])
            log.warning(
                f"{', '.join(workers)} on draining node {short}{left}: restarted now on nodes with room "
                "(Ray places nothing on a draining node)"
            )

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
