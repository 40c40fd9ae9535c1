"""An ``onnxrt`` worker built without torch: the driver ships its export, the check's answers and the model's spec.

Torch's import was most of a rollout worker's start-up (about 2 s of CPU of its 2.2 s on a 2-core Xeon, while the
learner imported torch on the other core), and an ``onnxrt`` worker acts through ONNX Runtime alone. So the driver,
which exports the policy once anyway, also runs the build check every worker would run (``check.py``): the model's
outputs in float64 and in eager float32 on example inputs, with its version-0 weights (the learner's) and with
perturbed ones (``shipped_check``). A worker builds its session from the export, sets each set of weights and judges
its own outputs against those answers by the same rule (``tolerance.py``), on its own CPU and ONNX Runtime: a session
that computes something else, or ignores new weights, falls back or fails as ``CheckedPolicy``'s does.

After a weight sync (``rollout.compile.verify_every_sync``) it is judged the same way on the same inputs, against the
answers the learner sends with the weights (``Weights.check``). Torch loads in such a worker only where it is needed:
the check after a sync where the learner sends no answers (a convolutional model, whose float64 forward is too slow
for every update to wait on), a fallback to eager, a league's opponent policies.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from distrl.common.errors import describe_error
from distrl.compile.check_answers import Answers, ShippedCheck
from distrl.compile.checked import CheckedPolicyBase
from distrl.compile.onnx_session import OnnxRuntimePolicy
from distrl.compile.report import BackendReport


def ships_policy(artifacts: dict | None) -> bool:
    """Whether ``artifacts`` hold what a worker needs to act without torch (``prepare_shipped``)."""
    return bool(artifacts) and all(key in artifacts for key in ("onnx", "check", "model_spec", "form_reason"))


class ShippedPolicy(CheckedPolicyBase):
    """``CheckedPolicy``'s counterpart for an ``onnxrt`` worker built from shipped artifacts (see the module's doc).

    ``make_module``: the eager torch module with the learner's version-0 weights (it imports torch), called the first
    time a check or a fallback needs it; it then follows the weights."""

    def __init__(
        self, artifacts: dict, options: dict | None, strict: bool, threads: int, make_module: Callable[[], object]
    ):
        super().__init__(strict)
        check: ShippedCheck = artifacts["check"]
        self.check_inputs = check.inputs
        self.check_key = check.cases[0][1].inputs_key  # the digest the learner's answers name their inputs by
        self._make_module = make_module
        self._module = None
        self.weights = check.cases[0][0]  # the ones in use: the module is built with them when needed
        self.report = BackendReport("onnxrt", "onnxrt", form_reason=artifacts["form_reason"])
        try:
            self.policy = OnnxRuntimePolicy(artifacts["onnx"], len(check.inputs), options, threads)
            problem = check.mismatch(self.policy)
        except Exception as exc:  # a session that does not build falls back as CheckedPolicy's does
            problem = describe_error(exc, 200)
        if problem:
            self._fall_back(f"rollout.compile.backend=onnxrt: {problem}", problem)

    @property
    def module(self):
        if self._module is None:
            from distrl.compile.policy import load_state_dict_numpy

            self._module = self._make_module()
            load_state_dict_numpy(self._module, self.weights)
        return self._module

    def _follow(self, state_dict: dict) -> None:
        self.weights = state_dict
        if self._module is not None:
            super()._follow(state_dict)

    def _sync_mismatch(self, inputs: tuple[np.ndarray, ...], answers: Answers | None) -> str | None:
        """After a weight sync: against the learner's ``answers`` for these weights (``Weights.check``) on the shipped
        check's inputs, without torch; with none (or answers for other inputs), against the eager module on
        ``inputs``, as ``CheckedPolicy`` does."""
        if answers is None or answers.inputs_key != self.check_key:
            return super()._sync_mismatch(inputs, answers)
        return answers.mismatch(self.policy, self.check_inputs)
