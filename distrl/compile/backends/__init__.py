"""Worker policy backends: one file each, one row in ``BACKENDS``.

The table is plain data, importable without torch: the config takes its allowed names and
rules from it before anything heavy loads. ``load_backend`` imports a backend's file on
first use. Adding a backend: write ``backends/NAME.py`` with a ``BACKEND`` object (the
``Backend`` protocol in ``backends/base.py``) and add its row here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrl.compile.backends.base import Backend


@dataclass(frozen=True)
class BackendSpec:
    name: str
    summary: str
    takes_mode: bool = False  # rollout.compile.mode means something to it (torch.compile modes)
    options: str = ""  # what rollout.compile.options may hold; "" = takes none
    options_exclude_mode: bool = False  # options and a mode cannot be given together
    chooses: bool = False  # picks among the others, so it never fails and `strict` is meaningless
    runs_torch: bool = False  # runs the torch module's kernels: takes rollout.compile.precision and memory_format


BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("eager", "the torch module as it is", runs_torch=True),
        BackendSpec(
            "inductor",
            "torch.compile with inductor",
            takes_mode=True,
            options="torch.compile inductor options",
            options_exclude_mode=True,
            runs_torch=True,
        ),
        BackendSpec(
            "onnxrt", "ONNX Runtime on the exported policy", options="{intra_op_num_threads, graph_optimization_level}"
        ),
        BackendSpec("ipex", "torch.compile with intel-extension-for-pytorch", runs_torch=True),
        BackendSpec(
            "cuda", "the policy on the worker's GPU share (rollout.num_gpus_per_worker), replayed as a CUDA graph"
        ),
        BackendSpec(
            "auto",
            "times every available backend here and keeps the fastest",
            takes_mode=True,
            options="{BACKEND: that backend's options}",
            chooses=True,
        ),
    )
}


def load_backend(name: str) -> Backend:
    """The ``Backend`` object of ``backends/NAME.py``."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    return importlib.import_module(f"distrl.compile.backends.{name}").BACKEND
