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
    if device_type != "cuda":
        # benchmarks/learner_step.py and an interleaved A/B on a 2-core AMD EPYC: MLP mb 1024 loop 4.03-4.13 ms vs
        # device 3.69-4.27 ms a step, Nature-CNN mb 256 265 vs 287 ms: no difference beyond the machine's noise.
        blockers.insert(0, "not on CUDA (on CPU the loop is as fast: each op's own cost dominates, not its launch)")
    if blockers:
        return "loop", "; ".join(blockers)
    return "device", "on CUDA: the whole minibatch step as one CUDA graph"


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
