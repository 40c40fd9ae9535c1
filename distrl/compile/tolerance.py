"""How far a compiled policy's outputs may be from a float64 run of the same model: numpy only.

``check.py`` computes the float64 and eager float32 outputs (torch); a worker that acts through ONNX Runtime without
torch judges its outputs against those computed on the driver (``shipped.py``) with the same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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
# A bf16 policy (``forms.py``) rounds every weight and activation to bf16: it may differ from eager float32 by this many
# times what one bf16 ulp on every weight and float input moves eager's outputs (a full ulp with random signs; bf16's
# own rounding is at most half of one), as a bf16 learner update is judged (``distrl/learner/step_check.py``).
BF16_MULTIPLE = 4.0


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


def check_output(
    index: int,
    got: np.ndarray,
    eager: np.ndarray,
    reference: np.ndarray,
    reductions: int = 1,
    rounding: float | None = None,
    multiple: float = ERROR_MULTIPLE,
) -> OutputCheck:
    """Measure one output (same shapes; ``reference`` finite); ``reductions``: see ``reduction_length``.

    ``rounding``: eager's own error where no float64 reference exists (``reference`` is then eager itself)."""
    reference = np.asarray(reference, dtype=np.float64)
    got64, eager64 = np.asarray(got, dtype=np.float64), np.asarray(eager, dtype=np.float64)
    eager_error = float(np.max(np.abs(eager64 - reference), initial=0.0)) if rounding is None else rounding
    scale = float(np.max(np.abs(reference), initial=0.0))
    return OutputCheck(
        index=index,
        difference=float(np.max(np.abs(got64 - eager64), initial=0.0)),
        error=float(np.max(np.abs(got64 - reference), initial=0.0)),
        eager_error=eager_error,
        tolerance=multiple * eager_error + FLOOR_ULPS * math.sqrt(reductions) * EPS32 * scale,
    )


def output_mismatch(
    got: tuple[np.ndarray, ...],
    eager: tuple[np.ndarray, ...],
    reference: tuple[np.ndarray, ...],
    reductions: int = 1,
    rounding: list[float] | None = None,
    multiple: float = ERROR_MULTIPLE,
) -> str | None:
    """None when every output of ``got`` is as close to ``reference`` (float64) as eager float32 allows.

    Args:
        got: the compiled policy's outputs on some inputs.
        eager: the eager float32 module's outputs on the same inputs.
        reference: the same module's outputs computed in float64.
        reductions: the module's ``reduction_length`` (``Float64Reference.reductions``).
        rounding: per output, eager's own error measured by perturbation, where no float64 reference
            exists or the policy is bf16 (``reference`` is then ``eager``).
        multiple: how many times eager's error (or rounding) ``got``'s may be (``BF16_MULTIPLE`` for bf16).

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
        check = check_output(i, a, b, ref, reductions, None if rounding is None else rounding[i], multiple)
        if not check.ok:
            return (
                f"output {i} differs from eager by up to {check.difference:.3g} (allowed {check.tolerance:.3g}: "
                f"{multiple:g}x eager float32's own error {check.eager_error:.3g} "
                f"{'vs float64' if rounding is None else 'under one-ulp perturbations'})"
            )
    return None
