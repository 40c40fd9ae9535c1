"""Which minibatch step a learner runs (``learner.step``): plain rules, no torch (the config checks them too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrl.config.schema import Config


def choose_step(config: Config, device_type: str, world_size: int) -> tuple[str, str]:
    """``("device" | "loop", why)`` for ``learner.step`` on a learner of ``device_type`` ("cuda", "cpu")."""
    setting = config.learner.step
    if setting == "loop":
        return "loop", "learner.step=loop"
    if setting == "device":
        return "device", "learner.step=device" + (" (a CUDA graph)" if device_type == "cuda" else " (uncaptured on CPU)")
    blockers = step_blockers(config, world_size)
    if blockers:
        return "loop", "; ".join(blockers)
    if device_type == "cuda":
        return "device", "on CUDA: the whole minibatch step as one CUDA graph"
    # benchmarks/learner_step.py on a 2-core AMD EPYC: MLP mb 1024 3.15 ms (device) vs 3.47 ms (loop), a bare
    # PyTorch step 2.82 ms; Nature-CNN mb 256 274 vs 287 ms, bare 276 ms.
    return "device", "on CPU: the same step uncaptured (fewer host operations per step than the loop)"


def step_blockers(config: Config, world_size: int | None = None) -> list[str]:
    """Why the device step cannot run this config (empty when it can)."""
    out = []
    world = config.learner.num_learners if world_size is None else world_size
    if config.model.lstm_size > 0:
        out.append("recurrent models (model.lstm_size>0) train through a per-step loop the graph cannot hold")
    if world > 1:
        out.append("DDP (learner.num_learners>1): its gradient all-reduce hooks run outside a captured graph")
    if config.learner.amp == "fp16":
        out.append("learner.amp=fp16: the gradient scaler reads and updates its scale on the host")
    if config.learner.compile.backend != "eager":
        out.append("learner.compile: torch.compile makes its own graphs (reduce-overhead for CUDA graphs)")
    return out
