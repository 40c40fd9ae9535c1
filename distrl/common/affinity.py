"""CPU affinity: a learner keeps cores of its machine for itself (``learner.reserve_cores``).

Where a learner shares its machine's cores with rollout workers, the kernel gives every runnable
process an equal share: four async workers and a learner on two cores left the learner 40 % of a
core while they sampled, and each update waited for it (docs/performance.md). A learner that
reserves cores claims them in a file of its machine's temp dir, holding its pid, and runs on them
alone; every rollout worker of a run with the setting runs on the machine's other cores. Workers
read the claims at each sample, so they follow a learner that is rebuilt elsewhere, and a claim
whose process is gone (a killed learner, a lost node's) counts for nothing. A fake multi-node
cluster on one machine shares its temp dir and its cores, so a claim covers it whole, as it
should. Sample Factory pins its rollout workers the same way (``set_workers_cpu_affinity``).

Affinity is a thread's own on Linux: each thread of the process is set, and threads started
later inherit their starter's. Elsewhere (no ``sched_setaffinity``) nothing is pinned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from pathlib import Path

CLAIMS_DIR = Path(tempfile.gettempdir()) / "distrl-learner-cores"
SUPPORTED = hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22): with the pid, it names one
    process, never a later one that reuses the pid. None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name, which may hold spaces or ')'


def _read_claims(directory: Path) -> dict[Path, set[int]]:
    """Every live claim in ``directory``: its file and its cores. A claim is ``PID STARTTIME CORE...``."""
    claims = {}
    for path in directory.glob("*.claim") if directory.is_dir() else ():
        try:
            pid, start, *cores = path.read_text().split()
            if _start_time(int(pid)) == start:
                claims[path] = {int(core) for core in cores}
        except (OSError, ValueError):  # removed meanwhile, or half-written by a process that died: not a claim
            continue
    return claims


def claimed_cores(directory: Path = CLAIMS_DIR) -> set[int]:
    """The cores this machine's live learners hold."""
    return set().union(*_read_claims(directory).values())


def claim_cores(count: int, directory: Path = CLAIMS_DIR) -> list[int]:
    """Claim ``count`` cores of those this process may use, none another live learner holds, and run every thread of
    this process on them; returns them, or [] (nothing pinned) where fewer than ``count`` + 1 are free (the workers
    need one) or affinity is not supported. Claims of processes that are gone are removed."""
    if not SUPPORTED or count < 1:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two learners starting on one machine take different cores
        live = _read_claims(directory)
        for path in directory.glob("*.claim"):
            if path not in live:
                with contextlib.suppress(OSError):
                    path.unlink()
        taken = set().union(*live.values())
        free = sorted(set(os.sched_getaffinity(0)) - taken)
        if len(free) < count + 1:
            return []
        cores = free[:count]
        pid = os.getpid()
        tmp = directory / f"{pid}.tmp"
        tmp.write_text(f"{pid} {_start_time(pid)} {' '.join(map(str, cores))}\n")
        tmp.replace(directory / f"{pid}.claim")  # whole or not at all
    pin_process(cores)
    return cores


def pin_process(cores) -> None:
    """Every thread of this process on ``cores``."""
    cores = set(cores)
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)


def keep_on(cores) -> None:
    """This process on ``cores``, if the calling thread is not (a thread started by Ray after ``claim_cores``)."""
    if SUPPORTED and set(os.sched_getaffinity(0)) != set(cores):
        pin_process(cores)


class WorkerCores:
    """A rollout worker's cores: those it was started with, less the cores live learners on its machine claim (all of
    them where that would leave none). ``settle`` applies the current claims; it runs at each sample."""

    def __init__(self, directory: Path = CLAIMS_DIR):
        self.directory = directory
        self.allowed = frozenset(os.sched_getaffinity(0)) if SUPPORTED else frozenset()
        self.cores: frozenset[int] = self.allowed
        self.lock = threading.Lock()

    def settle(self) -> frozenset[int]:
        """Run this process on its allowed cores less the claimed ones, if that changed; returns the cores."""
        if not SUPPORTED:
            return self.cores
        with self.lock:
            cores = frozenset(self.allowed - claimed_cores(self.directory)) or self.allowed
            if cores != self.cores or set(os.sched_getaffinity(0)) != cores:  # new claims, or a thread Ray started
                pin_process(cores)
                self.cores = cores
        return cores
