"""The newest learner state, held by the driver: what a dead learner is rebuilt from and a checkpoint is written from.

Rank 0 returns a snapshot of its full state with every update, its tensors as numpy arrays (``Learner.snapshot``:
Ray stores those out of band, so the copy costs a memcpy, not a pickle). That object is stored where the
learner runs: a learner lost with its node would take its newest snapshot with it, and the run would
have nothing to rebuild from. So the driver copies each snapshot into its own process as soon as it
exists (in a thread, off the loop's path: a Nature-CNN's state with Adam's is tens of MB) and rebuilds
and checkpoints from that copy. If a snapshot's object is lost before its copy arrives, the one before
it is used, and the driver says so.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import ray

from distrl.common.log import get_logger
from distrl.common.wire import from_wire

log = get_logger("driver")


class SnapshotKeeper:
    def __init__(self, state: dict | None = None):
        """``state``: a resumed run's learner state (None: a new run's learners start from their own)."""
        self.held = state
        self.pending: Future | None = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="distrl-snapshot")

    def offer(self, state_ref: ray.ObjectRef) -> None:
        """The snapshot of the update that just landed: copied into this process in the background."""
        self._settle(wait=False)
        self.pending = self.pool.submit(ray.get, state_ref)

    def _settle(self, wait: bool) -> None:
        if self.pending is None or not (wait or self.pending.done()):
            return
        pending, self.pending = self.pending, None
        try:
            self.held = pending.result()
        except ray.exceptions.ObjectLostError:  # its node went down before the copy: the one before it stands
            log.warning("the newest learner snapshot was lost with its node before the driver copied it; the learners "
                        "are rebuilt from the one before (one update is trained again)")  # fmt: skip

    def newest(self) -> dict | None:
        """The newest state the driver holds, as tensors (waiting for a copy under way): what a checkpoint holds."""
        self._settle(wait=True)
        return from_wire(self.held)

    def newest_ref(self) -> ray.ObjectRef | None:
        """The newest state in the object store, owned and stored by this process: for rebuilding learners (as it
        came, arrays out of band)."""
        self._settle(wait=True)
        return ray.put(self.held) if self.held is not None else None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
