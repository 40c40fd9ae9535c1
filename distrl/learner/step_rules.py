"""Which minibatch step a learner runs (``learner.step``): plain rules, no torch. What rules the device step out
(``step_blockers``) is the config's, which refuses ``learner.step: device`` with them."""

from __future__ import annotations

from distrl.config.schema import Config, step_blockers


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
        blockers.insert(0, "the learner is on CPU, where op by op is as fast as a captured graph (each op's own work is "
                           "the time, not its launch)")
    if blockers:
        return "loop", "; ".join(blockers)
    return "device", "on CUDA: the whole minibatch step as one CUDA graph"
