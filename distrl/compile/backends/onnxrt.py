"""``onnxrt``: the policy exported once to ONNX (on the driver) and run by ONNX Runtime on the CPU.

The exported graph takes the weights as inputs (``keep_initializers_as_inputs``), so a
weight sync rebinds arrays instead of rebuilding the session, and the graph can never
act with stale weights. Observations go in and outputs come out as numpy arrays without
copies (IOBinding).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from torch import nn

from distrl.compile.backends.base import Built

INPUT_NAMES = ("obs", "h", "c")
OUTPUT_NAMES = ("pd_params", "value", "h_out", "c_out")
OPTIONS = ("intra_op_num_threads", "graph_optimization_level")


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
        policy = OnnxRuntimePolicy(model_bytes, list(module.state_dict().keys()), len(example), options)
        policy.update_weights({k: v.detach().numpy() for k, v in module.state_dict().items()})
        return Built(policy)


def export_policy_onnx(module: nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> bytes:
    """ONNX bytes of ``module`` with its parameters and buffers as extra inputs (named as in its state dict)."""
    n = len(example_inputs)
    input_names = list(INPUT_NAMES[:n])
    output_names = list(OUTPUT_NAMES[: 2 if n == 1 else 4])
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(example_inputs),
            buffer,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes={name: {0: "batch"} for name in input_names + output_names},
            keep_initializers_as_inputs=True,
            do_constant_folding=False,
            export_params=True,
            dynamo=False,
            opset_version=17,
        )
    return buffer.getvalue()


class OnnxRuntimePolicy:
    backend = "onnxrt"
    shares_module = False

    def __init__(self, model_bytes: bytes, state_names: list[str], num_inputs: int, options: dict | None = None):
        import onnxruntime as ort

        options = dict(options or {})
        session_options = ort.SessionOptions()
        # N workers on N cores: each session uses its actor's CPUs and never spins waiting for work.
        session_options.intra_op_num_threads = int(options.pop("intra_op_num_threads", torch.get_num_threads()))
        session_options.inter_op_num_threads = 1
        session_options.log_severity_level = 3  # weights-as-inputs is deliberate; keep ORT's notice about it quiet
        session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        level = options.pop("graph_optimization_level", "all")
        session_options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
        if options:
            raise ValueError(f"unknown onnxrt options {sorted(options)} (allowed: {', '.join(OPTIONS)})")
        self.session = ort.InferenceSession(model_bytes, session_options, providers=["CPUExecutionProvider"])
        graph_inputs = {i.name for i in self.session.get_inputs()}
        graph_inputs |= {i.name for i in self.session.get_overridable_initializers()}
        # The exporter may drop parameters the graph does not use; bind only those it kept.
        self.state_names = [name for name in state_names if name in graph_inputs]
        self.input_names = list(INPUT_NAMES[:num_inputs])
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.binding = self.session.io_binding()
        self._weights: dict[str, np.ndarray] = {}

    def update_weights(self, state_dict: dict) -> None:
        import onnxruntime as ort

        for name in self.state_names:
            # A private contiguous copy: the binding points at this memory until the next sync.
            array = np.array(state_dict[name], copy=True, order="C")
            self._weights[name] = array
            self.binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        for name, array in zip(self.input_names, inputs):
            self.binding.bind_cpu_input(name, np.ascontiguousarray(array))
        for name in self.output_names:
            self.binding.bind_output(name)
        self.session.run_with_iobinding(self.binding)
        return tuple(self.binding.copy_outputs_to_cpu())


BACKEND = OnnxRuntimeBackend()
