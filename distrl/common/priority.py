"""Process priority: rollout workers can yield the CPU to the learner where they share cores
(``rollout.worker_niceness``, 0 by default).

A learner that shares cores with sampling workers gets an equal share of them under the kernel's fair
scheduler: with four workers and a learner on two cores, 40 % of a core while the workers sample. Run
nicer than the learner, the workers still take every cycle it leaves, but it runs first (Sample Factory
runs its rollout workers 10 nicer than its learner for the same reason). Ray starts every worker process,
the learner's too, at its own niceness (15; ``RAY_worker_niceness``), so a worker's is raised relative to
the one it started with; lowering it again would need privileges. Nicer workers also yield to every Ray
process at niceness 0 (the raylet, the GCS, the dashboard's agents), likely part of why 10 lost to 0 on 2
cores (docs/performance.md, "Async beside lockstep").
"""

from __future__ import annotations

import os
import threading

MAX_NICENESS = 19


def raise_niceness(by: int) -> int:
    """Every thread of this process ``by`` nicer than the calling thread started (at most 19); threads started later
    inherit the value of the thread that starts them. On Linux niceness is a thread's own, so each thread is set;
    elsewhere ``setpriority`` of the process sets them all. Returns the niceness set (the calling thread's if ``by`` is
    0)."""
    if not hasattr(os, "getpriority"):
        return 0
    target = min(MAX_NICENESS, os.getpriority(os.PRIO_PROCESS, _current_tid()) + max(0, by))
    if by > 0:
        tids = [int(tid) for tid in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
        for tid in tids:
            at_least(target, tid)
    return target


def at_least(niceness: int, tid: int | None = None) -> None:
    """Thread ``tid`` (default: the calling one) at ``niceness`` or nicer: a thread started before ``raise_niceness``
    that now runs the worker's calls."""
    if not hasattr(os, "setpriority"):
        return
    tid = _current_tid() if tid is None else tid
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
    except OSError:  # a thread that ended meanwhile, or a platform that refuses
        pass


def _current_tid() -> int:
    return threading.get_native_id() if os.path.isdir("/proc/self/task") else 0
