"""Policy backends for rollout workers: eager, inductor, onnxrt, ipex, auto."""

from distrl import onnxrt_dynamo
from distrl.compile.api import CompiledPolicy, compile_policy
from distrl.compile.check import Float64Reference, OutputCheck, check_output, checks_against_eager, output_mismatch
from distrl.compile.policy import EagerPolicy, InferencePolicy, load_state_dict_numpy
from distrl.compile.registry import (
    BackendReport,
    CompileError,
    available_backends,
    build_inference_policy,
    check_against_eager,
    prepare_artifacts,
)

onnxrt_dynamo.register()

__all__ = [
    "BackendReport",
    "CompileError",
    "CompiledPolicy",
    "EagerPolicy",
    "Float64Reference",
    "InferencePolicy",
    "OutputCheck",
    "available_backends",
    "build_inference_policy",
    "check_against_eager",
    "compile_policy",
    "check_output",
    "checks_against_eager",
    "load_state_dict_numpy",
    "output_mismatch",
    "prepare_artifacts",
]
