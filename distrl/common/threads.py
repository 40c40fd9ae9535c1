"""Torch's CPU thread count on the thread that runs torch.

``torch.set_num_threads`` sets OpenMP's count and MKL's (``mkl_set_num_threads_local``) for the calling
thread only. A Ray actor with concurrency groups (a rollout worker) runs its calls on threads Ray starts
after the constructor, which keep the process's default (``OMP_NUM_THREADS`` at start-up, else a thread
per core): workers sharing a few cores then spin MKL's OpenMP threads against each other around every small
matrix product, many times slower (docs/performance.md, "One slow worker among four"). ``use_torch_threads`` sets the
count on the calling thread, once per thread. A process that has not loaded torch (a rollout worker acting through
ONNX Runtime alone) has nothing to set: the first call after torch loads sets it.
"""

from __future__ import annotations

import contextlib
import sys
import threading

_set_here = threading.local()


def use_torch_threads(count: int) -> None:
    """Torch (OpenMP and MKL) uses ``count`` threads for the calling thread's work from now on."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(_set_here, "count", None) != count:
        torch.set_num_threads(count)
        _set_here.count = count


@contextlib.contextmanager
def torch_threads(count: int):
    """Torch (OpenMP and MKL) uses ``count`` threads for the calling thread's work inside the block, and its earlier
    count after: a policy acting for a caller's process (``distrl.load_policy``) leaves the caller's setting as it
    was. Small batches through small layers run fastest on one thread, and far faster than on a thread per core when
    other processes keep the cores busy (docs/performance.md, eval under load)."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else count
    if before != count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if before != count:
            torch.set_num_threads(before)
            _set_here.count = before
