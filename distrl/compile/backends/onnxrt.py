"""``onnxrt``: the policy exported once to ONNX (on the driver) and run by ONNX Runtime on the CPU.

The session and how a weight sync reaches it: ``distrl/compile/onnx_session.py``.
"""

from __future__ import annotations

import copy
import io
import warnings

import torch
from torch import nn

from distrl.compile.backends.base import Built
from distrl.compile.onnx_session import OnnxRuntimePolicy
from distrl.compile.policy import as_tuple

INPUT_NAMES = ("obs", "h", "c")
OUTPUT_NAMES = ("pd_params", "value", "h_out", "c_out")


class OnnxRuntimeBackend:
    name = "onnxrt"

    def available(self) -> tuple[bool, str]:
        try:
            import onnxruntime
        except ImportError:
            return False, "onnxruntime is not installed"
        return True, f"onnxruntime {onnxruntime.__version__}"

    def prepare(self, module, example, mode) -> dict:
        return {"onnx": export_policy_onnx(module, tuple(torch.from_numpy(x) for x in example))}

    def build(self, module, example, mode, options, artifacts) -> Built:
        model_bytes = artifacts.get("onnx") or self.prepare(module, example, mode)["onnx"]
        policy = OnnxRuntimePolicy(model_bytes, len(example), options, torch.get_num_threads())
        policy.update_weights({k: v.detach().numpy() for k, v in module.state_dict().items()})
        return Built(policy)


def export_policy_onnx(module: nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> bytes:
    """ONNX bytes of ``module``, its weights as initializers named as in its state dict.

    The exporter merges initializers with equal values (freshly initialised biases are all
    zeros), which would tie weights that training later makes different; so the graph is
    exported from a copy whose floating-point weights are random and distinct. Its values are
    never used: every session gets the real weights through ``update_weights``.
    """
    distinct = copy.deepcopy(module).eval()
    with torch.no_grad():
        num_outputs = len(as_tuple(distinct(*example_inputs)))
    input_names, output_names = io_names(len(example_inputs), num_outputs)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in distinct.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.randn(tensor.shape, generator=generator))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            distinct,
            tuple(example_inputs),
            buffer,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes={name: {0: "batch"} for name in input_names + output_names},
            do_constant_folding=False,  # ONNX Runtime folds at session build, with the real weights
            export_params=True,
            # The TorchScript exporter: it emits one fused LSTM node where dynamo=True decomposes the cell, and
            # exports in a fraction of the time (docs/usage.md, export). `distrl export` uses dynamo.
            dynamo=False,
            opset_version=17,
        )
    return buffer.getvalue()


def io_names(num_inputs: int, num_outputs: int) -> tuple[list[str], list[str]]:
    """The graph's input and output names: a policy's (obs[, h, c] -> pd_params, value[, h_out, c_out]) where
    the counts are a policy's, ``input_i`` / ``output_i`` for any other module (``compile_policy``)."""
    policy_shape = (num_inputs, num_outputs) in ((1, 2), (3, 4))
    if policy_shape:
        return list(INPUT_NAMES[:num_inputs]), list(OUTPUT_NAMES[:num_outputs])
    return [f"input_{i}" for i in range(num_inputs)], [f"output_{i}" for i in range(num_outputs)]


BACKEND = OnnxRuntimeBackend()
