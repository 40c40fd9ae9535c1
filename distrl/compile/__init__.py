"""Policy backends for rollout workers: eager, inductor, onnxrt, ipex, auto."""

from distrl import onnxrt_dynamo
from distrl.compile.api import CompiledPolicy, compile_policy
from distrl.compile.policy import EagerPolicy, InferencePolicy, load_state_dict_numpy
from distrl.compile.registry import (
    BackendReport,
    CompileError,
    available_backends,
    build_inference_policy,
    check_against_eager,
    outputs_match,
    prepare_artifacts,
)

onnxrt_dynamo.register()

__all__ = [
    "BackendReport",
    "CompileError",
    "CompiledPolicy",
    "EagerPolicy",
    "InferencePolicy",
    "available_backends",
    "build_inference_policy",
    "check_against_eager",
    "compile_policy",
    "load_state_dict_numpy",
    "outputs_match",
    "prepare_artifacts",
]
