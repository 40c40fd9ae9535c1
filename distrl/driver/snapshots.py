"""The newest learner state, held by the driver: what a dead learner is rebuilt from and a checkpoint is written from.

Rank 0 returns a snapshot of its full state with every update, its tensors as numpy arrays (``Learner.snapshot``:
Ray stores those out of band, so the copy costs a memcpy, not a pickle). That object is stored where the
learner runs: a learner lost with its node would take its newest snapshot with it, and the run would
have nothing to rebuild from. So the driver copies each snapshot into its own process as soon as it
exists (in a thread, off the loop's path: a Nature-CNN's state with Adam's is tens of MB) and rebuilds
and checkpoints from that copy. If a snapshot's object is lost before its copy arrives, the one before
it is used, and the driver says so.

With ``learner.snapshot_every_s`` the updates send one on a budget (``loops/updates.py`` decides which), and the state
held may be some updates behind the learner's: a rebuilt learner then loses their learning, and starts from the held
state with the learner's newest version number (``newest_ref``), so versions never go backwards (workers, staleness
and V-trace read them). A checkpoint takes the learner's current state instead (``Driver.checkpoint_payload``).
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
        self.trained = _version(state)  # the newest version the learner made, as far as the driver knows
        self.pending: Future | None = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="distrl-snapshot")

    def offer(self, state_ref: ray.ObjectRef | None, version: int) -> None:
        """The update that just landed made ``version``; ``state_ref``: its snapshot, copied into this process in the
        background (None: this update sent none)."""
        self.trained = max(self.trained, version)
        if state_ref is None:
            return
        self._settle(wait=False)
        self.pending = self.pool.submit(ray.get, state_ref)

    def behind(self) -> int:
        """How many versions the newest state held is behind the learner's newest (0: it is that one)."""
        self._settle(wait=True)
        return self.trained - _version(self.held) if self.held is not None else 0

    def take(self, state: dict) -> None:
        """A state fetched from learner-0 just now (a checkpoint's): the newest held from here on."""
        self._settle(wait=True)
        self.held = state
        self.trained = max(self.trained, _version(state))

    def _settle(self, wait: bool) -> None:
        if self.pending is None or not (wait or self.pending.done()):
            return
        pending, self.pending = self.pending, None
        try:
            self.held = pending.result()
        except ray.exceptions.ObjectLostError:  # its node went down before the copy: the one before it stands
            log.warning(
                "the newest learner snapshot was lost with its node before the driver copied it; the learners "
                "are rebuilt from the one before"
            )

    def newest(self) -> dict | None:
        """The newest state the driver holds, as tensors (waiting for a copy under way): what a checkpoint holds."""
        self._settle(wait=True)
        return from_wire(self.held)

    def newest_ref(self) -> ray.ObjectRef | None:
        """The newest state in the object store, owned and stored by this process: for rebuilding learners (as it
        came, arrays out of band)."""
        self._settle(wait=True)
        if self.held is None:
            return None
        return ray.put({**self.held, "version": max(_version(self.held), self.trained)})

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _version(state: dict | None) -> int:
    return int(state["version"]) if state is not None else 0
