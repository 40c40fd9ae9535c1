"""Building, checking and falling back: the one place that decides which policy a worker acts with.

Any backend but eager is checked against eager on a real batch when built (before and after a
weight change) and again after every weight sync (``CheckedPolicy``); a failure falls back to
eager with a warning, or raises ``CompileError`` with ``strict``.
"""

from __future__ import annotations

import logging

import numpy as np
from torch import nn

from distrl.common.errors import describe_error
from distrl.compile.backends import BACKENDS, load_backend
from distrl.compile.checked import CheckedPolicyBase
from distrl.compile.forms import build_candidate, forms_for, keep_fastest, prepare_forms
from distrl.compile.policy import EagerPolicy, InferencePolicy
from distrl.compile.report import BackendReport, CompileError

log = logging.getLogger("distrl.compile")


def available_backends() -> list[dict]:
    """Each worker backend with whether it can run here and why (not); ``chooses``: it picks among the others."""
    rows = []
    for name, spec in BACKENDS.items():
        ok, reason = load_backend(name).available()
        rows.append({"name": name, "available": ok, "reason": reason, "chooses": spec.chooses})
    return rows


def prepare_artifacts(
    module: nn.Module,
    backend: str,
    example: tuple[np.ndarray, ...],
    mode: str = "default",
    precision: str = "fp32",
    memory_format: str = "contiguous",
) -> dict:
    """Export or compile once (on the driver) what every worker can reuse through the object store, in each form the
    workers will build (``forms.py``)."""
    if BACKENDS[backend].chooses:
        return load_backend(backend).prepare(module, example, mode, precision=precision, memory_format=memory_format)
    return prepare_forms(backend, forms_for(precision, memory_format, backend, module)[0], module, example, mode)


def prepare_shipped(
    module: nn.Module, example: tuple[np.ndarray, ...], precision: str = "fp32", memory_format: str = "contiguous"
) -> dict:
    """Beside the ``onnxrt`` export: what a worker needs to build and check its policy without torch (``shipped.py``;
    the caller adds the model's spec). ``module`` holds the learner's version-0 weights; ``example``: inputs to check
    on."""
    from distrl.compile.check import shipped_check

    return {
        "check": shipped_check(module, example),
        "form_reason": forms_for(precision, memory_format, "onnxrt", module)[1],
    }


def build_inference_policy(
    module: nn.Module,
    backend: str,
    example: tuple[np.ndarray, ...],
    mode: str = "default",
    options: dict | None = None,
    strict: bool = False,
    artifacts: dict | None = None,
    precision: str = "fp32",
    memory_format: str = "contiguous",
) -> tuple[InferencePolicy, BackendReport]:
    """The policy for ``backend``, checked against eager on ``example``; eager when it fails (unless ``strict``).

    ``precision`` and ``memory_format``: ``rollout.compile``'s (``forms.py``); where they leave two forms to try
    (``auto`` precision on a CPU with bf16), both are built and checked and the faster kept."""
    if mode != "default" and not BACKENDS[backend].takes_mode:
        log.warning("rollout.compile.mode=%s is ignored by the %s backend", mode, backend)
    options, artifacts = dict(options or {}), dict(artifacts or {})
    forms, form_reason = forms_for(precision, memory_format, backend, module)
    if BACKENDS[backend].chooses:  # auto checks and times every candidate itself
        try:
            built = load_backend(backend).build(
                module, example, mode, options, artifacts, precision=precision, memory_format=memory_format
            )
        except Exception as exc:  # auto keeps eager when nothing else builds; this is its own failure
            problem = describe_error(exc)
        else:
            return built.policy, BackendReport(
                backend, built.policy.backend, built.notes, built.timings_us, built.form, form_reason
            )
    else:
        candidates = [build_candidate(backend, form, module, example, mode, options, artifacts) for form in forms]
        best = keep_fastest(candidates, example)
        problem = best.problem
        if problem is None:
            notes = "; ".join(f"{c.label}: {c.problem}" for c in candidates if c.problem)
            timings = {c.label: c.us for c in candidates if c.us is not None}
            return best.policy, BackendReport(backend, best.policy.backend, notes, timings, best.form, form_reason)
    message = f"rollout.compile.backend={backend}: {problem}"
    if strict:
        raise CompileError(message)
    log.warning("%s; falling back to eager", message)
    return EagerPolicy(module), BackendReport(backend, "eager", problem, form_reason=form_reason)


class CheckedPolicy(CheckedPolicyBase):
    """A worker's policy: built by ``build_inference_policy``, and after a weight sync checked against
    eager on the inputs it is about to act on; a mismatch replaces it with eager (``strict``: raises)."""

    def __init__(
        self,
        module: nn.Module,
        backend: str,
        example: tuple[np.ndarray, ...],
        mode: str = "default",
        options: dict | None = None,
        strict: bool = False,
        artifacts: dict | None = None,
        precision: str = "fp32",
        memory_format: str = "contiguous",
    ):
        super().__init__(strict)
        self.module = module
        self.policy, self.report = build_inference_policy(
            module, backend, example, mode, options, strict, artifacts, precision, memory_format
        )
