"""The forms a worker policy that runs torch kernels takes on a CPU: its precision and its memory layout.

``rollout.compile.precision`` and ``rollout.compile.memory_format`` apply to the backends that run the torch module
(eager, inductor, ipex: ``BackendSpec.runs_torch``); ONNX Runtime has neither a bf16 kernel for AMX nor a layout to
choose (it reorders convolutions itself). bf16 runs the forward under CPU autocast (oneDNN's bf16 kernels: AMX or
AVX512-BF16; elsewhere emulated and slower than fp32), its outputs returned as float32, and is checked against eager
float32 within bf16's rounding (``check.py``). Channels-last (NHWC) is oneDNN's own convolution layout.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from distrl.common.errors import describe_error
from distrl.common.hardware import cpu_bf16, has_convolutions
from distrl.compile.backends import BACKENDS, load_backend
from distrl.compile.backends.base import Form
from distrl.compile.check import check_against_eager
from distrl.compile.policy import InferencePolicy, time_policy


class Bf16Forward(nn.Module):
    """``module``'s forward under CPU bf16 autocast, its floating outputs as float32; its state dict is the module's
    own (same keys), so weight syncs and checkpoints see no wrapper."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.inner = module

    def forward(self, *inputs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs = self.inner(*inputs)
        if isinstance(outputs, torch.Tensor):
            return outputs.float()
        return tuple(o.float() if o.is_floating_point() else o for o in outputs)

    def state_dict(self, *args, **kwargs):
        return self.inner.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.inner.load_state_dict(state_dict, strict=strict, assign=assign)


def in_form(module: nn.Module, form: Form) -> nn.Module:
    """``module`` as a backend should compile it in ``form``: itself in the default form, else a copy (channels-last
    and/or under bf16 autocast), so that forms built side by side (``auto`` times them) never change each other."""
    if form == Form():
        return module
    formed = copy.deepcopy(module).eval()
    if form.memory_format == "channels_last":
        formed.to(memory_format=torch.channels_last)
    return Bf16Forward(formed) if form.precision == "bf16" else formed


def memory_format_for(setting: str, backend: str, module: nn.Module, precision: str) -> tuple[str, str]:
    """The layout for ``rollout.compile.memory_format`` on ``backend`` in ``precision``, and why.

    ``auto``: channels-last for a convolutional model in bf16 (oneDNN's bf16 convolutions work in NHWC), contiguous
    in fp32, where channels-last is as often slower as faster (docs/performance.md:
    benchmarks/policy_call/inference_forms.py)."""
    spec = BACKENDS[backend]
    if not spec.runs_torch:
        return "contiguous", f"{backend} lays out its own kernels"
    if setting != "auto":
        return setting, f"rollout.compile.memory_format={setting}"
    if not has_convolutions(module):
        return "contiguous", "auto: the model has no convolutions"
    if precision == "fp32":
        return "contiguous", "auto: fp32 convolutions measured no faster channels-last"
    return "channels_last", "auto: bf16 convolutions, whose oneDNN kernels work in NHWC"


def precisions_for(setting: str, backend: str, bf16: str | None = None) -> tuple[list[str], str]:
    """The precisions to build (and time, when two) for ``rollout.compile.precision`` on ``backend``, and why.
    ``bf16``: this CPU's bf16 instructions by name (``cpu_bf16()``, read when not given), "" for none."""
    spec = BACKENDS[backend]
    if setting == "fp32" or not (spec.runs_torch or spec.chooses):
        return ["fp32"], "rollout.compile.precision=fp32" if setting == "fp32" else f"{backend} runs fp32"
    bf16 = cpu_bf16() if bf16 is None else bf16
    if not bf16:
        # An explicit bf16 on a CPU without the instructions is refused before Ray (``distrl/driver/preflight.py``);
        # a worker on another node without them runs fp32 and says so.
        return ["fp32"], f"rollout.compile.precision={setting}: this CPU has no bf16 instructions (AMX, AVX512-BF16)"
    if setting == "bf16":
        return ["bf16"], "rollout.compile.precision=bf16"
    return ["fp32", "bf16"], f"auto: this CPU has {bf16}; fp32 and bf16 timed"


def forms_for(
    precision: str, memory_format: str, backend: str, module: nn.Module, bf16: str | None = None
) -> tuple[list[Form], str]:
    """The forms to build for ``backend`` (more than one: each checked and timed, the fastest kept), and why."""
    precisions, why = precisions_for(precision, backend, bf16)
    if BACKENDS[backend].chooses:  # each candidate backend takes its own layout
        return [Form(p) for p in precisions], why
    layouts = [memory_format_for(memory_format, backend, module, p) for p in precisions]
    reasons = list(dict.fromkeys(reason for _, reason in layouts))
    if len(reasons) > 1:
        reasons = [f"{p}: {reason}" for p, (_, reason) in zip(precisions, layouts)]
    return [Form(p, layout) for p, (layout, _) in zip(precisions, layouts)], "; ".join([why, *reasons])


@dataclass
class Candidate:
    """One backend in one form, built and checked against eager (``problem`` None when it passed), then timed."""

    backend: str
    form: Form
    policy: InferencePolicy | None = None
    problem: str | None = None
    us: float | None = None  # per call, when timed

    @property
    def label(self) -> str:
        return self.backend if self.form == Form() else f"{self.backend} ({self.form})"


def build_candidate(
    backend: str,
    form: Form,
    module: nn.Module,
    example: tuple[np.ndarray, ...],
    mode: str,
    options: dict,
    artifacts: dict,
) -> Candidate:
    """``backend``'s policy for ``module`` in ``form``, checked against eager ``module`` on ``example`` (eager in
    its default form is eager itself: unchecked). A failure to build or a mismatch is the candidate's ``problem``."""
    candidate = Candidate(backend, form)
    formed = in_form(module, form)
    try:
        policy = load_backend(backend).build(formed, example, mode, options, artifacts).policy
        if formed is not module:  # the form is a copy: weight syncs reach it through the policy, not the module
            policy.shares_module = False
        if backend != "eager" or form != Form():
            candidate.problem = check_against_eager(policy, module, example, form.precision)
        candidate.policy = policy
    except Exception as exc:  # a form that fails to build is passed over (or, alone, falls back to eager)
        candidate.problem = describe_error(exc, 200)
    return candidate


def keep_fastest(candidates: list[Candidate], example: tuple[np.ndarray, ...]) -> Candidate:
    """The fastest candidate that passed its check (each timed on ``example`` when more than one passed); the first
    when none passed."""
    passed = [c for c in candidates if c.problem is None]
    if not passed:
        return candidates[0]
    if len(passed) > 1:
        for c in passed:
            c.us = time_policy(c.policy, example)
    return min(passed, key=lambda c: c.us or 0.0)


def prepare_forms(
    backend: str, forms: list[Form], module: nn.Module, example: tuple[np.ndarray, ...], mode: str
) -> dict:
    """What every worker can reuse for ``backend`` in each of ``forms`` (the driver's compile of each)."""
    artifacts: dict = {}
    for form in forms:
        # inductor's cache artifacts accumulate within a process: the last form's save holds every form's
        artifacts.update(load_backend(backend).prepare(in_form(module, form), example, mode))
    return artifacts
