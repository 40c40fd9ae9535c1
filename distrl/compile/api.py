"""The public compile API: ``compile_policy`` and ``available_backends``."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distrl.compile.build import BackendReport, CheckedPolicy


class _TupleOutputs(nn.Module):
    """A user's module with its outputs as a flat tuple, which every backend handles: a lone tensor is a
    one-tuple, a dict its values in key order. ``structure`` says how to give them back."""

    def __init__(self, module: nn.Module, example_inputs: tuple[torch.Tensor, ...]):
        super().__init__()
        self.module = module
        with torch.no_grad():
            outputs = module(*example_inputs)
        if isinstance(outputs, torch.Tensor):
            self.structure: str | tuple[str, ...] = "tensor"
        elif isinstance(outputs, dict):
            self.structure = tuple(outputs)
        elif isinstance(outputs, (tuple, list)):
            self.structure = "tuple"
        else:
            raise TypeError(
                f"compile_policy: the module returned {type(outputs).__name__}; expected a tensor, "
                "a tuple or list of tensors, or a dict of tensors"
            )

    def forward(self, *inputs):
        outputs = self.module(*inputs)
        if self.structure == "tensor":
            return (outputs,)
        if isinstance(self.structure, tuple):
            return tuple(outputs[key] for key in self.structure)
        return tuple(outputs)

    def restore(self, outputs: tuple[torch.Tensor, ...]):
        if self.structure == "tensor":
            return outputs[0]
        if isinstance(self.structure, tuple):
            return dict(zip(self.structure, outputs))
        return outputs


class CompiledPolicy:
    """Callable like ``module`` (tensors in, tensors out: a tensor, tuple or dict as the module returns), run by
    the chosen backend."""

    def __init__(self, module: nn.Module, checked: CheckedPolicy, adapter: _TupleOutputs | None = None):
        self.module = module
        self._checked = checked
        self._adapter = adapter

    @property
    def report(self) -> BackendReport:
        return self._checked.report

    @property
    def backend(self) -> str:
        """The backend in use, after any fallback."""
        return self._checked.backend

    def __call__(self, *inputs: torch.Tensor):
        outputs = self._checked(*(x.detach().cpu().numpy() for x in inputs))
        outputs = tuple(torch.from_numpy(np.asarray(o)) for o in outputs)
        return self._adapter.restore(outputs) if self._adapter is not None else outputs

    def update_weights(self, state_dict: dict) -> None:
        """Act with these weights from the next call on (the module's state dict: tensors or numpy arrays)."""
        state = {k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in state_dict.items()}
        if self._adapter is not None:
            state = {f"module.{k}": v for k, v in state.items()}
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
    The module may return a tensor, a tuple or list of tensors, or a dict of tensors.
    """
    if not example_inputs:
        raise ValueError("compile_policy needs example_inputs: a real batch of the shape the policy will see")
    module = module.eval()
    adapter = _TupleOutputs(module, example_inputs).eval()
    example = tuple(x.detach().cpu().numpy() for x in example_inputs)
    return CompiledPolicy(module, CheckedPolicy(adapter, backend, example, mode or "default", options, strict), adapter)
