"""The ``onnxrt`` backend's session: the policy exported once to ONNX (on the driver) and run by ONNX Runtime on the
CPU. Importable without torch: a worker that acts through it need not load torch (``distrl/compile/shipped.py``).

The weights are the graph's initializers, so ONNX Runtime folds constants and pre-packs the
GEMM and convolution weights when it builds the session: the policy runs at the runtime's own
speed. A weight sync writes the new weights into the model's initializers (no re-export) and
builds a new session before the next action, so the policy never acts with stale weights (and
the every-sync check against eager would catch it if it did). ``SessionOptions.add_initializer``
would skip the serialisation, but ONNX Runtime folds constants with the model's own initializer
values before applying those overrides: the LSTM's gate weights (sliced and concatenated in the
graph) came out stale. A sync costs one serialisation and one session build (measured in
``benchmarks/policy_call/inference.py``).

The weights are written into a ModelProto parsed anew for each sync from a skeleton whose
initializers hold no data, and dropped after the session is built. protobuf's upb runtime
allocates an assigned bytes field in the message's arena and frees nothing until the message
itself goes: a ModelProto kept for the run and rewritten at every sync grew by one copy of the
weights per sync (about 70 KB for the MLP, megabytes for the Nature-CNN; ``benchmarks/policy_call/soak.py``).
"""

from __future__ import annotations

import numpy as np

OPTIONS = ("intra_op_num_threads", "graph_optimization_level")


class OnnxRuntimePolicy:
    backend = "onnxrt"
    shares_module = False

    def __init__(self, model_bytes: bytes, num_inputs: int, options: dict | None = None, threads: int = 1):
        """``options``: ``rollout.compile.options`` (``OPTIONS``); ``threads``: the session's intra-op threads unless
        the options name them (the worker's CPUs)."""
        import onnx
        import onnxruntime as ort

        options = dict(options or {})
        self.threads = int(options.pop("intra_op_num_threads", threads))
        level = options.pop("graph_optimization_level", "all")
        levels = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }
        if options or level not in levels:
            unknown = sorted(options) or [f"graph_optimization_level={level}"]
            raise ValueError(
                f"unknown onnxrt options {unknown} (allowed: {', '.join(OPTIONS)}; levels {', '.join(levels)})"
            )
        self.level = levels[level]
        model = onnx.load_from_string(model_bytes)
        # The exporter drops weights the graph does not use; the rest are the initializers to rewrite.
        self.initializers = {
            tensor.name: (tuple(tensor.dims), onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
            for tensor in model.graph.initializer
        }
        for tensor in model.graph.initializer:
            tensor.ClearField("float_data")
            tensor.ClearField("raw_data")
        self.skeleton = model.SerializeToString()  # the graph without weight data: parsed anew at each sync
        self.input_names = [value.name for value in model.graph.input if value.name not in self.initializers]
        self.session = None  # built by the first update_weights

    def _session_options(self):
        import onnxruntime as ort

        session_options = ort.SessionOptions()
        # N workers on N cores: each session uses its actor's CPUs and never spins waiting for work.
        session_options.intra_op_num_threads = self.threads
        session_options.inter_op_num_threads = 1
        session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session_options.graph_optimization_level = self.level
        session_options.log_severity_level = 3
        return session_options

    def update_weights(self, state_dict: dict) -> None:
        import onnx
        import onnxruntime as ort

        model = onnx.ModelProto()
        model.ParseFromString(self.skeleton)  # a new message (and arena) per sync, freed when this returns
        for tensor in model.graph.initializer:
            shape, dtype = self.initializers[tensor.name]
            array = np.asarray(state_dict[tensor.name], dtype=dtype)
            if array.shape != shape:
                raise ValueError(f"weight {tensor.name}: shape {array.shape}, the exported graph has {shape}")
            tensor.raw_data = np.ascontiguousarray(array).tobytes()
        serialized = model.SerializeToString()
        del model
        self.session = None  # the old session goes before the new one is built: one session's memory at a time
        self.session = ort.InferenceSession(serialized, self._session_options(), providers=["CPUExecutionProvider"])

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        feed = {name: np.ascontiguousarray(array) for name, array in zip(self.input_names, inputs)}
        return tuple(self.session.run(None, feed))
