"""The policy a rollout worker acts with: numpy in, numpy out, weights swappable in place.

Every backend builds an ``InferencePolicy``. ``EagerPolicy`` runs the torch module as it is
(the baseline); ``TorchCompiledPolicy`` runs it through ``torch.compile`` (inductor, ipex).
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


def time_policy(policy: InferencePolicy, example: tuple[np.ndarray, ...], seconds: float = 0.3) -> float:
    """Mean microseconds per call, after a short warm-up."""
    for _ in range(3):
        policy(*example)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        policy(*example)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6
