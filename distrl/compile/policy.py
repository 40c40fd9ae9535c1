"""The policy a rollout worker acts with: numpy in, numpy out, weights swappable in place.

Every backend builds an ``InferencePolicy``. ``EagerPolicy`` runs the torch module as it is
(the baseline); ``TorchCompiledPolicy`` runs it through ``torch.compile`` (inductor, ipex); ``DevicePolicy`` runs a
copy of it on another device (the worker's GPU), replayed as a CUDA graph there.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np
import torch
from torch import nn


class InferencePolicy(Protocol):
    backend: str
    shares_module: bool  # True: update_weights writes into the eager module itself

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """The module's forward on numpy arrays: ``(obs[, h, c]) -> (pd_params, value[, h, c])``."""

    def update_weights(self, state_dict: dict) -> None:
        """Act with these weights from the next call on."""


def as_tuple(outputs) -> tuple[torch.Tensor, ...]:
    """A module's outputs as a tuple: a lone tensor is one output, not a sequence of rows."""
    return (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)


def load_state_dict_numpy(module: nn.Module, state_dict: dict) -> None:
    """Copy a state dict of numpy arrays or tensors into ``module``'s parameters in place."""
    with torch.no_grad():
        module.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in state_dict.items()})


class EagerPolicy:
    backend = "eager"
    shares_module = True

    def __init__(self, module: nn.Module):
        self.module = module.eval()

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        with torch.inference_mode():
            outputs = self.module(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
        return tuple(o.numpy() for o in as_tuple(outputs))

    def update_weights(self, state_dict: dict) -> None:
        load_state_dict_numpy(self.module, state_dict)


class TorchCompiledPolicy:
    """``torch.compile(module, backend=...)`` behind the numpy-in, numpy-out interface.

    Parameters stay graph inputs, so a weight sync is an in-place copy the compiled graph sees
    on its next call. Inductor's ``freezing`` option bakes weights into the graph and has given
    wrong outputs after ``load_state_dict`` on some builds; it is allowed only because every
    policy is checked against eager after a weight change at build time and after each sync.
    """

    shares_module = True

    def __init__(self, module: nn.Module, backend: str, compile_kwargs: dict | None = None):
        self.backend = backend
        self.module = module.eval()
        self.compiled = torch.compile(self.module, backend=backend, dynamic=False, **(compile_kwargs or {}))

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        with torch.inference_mode():
            outputs = self.compiled(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
        # Copies: a compiled graph may reuse its output buffers on the next call.
        return tuple(o.numpy().copy() for o in as_tuple(outputs))

    def update_weights(self, state_dict: dict) -> None:
        load_state_dict_numpy(self.module, state_dict)


class DevicePolicy:
    """A copy of ``module`` on ``device``: each call's inputs are copied into buffers kept there, the forward runs on
    them, and its outputs come back as new host arrays (so no later call overwrites a batch's). With ``capture`` on a
    CUDA device, the forward of each input shape is captured once as a CUDA graph and replayed: one launch a step
    instead of one per kernel, which is most of a small policy's time on a GPU. Elsewhere it runs as it is: the same
    path on the CPU device (how the tests run it).

    The graph reads the weights where they were at capture, so a weight sync copies into them in place. TF32 is off
    for the policy: the outputs are checked against eager float32 on the CPU (``check.py``) like every backend's."""

    backend = "cuda"
    shares_module = False  # the eager module stays on the CPU, the reference the checks run
    MAX_GRAPHS = 8  # input shapes captured; any other shape runs uncaptured

    def __init__(self, module: nn.Module, device: str | torch.device, capture: bool = True):
        import copy

        self.device = torch.device(device)
        self.module = copy.deepcopy(module).to(self.device).eval()
        self.capture = capture and self.device.type == "cuda"
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        self.graphs: dict[tuple, tuple] = {}  # input shapes and dtypes -> (graph, static inputs, static outputs)

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        arrays = [np.ascontiguousarray(x) for x in inputs]
        key = tuple((a.shape, a.dtype.str) for a in arrays)
        with torch.inference_mode():
            if self.capture and (key in self.graphs or len(self.graphs) < self.MAX_GRAPHS):
                graph, static_in, static_out = self.graphs.get(key) or self._capture(arrays, key)
                for buffer, array in zip(static_in, arrays):
                    buffer.copy_(torch.from_numpy(array))
                graph.replay()
                outputs = static_out
            else:
                outputs = as_tuple(self.module(*(torch.from_numpy(a).to(self.device) for a in arrays)))
            return tuple(o.cpu().numpy() if o.device.type != "cpu" else o.numpy().copy() for o in outputs)

    def _capture(self, arrays: list[np.ndarray], key: tuple) -> tuple:
        """Warm the forward up on a side stream (cuDNN picks its kernels, the allocator its blocks), then capture it."""
        static_in = [torch.from_numpy(a).to(self.device) for a in arrays]
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.module(*static_in)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = as_tuple(self.module(*static_in))
        self.graphs[key] = (graph, static_in, static_out)
        return self.graphs[key]

    def update_weights(self, state_dict: dict) -> None:
        """In place, so that captured graphs read the new weights."""
        with torch.no_grad():
            for name, tensor in self.module.state_dict().items():
                tensor.copy_(torch.as_tensor(np.asarray(state_dict[name])))


def time_policy(policy: InferencePolicy, example: tuple[np.ndarray, ...], seconds: float = 0.3) -> float:
    """Mean microseconds per call, after a short warm-up."""
    for _ in range(3):
        policy(*example)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        policy(*example)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6
