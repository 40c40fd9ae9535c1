"""CPU affinity: a learner keeps cores of its machine for itself while it updates (``learner.reserve_cores``).

Where a learner shares its machine's cores with rollout workers, the kernel gives every runnable
process an equal share: four async workers and a learner on two cores left the learner 40 % of a
core while they sampled, and each update waited for it (docs/performance.md). A learner that
reserves cores claims them in a file of its machine's temp dir, holding its pid, and runs on them
alone. Beside the claim, a one-byte flag says whether it is updating: while it is, every rollout
worker with the setting on that machine runs on its other cores; between updates they use them
all, so a learner that waits for batches leaves no core idle (a claim held for good cost Acrobot,
whose workers are the slow side, a quarter more wall time). Workers read the flag at each env step
and the claims at each sample, so they follow a learner rebuilt elsewhere, and a claim whose
process is gone (a killed learner, a lost node's) counts for nothing. A fake multi-node cluster on
one machine shares its temp dir and its cores, so a claim covers it whole, as it should. Sample
Factory pins its rollout workers too (``set_workers_cpu_affinity``), for good.

Affinity is a thread's own on Linux: each thread of the process is set, and threads started
later inherit their starter's. Elsewhere (no ``sched_setaffinity``) nothing is pinned.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
import threading
import time
from pathlib import Path

CLAIMS_DIR = Path(tempfile.gettempdir()) / "distrl-learner-cores"
SUPPORTED = hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")
CHILDREN_EVERY_S = 10.0  # how often a worker looks for env processes it started (a scan of /proc: milliseconds)


def _stat_fields(pid: int | str) -> list[str]:
    """``/proc/PID/stat`` from its third field on (state, parent, ...): the fields after the command name, which may
    hold spaces or ')'. OSError when there is no such process."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22): with the pid, it names one process, never a
    later one that reuses the pid. None when there is no such process."""
    try:
        return _stat_fields(pid)[19]
    except OSError:
        return None


def _read_claims(directory: Path) -> dict[Path, frozenset[int]]:
    """Every live claim in ``directory``: its file and its cores. A claim is ``PID STARTTIME CORE...``."""
    claims = {}
    for path in directory.glob("*.claim") if directory.is_dir() else ():
        try:
            pid, start, *cores = path.read_text().split()
            if _start_time(int(pid)) == start:
                claims[path] = frozenset(int(core) for core in cores)
        except (OSError, ValueError):  # removed meanwhile, or half-written by a process that died: not a claim
            continue
    return claims


def claimed_cores(directory: Path = CLAIMS_DIR) -> set[int]:
    """The cores this machine's live learners claim (updating or not)."""
    return set().union(*_read_claims(directory).values())


class LearnerCores:
    """A learner's claim on ``count`` cores of its machine: every thread of this process runs on them, and while
    ``updating`` the workers leave them to it. ``cores`` is [] (nothing pinned) where fewer than ``count`` + 1 cores
    are unclaimed (the workers need one) or affinity is not supported."""

    def __init__(self, count: int, directory: Path = CLAIMS_DIR):
        self.cores: list[int] = []
        self.flag: mmap.mmap | None = None
        if not SUPPORTED or count < 1:
            return
        import fcntl  # POSIX only, as affinity is

        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two learners starting on one machine take different cores
            live = _read_claims(directory)
            for path in directory.glob("*.claim"):  # claims of processes that are gone, with their flags
                if path not in live:
                    for stale in (path, path.with_suffix(".busy")):
                        with contextlib.suppress(OSError):
                            stale.unlink()
            free = sorted(set(os.sched_getaffinity(0)) - set().union(*live.values()))
            if len(free) < count + 1:
                return
            self.cores = free[:count]
            pid = os.getpid()
            busy = directory / f"{pid}.busy"
            busy.write_bytes(b"\0")  # the flag first: a worker that reads the claim finds it
            with open(busy, "r+b") as f:
                self.flag = mmap.mmap(f.fileno(), 1)
            tmp = directory / f"{pid}.tmp"
            tmp.write_text(f"{pid} {_start_time(pid)} {' '.join(map(str, self.cores))}\n")
            tmp.replace(directory / f"{pid}.claim")  # whole or not at all
        pin_process(self.cores)

    @contextlib.contextmanager
    def updating(self):
        """The workers leave this learner's cores while the block runs (and it runs on them: a thread Ray started
        after the constructor is pinned here)."""
        if self.flag is None:
            yield
            return
        if set(os.sched_getaffinity(0)) != set(self.cores):
            pin_process(self.cores)
        self.flag[0] = 1
        try:
            yield
        finally:
            self.flag[0] = 0


def pin_process(cores, pid: int | None = None) -> None:
    """Every thread of process ``pid`` (default: this one) on ``cores``."""
    cores = set(cores)
    try:
        tids = os.listdir(f"/proc/{pid or 'self'}/task")
    except OSError:  # a process that ended meanwhile
        return
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)


def _children() -> list[int]:
    """This process's child processes (an ``env.vectorization: async`` worker's env processes): found by their parent
    in ``/proc/PID/stat``, as kernels without ``/proc/PID/task/TID/children`` need."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(_stat_fields(entry)[1]) == me:  # field 4: the parent
                    found.append(int(entry))
    return found


class WorkerCores:
    """A rollout worker's cores: those it was started with, less the cores of the learners on its machine that are
    updating now (all of them where that would leave none), for its own threads and its env processes. ``refresh``
    reads the claims (at each sample); ``follow`` reads their flags and moves the worker when they change (at each
    env step: a byte per claim)."""

    def __init__(self, directory: Path = CLAIMS_DIR):
        self.directory = directory
        self.allowed = frozenset(os.sched_getaffinity(0)) if SUPPORTED else frozenset()
        self.cores: frozenset[int] = self.allowed
        self.claims: dict[Path, tuple[frozenset[int], mmap.mmap]] = {}
        self.children: list[int] = []
        self.children_at = -CHILDREN_EVERY_S
        self.lock = threading.Lock()

    def refresh(self) -> frozenset[int]:
        """Read the live claims and map their flags; then ``follow``."""
        if not SUPPORTED:
            return self.cores
        with self.lock:
            live = _read_claims(self.directory)
            for path in [p for p in self.claims if p not in live]:
                self.claims.pop(path)[1].close()
            for path, cores in live.items():
                if path not in self.claims:
                    with contextlib.suppress(OSError, ValueError), open(path.with_suffix(".busy"), "rb") as f:
                        self.claims[path] = (cores, mmap.mmap(f.fileno(), 1, access=mmap.ACCESS_READ))
            # Pinned again even where the cores did not change: env processes started since the last look, or a thread
            # Ray started since the last move.
            pin_anyway = time.monotonic() - self.children_at >= CHILDREN_EVERY_S
            if pin_anyway:
                self.children, self.children_at = _children(), time.monotonic()
            pin_anyway = pin_anyway or set(os.sched_getaffinity(0)) != self.cores
        return self.follow(pin_anyway)

    def follow(self, pin_anyway: bool = False) -> frozenset[int]:
        """Run on the allowed cores less those of learners updating now, if that changed (or ``pin_anyway``); returns
        the cores."""
        if not self.claims and self.cores == self.allowed and not pin_anyway:
            return self.cores
        taken = frozenset().union(*(cores for cores, flag in self.claims.values() if flag[0]))
        cores = (self.allowed - taken) or self.allowed
        if cores != self.cores or pin_anyway:
            for pid in [None, *self.children]:
                pin_process(cores, pid)
            self.cores = cores
        return cores
