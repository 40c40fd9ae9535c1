"""A torch dynamo backend named ``onnxrt`` for torches that no longer ship one (removed in torch 2.9).

Not the worker's ``onnxrt`` policy backend (``distrl/compile/backends/onnxrt.py``, which exports
the whole policy once): this one serves ``torch.compile`` calls anywhere, graph by graph.

``torch.compile(module, backend="onnxrt")`` exports each captured FX graph to ONNX and runs
it in ONNX Runtime. Parameters reach the graph as inputs (dynamo inlines nn.Modules), so
the session always sees the current weights. Registered through the
``torch_dynamo_backends`` entry point (no import is needed once distrl is installed), or by
``register()``.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch

BACKEND_NAME = "onnxrt"


def onnxrt_backend(gm: torch.fx.GraphModule, example_inputs):
    import onnxruntime as ort

    if not all(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in example_inputs):
        return gm.forward  # symbolic sizes or device tensors: run the graph as captured
    buffer = io.BytesIO()
    names = [f"input_{i}" for i in range(len(example_inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            gm,
            tuple(example_inputs),
            buffer,
            input_names=names,
            dynamo=False,
            opset_version=17,
            do_constant_folding=False,
        )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
    kept = {i.name for i in session.get_inputs()}
    used = [(i, name) for i, name in enumerate(names) if name in kept]

    def run(*args):
        feed = {name: np.ascontiguousarray(args[i].detach().numpy()) for i, name in used}
        return tuple(torch.from_numpy(out) for out in session.run(None, feed))

    return run


def register() -> None:
    """Register ``onnxrt`` unless this torch already has a backend of that name."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if BACKEND_NAME not in _COMPILER_FNS:
        register_backend(compiler_fn=onnxrt_backend, name=BACKEND_NAME)
