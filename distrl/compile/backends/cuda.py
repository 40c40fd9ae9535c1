"""``cuda``: the policy on the worker's own GPU share (``rollout.num_gpus_per_worker``), each step's forward replayed
as a CUDA graph (``DevicePolicy``); the action sampling stays on the CPU with the env.

One policy per worker process, as RLlib's ``num_gpus_per_env_runner`` places it: a step pays a host-to-device copy of
its observations, one graph launch and the copy back, and no other process's round trip. A model with an LSTM runs
on the GPU uncaptured (cuDNN's recurrent kernels allocate as they go)."""

from __future__ import annotations

import torch

from distrl.compile.backends.base import Built
from distrl.compile.policy import DevicePolicy


def gpu_given() -> tuple[bool, str]:
    """Whether this process may use a GPU: CUDA works here and, inside a Ray actor, Ray gave it one."""
    if not torch.cuda.is_available():
        return False, f"no CUDA device here (torch {torch.__version__})"
    from distrl.common.ray_actor import in_ray_actor

    if in_ray_actor():
        import ray

        if not ray.get_runtime_context().get_accelerator_ids().get("GPU"):
            return False, "Ray gave this worker no GPU (rollout.num_gpus_per_worker=0)"
    return True, f"torch {torch.__version__}, {torch.cuda.get_device_name()}"


class CudaBackend:
    name = "cuda"

    def available(self) -> tuple[bool, str]:
        return gpu_given()

    def prepare(self, module, example, mode) -> dict:
        return {}

    def build(self, module, example, mode, options, artifacts) -> Built:
        ok, reason = gpu_given()
        if not ok:
            raise RuntimeError(reason)
        recurrent = any(isinstance(m, torch.nn.RNNBase) for m in module.modules())
        return Built(DevicePolicy(module, "cuda", capture=not recurrent))


BACKEND = CudaBackend()
