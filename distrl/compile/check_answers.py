"""The checks' answers, computed where torch is and judged where it need not be, by the rules of ``tolerance.py``.

The driver computes the build check's (``check.shipped_check``: the version-0 weights and perturbed ones) and ships
them with the ``onnxrt`` export; the learner computes the every-sync check's with each set of weights it sends
(``check.CheckAnswers``), on the same inputs. An ``onnxrt`` worker judges its own outputs against them without
torch (``shipped.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from distrl.compile.tolerance import output_mismatch


def inputs_key(inputs: tuple[np.ndarray, ...]) -> str:
    """A digest of ``inputs`` (dtypes, shapes, bytes): answers are judged only on the inputs they were computed on."""
    digest = hashlib.sha256()
    for array in inputs:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


@dataclass
class Answers:
    """What eager computes with one set of weights on the check's inputs (named by ``inputs_key``)."""

    inputs_key: str
    eager: tuple[np.ndarray, ...]  # eager float32's outputs
    reference: tuple[np.ndarray, ...]  # float64's (eager's own where no float64 twin runs: ``rounding`` is then set)
    rounding: list[float] | None  # per output, eager's error under one-ulp perturbations, where no float64 twin runs
    reductions: int  # the model's size for rounding (``check.reduction_length``)

    def mismatch(self, policy, inputs: tuple[np.ndarray, ...]) -> str | None:
        """None when ``policy`` (holding these answers' weights) acts as eager did on ``inputs``, else what differs."""
        got = tuple(np.asarray(o) for o in policy(*inputs))
        return output_mismatch(got, self.eager, self.reference, self.reductions, self.rounding)


@dataclass
class ShippedCheck:
    """``check_against_eager``'s answers, computed on the driver: its inputs and, for each set of weights (the
    version-0 ones first, then perturbed ones), the weights and their answers."""

    inputs: tuple[np.ndarray, ...]
    cases: list[tuple[dict[str, np.ndarray], Answers]]

    def mismatch(self, policy) -> str | None:
        """None when ``policy`` acts as eager did with every case's weights, else what differs; ``policy`` is left
        with the version-0 weights."""
        try:
            for i, (weights, answers) in enumerate(self.cases):
                policy.update_weights(weights)
                problem = answers.mismatch(policy, self.inputs)
                if problem:
                    return problem if i == 0 else f"after a weight update: {problem}"
        finally:
            policy.update_weights(self.cases[0][0])
        return None
