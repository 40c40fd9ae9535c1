"""The public compile API: ``compile_policy`` and ``available_backends``."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distrl.compile.build import BackendReport, CheckedPolicy


class CompiledPolicy:
    """Callable like ``module`` (tensors in, tensors out), run by the chosen backend."""

    def __init__(self, module: nn.Module, checked: CheckedPolicy):
        self.module = module
        self._checked = checked

    @property
    def report(self) -> BackendReport:
        return self._checked.report

    @property
    def backend(self) -> str:
        """The backend in use, after any fallback."""
        return self._checked.backend

    def __call__(self, *inputs: torch.Tensor):
        outputs = self._checked(*(x.detach().cpu().numpy() for x in inputs))
        return tuple(torch.from_numpy(np.asarray(o)) for o in outputs)

    def update_weights(self, state_dict: dict) -> None:
        """Act with these weights from the next call on (tensors or numpy arrays)."""
        state = {k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in state_dict.items()}
        self._checked.update_weights(state)


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
    return CompiledPolicy(module, CheckedPolicy(module.eval(), backend, example, mode or "default", options, strict))
