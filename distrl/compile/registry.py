"""Choosing, building and checking the policy a rollout worker acts with.

Every backend is checked against eager on a real batch when it is built, and again after a
weight change; a failure falls back to eager with a warning (or raises with ``strict``).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from distrl.compile.check import Float64Reference
from distrl.compile.onnxrt import OnnxRuntimePolicy, export_policy_onnx
from distrl.compile.policy import EagerPolicy, InferencePolicy
from distrl.compile.torch_compiled import TorchCompiledPolicy, ipex_available

log = logging.getLogger("distrl.compile")

class CompileError(Exception):
    """A backend failed to build or disagreed with eager, and ``strict`` forbids falling back."""


@dataclass
class BackendReport:
    requested: str
    backend: str
    reason: str = ""
    compile_s: float = 0.0
    timings_us: dict[str, float] = field(default_factory=dict)


def available_backends() -> list[dict]:
    """Each worker backend with whether it can run here and why (not)."""
    rows = [{"name": "eager", "available": True, "reason": f"torch {torch.__version__}"}]
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    rows.append({"name": "inductor", "available": compiler is not None,
                 "reason": f"torch {torch.__version__}, C++ compiler {compiler}" if compiler else "no C++ compiler on PATH"})  # fmt: skip
    try:
        import onnxruntime

        rows.append({"name": "onnxrt", "available": True, "reason": f"onnxruntime {onnxruntime.__version__}"})
    except ImportError:
        rows.append({"name": "onnxrt", "available": False, "reason": "onnxruntime is not installed"})
    ok, reason = ipex_available()
    rows.append({"name": "ipex", "available": ok, "reason": reason})
    return rows


def _build(backend: str, module: nn.Module, mode: str, options: dict, example: tuple[np.ndarray, ...], artifacts: dict) -> InferencePolicy:
    if backend == "eager":
        return EagerPolicy(module)
    if backend == "onnxrt":
        model_bytes = artifacts.get("onnx")
        if model_bytes is None:
            model_bytes, _ = export_policy_onnx(module, tuple(torch.from_numpy(x) for x in example))
        policy = OnnxRuntimePolicy(model_bytes, list(module.state_dict().keys()), len(example), options)
        policy.update_weights({k: v.detach().numpy() for k, v in module.state_dict().items()})
        return policy
    if backend == "ipex":
        ok, reason = ipex_available()
        if not ok:
            raise RuntimeError(reason)
        return TorchCompiledPolicy(module, "ipex", None, options)
    if backend == "inductor":
        if artifacts.get("inductor_cache") is not None:
            torch.compiler.load_cache_artifacts(artifacts["inductor_cache"])
        return TorchCompiledPolicy(module, "inductor", mode, options)
    raise ValueError(f"unknown backend {backend!r}")


def check_against_eager(policy: InferencePolicy, module: nn.Module, example: tuple[np.ndarray, ...]) -> str | None:
    """Compare with eager now and after a weight change (then restore the weights); see ``compile/check.py``."""
    eager, reference = EagerPolicy(module), Float64Reference(module)
    problem = reference.mismatch(policy(*example), *example)
    if problem:
        return problem
    original = {k: v.detach().clone() for k, v in module.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    perturbed = {k: (v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v).numpy()
                 for k, v in original.items()}  # fmt: skip
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


def _time_policy(policy: InferencePolicy, example: tuple[np.ndarray, ...], seconds: float = 0.3) -> float:
    for _ in range(3):
        policy(*example)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        policy(*example)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6


def build_inference_policy(
    module: nn.Module,
    backend: str,
    example: tuple[np.ndarray, ...],
    mode: str = "default",
    options: dict | None = None,
    strict: bool = False,
    artifacts: dict | None = None,
) -> tuple[InferencePolicy, BackendReport]:
    """The policy for ``backend`` (``auto``: the fastest that passes the checks), checked against eager."""
    options, artifacts = dict(options or {}), dict(artifacts or {})
    if mode != "default" and backend not in ("inductor", "auto"):
        log.warning("rollout.compile.mode=%s is ignored by the %s backend", mode, backend)
    if backend == "auto":
        return _choose_fastest(module, example, mode, options, artifacts)
    start = time.perf_counter()
    try:
        policy = _build(backend, module, mode, options, example, artifacts)
        problem = None if backend == "eager" else check_against_eager(policy, module, example)
    except Exception as exc:  # a backend failing to compile must not stop the run unless strict
        problem = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
    compile_s = time.perf_counter() - start
    if problem is None:
        return policy, BackendReport(backend, backend, "", compile_s)
    message = f"rollout.compile.backend={backend}: {problem}"
    if strict:
        raise CompileError(message)
    log.warning("%s; falling back to eager", message)
    return EagerPolicy(module), BackendReport(backend, "eager", problem, compile_s)


def _choose_fastest(module, example, mode, options, artifacts) -> tuple[InferencePolicy, BackendReport]:
    start = time.perf_counter()
    eager = EagerPolicy(module)
    timings = {"eager": _time_policy(eager, example)}
    best, best_name, notes = eager, "eager", []
    for row in available_backends():
        name = row["name"]
        if name == "eager":
            continue
        if not row["available"]:
            notes.append(f"{name}: {row['reason']}")
            continue
        backend_options = options.get(name, {}) if isinstance(options.get(name), dict) else {}
        try:
            policy = _build(name, module, mode, backend_options, example, artifacts)
            problem = check_against_eager(policy, module, example)
        except Exception as exc:
            problem = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
        if problem:
            notes.append(f"{name}: {problem}")
            continue
        timings[name] = _time_policy(policy, example)
        if timings[name] < timings[best_name]:
            best, best_name = policy, name
    report = BackendReport("auto", best_name, "; ".join(notes), time.perf_counter() - start, timings)
    log.info("auto chose %s (%s)", best_name, ", ".join(f"{k} {v:.0f} us" for k, v in timings.items()))
    return best, report


def prepare_artifacts(module: nn.Module, backend: str, example: tuple[np.ndarray, ...], mode: str = "default") -> dict:
    """Compile or export once (on the driver), for every worker to reuse through the object store."""
    artifacts: dict = {}
    inputs = tuple(torch.from_numpy(x) for x in example)
    if backend in ("onnxrt", "auto"):
        artifacts["onnx"], _ = export_policy_onnx(module, inputs)
    if backend in ("inductor", "auto"):
        policy = TorchCompiledPolicy(module, "inductor", mode)
        policy(*example)
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            artifacts["inductor_cache"] = saved[0]
    return artifacts
