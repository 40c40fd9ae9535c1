"""The public compile API: ``compile_policy`` and ``available_backends``."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distrl.compile.policy import load_state_dict_numpy
from distrl.compile.registry import BackendReport, build_inference_policy


class CompiledPolicy:
    """Callable like ``module`` (tensors in, tensors out), run by the chosen backend."""

    def __init__(self, module: nn.Module, policy, report: BackendReport):
        self.module = module
        self._policy = policy
        self.report = report

    @property
    def backend(self) -> str:
        """The backend in use, after any fallback."""
        return self.report.backend

    def __call__(self, *inputs: torch.Tensor):
        outputs = self._policy(*(x.detach().cpu().numpy() for x in inputs))
        return tuple(torch.from_numpy(np.asarray(o)) for o in outputs)

    def update_weights(self, state_dict: dict) -> None:
        """Act with these weights from the next call on (tensors or numpy arrays)."""
        state = {k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in state_dict.items()}
        self._policy.update_weights(state)
        if not self._policy.shares_module:
            load_state_dict_numpy(self.module, state)


def compile_policy(
    module: nn.Module,
    backend: str,
    mode: str | None = None,
    example_inputs: tuple[torch.Tensor, ...] = (),
    options: dict | None = None,
    strict: bool = False,
) -> CompiledPolicy:
    """Compile ``module`` for CPU inference with ``backend`` (eager, inductor, onnxrt, ipex, auto).

    ``example_inputs`` are a real batch: the result is checked against eager on it, before
    and after a weight change, and falls back to eager (``strict``: raises) on a mismatch.
    """
    if not example_inputs:
        raise ValueError("compile_policy needs example_inputs: a real batch of the shape the policy will see")
    example = tuple(x.detach().cpu().numpy() for x in example_inputs)
    policy, report = build_inference_policy(module.eval(), backend, example, mode or "default", options, strict)
    return CompiledPolicy(module, policy, report)
