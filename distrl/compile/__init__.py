"""Policy backends for rollout workers: eager, inductor, onnxrt, ipex, auto (one file each in ``backends/``).

Names are loaded on first use, so ``distrl.compile.backends`` (the table of backend names the
config validates against) can be imported without importing torch.
"""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "CompiledPolicy": "distrl.compile.api",
    "compile_policy": "distrl.compile.api",
    "BackendReport": "distrl.compile.report",
    "CheckedPolicy": "distrl.compile.build",
    "CompileError": "distrl.compile.report",
    "available_backends": "distrl.compile.build",
    "build_inference_policy": "distrl.compile.build",
    "prepare_artifacts": "distrl.compile.build",
    "prepare_shipped": "distrl.compile.build",
    "Float64Reference": "distrl.compile.check",
    "check_against_eager": "distrl.compile.check",
    "checks_against_eager": "distrl.compile.check",
    "OutputCheck": "distrl.compile.tolerance",
    "check_output": "distrl.compile.tolerance",
    "output_mismatch": "distrl.compile.tolerance",
    "dynamo_counts": "distrl.compile.dynamo_stats",
    "EagerPolicy": "distrl.compile.policy",
    "InferencePolicy": "distrl.compile.policy",
    "TorchCompiledPolicy": "distrl.compile.policy",
    "load_state_dict_numpy": "distrl.compile.policy",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
