"""Worker backends built on ``torch.compile``: ``inductor`` and ``ipex``.

Parameters stay graph inputs, so a weight sync is an in-place copy the compiled graph sees
on its next call. Inductor's ``freezing`` option bakes weights into the graph and has given
wrong outputs after ``load_state_dict`` on some builds; it is allowed only because every
policy is checked against eager after a weight change at build time and after each sync,
and replaced by eager when it disagrees.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distrl.compile.policy import load_state_dict_numpy


def dynamo_counts() -> dict[str, int]:
    """Graphs compiled so far in this process and graph breaks seen (process-wide dynamo counters)."""
    from torch._dynamo.utils import counters

    return {
        "compiled_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


class TorchCompiledPolicy:
    """``torch.compile(module, backend=...)`` behind the numpy-in, numpy-out worker interface."""

    shares_module = True

    def __init__(self, module: nn.Module, backend: str, mode: str | None = None, options: dict | None = None):
        self.backend = backend
        self.module = module.eval()
        options = dict(options or {})
        kwargs: dict = {"backend": backend, "dynamic": False}
        if backend == "inductor":
            if mode not in (None, "default"):
                kwargs["mode"] = mode
            elif options:
                kwargs["options"] = options
        self.compiled = torch.compile(self.module, **kwargs)

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        with torch.inference_mode():
            outputs = self.compiled(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
        # Copies: a compiled graph may reuse its output buffers on the next call.
        return tuple(o.numpy().copy() for o in outputs)

    def update_weights(self, state_dict: dict) -> None:
        load_state_dict_numpy(self.module, state_dict)


def ipex_available() -> tuple[bool, str]:
    try:
        import intel_extension_for_pytorch  # noqa: F401  (registers the "ipex" dynamo backend)
    except ImportError:
        return False, (
            "intel-extension-for-pytorch is not installed; it needs torch 2.8: "
            "pip install 'distrl[ipex]' in an environment of its own"
        )
    except Exception as exc:  # ipex refuses to import on a torch it was not built for
        return False, f"intel-extension-for-pytorch failed to import: {str(exc).splitlines()[0][:200]}"
    return True, f"intel-extension-for-pytorch {intel_extension_for_pytorch.__version__}"
