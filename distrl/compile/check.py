"""Does a compiled policy act as eager does? A tolerance set by the computation, not by one CPU.

Float32 results depend on the order in which a CPU's kernels accumulate: blocked GEMMs and
convolutions, FMA and vector widths differ between Intel and AMD, oneDNN and ONNX Runtime. A
fixed tolerance tuned on one machine (1e-5 absolute was) fails a correct Nature-CNN on another.
So a compiled result is compared with a float64 run of the same module on the same inputs,
and accepted when its error is within a small multiple of eager float32's own error there:
a different summation order is about as accurate as eager's, while a graph acting with stale
weights or computing something else is off by orders of magnitude more.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from distrl.compile.policy import EagerPolicy

EPS32 = float(np.finfo(np.float32).eps)
# A compiled float32 result may be this many times further from float64 than eager float32 is.
# Rounding errors of two summation orders are of the same size (Higham, "Accuracy and Stability
# of Numerical Algorithms", ch. 4); 16x covers a worse order with room, and a policy acting with
# the previous weights differs by 1e3x-1e5x eager's error (see tests/test_compile.py).
ERROR_MULTIPLE = 16.0
# Eager's error is a small sample at small batches (a batch of one has a handful of outputs and a
# kernel may happen to be exact there), so a floor scaled to the model remains: rounding errors
# add up like a random walk over the accumulations on a path through the network (Higham and
# Mary 2019, probabilistic error bounds: ~sqrt(n) u), so FLOOR_ULPS x sqrt(total reduction
# length) float32 ulps of the output's magnitude.
FLOOR_ULPS = 4.0


def reduction_length(module: nn.Module) -> int:
    """The summed length of the dot products a forward pass chains: the model's size for rounding."""
    total = 0
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            total += layer.in_features
        elif isinstance(layer, nn.modules.conv._ConvNd):
            total += layer.in_channels // layer.groups * math.prod(layer.kernel_size)
        elif isinstance(layer, nn.RNNBase):
            total += layer.input_size + layer.hidden_size
    return max(total, 1)


@dataclass(frozen=True)
class OutputCheck:
    """One output of a policy measured against eager float32 and float64 on the same inputs."""

    index: int
    difference: float  # max |got - eager float32|: what a user would see
    error: float  # max |got - float64|: what is judged
    eager_error: float  # max |eager float32 - float64|: what rounding alone does on these inputs
    tolerance: float  # ERROR_MULTIPLE x eager_error + FLOOR_ULPS x sqrt(reductions) float32 ulps of max |float64|

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.error) and self.error <= self.tolerance)


def check_output(index: int, got: np.ndarray, eager: np.ndarray, reference: np.ndarray, reductions: int = 1) -> OutputCheck:
    """Measure one output (same shapes; ``reference`` finite); ``reductions``: see ``reduction_length``."""
    reference = np.asarray(reference, dtype=np.float64)
    got64, eager64 = np.asarray(got, dtype=np.float64), np.asarray(eager, dtype=np.float64)
    eager_error = float(np.max(np.abs(eager64 - reference), initial=0.0))
    scale = float(np.max(np.abs(reference), initial=0.0))
    return OutputCheck(
        index=index,
        difference=float(np.max(np.abs(got64 - eager64), initial=0.0)),
        error=float(np.max(np.abs(got64 - reference), initial=0.0)),
        eager_error=eager_error,
        tolerance=ERROR_MULTIPLE * eager_error + FLOOR_ULPS * math.sqrt(reductions) * EPS32 * scale,
    )


def output_mismatch(
    got: tuple[np.ndarray, ...], eager: tuple[np.ndarray, ...], reference: tuple[np.ndarray, ...], reductions: int = 1
) -> str | None:
    """None when every output of ``got`` is as close to ``reference`` (float64) as eager float32 allows.

    Args:
        got: the compiled policy's outputs on some inputs.
        eager: the eager float32 module's outputs on the same inputs.
        reference: the same module's outputs computed in float64.
        reductions: the module's ``reduction_length`` (``Float64Reference.reductions``).

    Returns:
        None, or one line naming the first output that is off, by how much and what was allowed.
    """
    if len(got) != len(eager):
        return f"{len(got)} outputs, eager has {len(eager)}"
    for i, (a, b, ref) in enumerate(zip(got, eager, reference)):
        if np.shape(a) != np.shape(b):
            return f"output {i} has shape {np.shape(a)}, eager {np.shape(b)}"
        if not np.all(np.isfinite(ref)):  # no float64 answer to measure against: ask for eager's exact outputs
            if not np.array_equal(a, b, equal_nan=True):
                return f"output {i} differs from eager where eager is not finite"
            continue
        check = check_output(i, a, b, ref, reductions)
        if not check.ok:
            return (
                f"output {i} differs from eager by up to {check.difference:.3g} (allowed {check.tolerance:.3g}: "
                f"{ERROR_MULTIPLE:g}x eager float32's own error {check.eager_error:.3g} vs float64)"
            )
    return None


class Float64Reference:
    """A float64 copy of ``module`` that follows its weights: the yardstick for float32 results."""

    def __init__(self, module: nn.Module):
        self.source = module
        self.module = copy.deepcopy(module).double().eval()
        self.reductions = reduction_length(module)

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """The module's outputs in float64 on ``inputs``, with the source module's current weights."""
        with torch.no_grad():
            for name, value in self.source.state_dict().items():
                self.module.state_dict()[name].copy_(value)
            tensors = (torch.from_numpy(np.asarray(x, dtype=np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating)
                                        else np.ascontiguousarray(x)) for x in inputs)  # fmt: skip
            outputs = self.module(*tensors)
        return tuple(o.numpy() for o in outputs)

    def mismatch(self, got: tuple[np.ndarray, ...], *inputs: np.ndarray) -> str | None:
        """``output_mismatch`` of ``got`` against the source module on ``inputs``, run eagerly and in float64."""
        return output_mismatch(tuple(np.asarray(o) for o in got), EagerPolicy(self.source)(*inputs), self(*inputs), self.reductions)


def checks_against_eager(got: tuple[np.ndarray, ...], module: nn.Module, inputs: tuple[np.ndarray, ...]) -> list[OutputCheck]:
    """Every output of ``got`` measured against ``module`` run eagerly on ``inputs``, for reports."""
    reference = Float64Reference(module)
    eager, expected = EagerPolicy(module)(*inputs), reference(*inputs)
    return [check_output(i, a, b, r, reference.reductions) for i, (a, b, r) in enumerate(zip(got, eager, expected))]


def check_against_eager(policy, module: nn.Module, example: tuple[np.ndarray, ...]) -> str | None:
    """Whether ``policy`` acts as eager ``module`` does on ``example``, now and after a weight change
    (the weights are restored afterwards); ``None`` when it does, else what differs."""
    reference = Float64Reference(module)
    problem = reference.mismatch(policy(*example), *example)
    if problem:
        return problem
    original = {k: v.detach().clone() for k, v in module.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    perturbed = {k: (v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v).numpy()
                 for k, v in original.items()}  # fmt: skip
    eager = EagerPolicy(module)
    try:
        eager.update_weights(perturbed)
        policy.update_weights(perturbed)
        problem = reference.mismatch(policy(*example), *example)
        if problem:
            return f"after a weight update: {problem}"
    finally:
        restored = {k: v.numpy() for k, v in original.items()}
        eager.update_weights(restored)
        policy.update_weights(restored)
    return None
