"""What every checked worker policy does once built: act, take weight syncs, check itself against eager after a sync,
and fall back to eager (or raise ``CompileError`` with ``strict``) when a check fails. Importable without torch: the
eager module, the float64 reference and the eager fallback load only when a check or a fallback needs them.

``CheckedPolicy`` (``build.py``) is built from the torch module; ``ShippedPolicy`` (``shipped.py``) from the driver's
export and check, its module built the first time one is needed.
"""

from __future__ import annotations

import logging

import numpy as np

from distrl.compile.report import BackendReport, CompileError, Form

log = logging.getLogger("distrl.compile")


class CheckedPolicyBase:
    """A worker's policy (``self.policy``, an ``InferencePolicy``) with its report; subclasses provide ``module`` (the
    eager torch module, following the weights) and build ``policy``."""

    policy: object
    report: BackendReport

    def __init__(self, strict: bool):
        self.strict = strict
        self.sync_checks = 0
        self._reference = None  # the float64 yardstick (check.py), built at the first check

    @property
    def backend(self) -> str:
        return self.policy.backend

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        return self.policy(*inputs)

    def update_weights(self, state_dict: dict) -> None:
        """Act with these weights (numpy arrays) from the next call on; the eager module follows them too."""
        self.policy.update_weights(state_dict)
        self._follow(state_dict)

    def _follow(self, state_dict: dict) -> None:
        """The eager module takes ``state_dict`` (the policy already has it)."""
        if not self.policy.shares_module:
            from distrl.compile.policy import load_state_dict_numpy

            load_state_dict_numpy(self.module, state_dict)

    def verify(self, inputs: tuple[np.ndarray, ...], when: str, answers=None) -> None:
        """Check the policy against eager on ``inputs``; on a mismatch stop using it. ``answers``: the learner's for
        the shipped inputs (``Weights.check``), which only ``ShippedPolicy`` reads."""
        if self.policy.backend == "eager" and self.report.form == Form():  # eager itself
            return
        problem = self._sync_mismatch(inputs, answers)
        self.sync_checks += 1
        if problem is None:
            return
        message = f"rollout.compile.backend={self.policy.backend}: {when}: {problem}"
        self._fall_back(message, message)

    def _sync_mismatch(self, inputs: tuple[np.ndarray, ...], answers) -> str | None:
        """What differs between the policy and the eager module on ``inputs`` (None: nothing)."""
        if self._reference is None:
            from distrl.compile.check import Float64Reference

            self._reference = Float64Reference(self.module)
        return self._reference.mismatch(self.policy(*inputs), *inputs, precision=self.report.form.precision)

    def _fall_back(self, message: str, reason: str) -> None:
        """Act eagerly from now on (``strict``: raise ``message`` instead); the report says why (``reason``)."""
        if self.strict:
            raise CompileError(message)
        log.warning("%s; falling back to eager", message)
        from distrl.compile.policy import EagerPolicy

        self.policy = EagerPolicy(self.module)
        self.report.backend, self.report.reason, self.report.form = "eager", reason, Form()
