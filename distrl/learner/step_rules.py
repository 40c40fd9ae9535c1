"""How a learner runs its minibatch step: plain rules, no torch.

Three choices, each with the reason the start-up summary prints:

- the step (``learner.step``): the plain loop, or the device step (``step.py``). What rules the device step out
  (``step_blockers``) is the config's, which refuses ``learner.step: device`` with them;
- the kernels (``learner.compile.backend``): eager, or the loss compiled by inductor;
- the precision (``learner.amp``): fp32, bf16 (autocast) or fp16 (autocast and a gradient scaler).

Where ``auto`` leaves more than one kernel or precision, each is timed on the first update and the fastest that
matches the plain fp32 loop is kept (``trial.py``).
"""

from __future__ import annotations

from distrl.config.rules import step_blockers
from distrl.config.schema import Config

KERNELS = ("eager", "inductor")
PRECISIONS = ("fp32", "bf16", "fp16")


def choose_step(config: Config, device_type: str, world_size: int) -> tuple[str, str]:
    """``("device" | "loop", why)`` for ``learner.step`` on a learner of ``device_type`` ("cuda", "cpu")."""
    setting = config.learner.step
    if setting == "loop":
        return "loop", "learner.step=loop"
    if setting == "device":
        return "device", "learner.step=device" + (
            " (a CUDA graph)" if device_type == "cuda" else " (uncaptured on CPU)"
        )
    blockers = step_blockers(config, world_size)
    if device_type != "cuda":
        # On a CPU the uncaptured device step and the loop take the same time (benchmarks/learner/learner_step.py's
        # figures in docs/performance.md): the loop, which every other way is checked against, stays.
        blockers.insert(
            0,
            "the learner is on CPU, where op by op is as fast as a captured graph (each op's own work is "
            "the time, not its launch)",
        )
    if blockers:
        return "loop", "; ".join(blockers)
    return "device", "on CUDA: the whole minibatch step as one CUDA graph"


def choose_kernels(
    config: Config, step: str, device_type: str, world_size: int, has_conv: bool
) -> tuple[list[str], str]:
    """The kernels to try (``KERNELS``; more than one: timed on the first update) for ``learner.compile.backend``."""
    cfg = config.learner.compile
    if cfg.backend != "auto":
        return [cfg.backend], f"learner.compile={cfg.backend}"
    if cfg.critic_mode is not None:  # the towers are compiled in place: there is no eager model beside them
        return ["inductor"], "auto with learner.compile.critic_mode: the towers compiled by inductor"
    if world_size > 1:
        return ["eager"], "auto: DDP ranks would each time their own and could choose differently"
    if step == "device" and device_type == "cuda":
        return (
            ["eager", "inductor"],
            "auto: the step's eager kernels and inductor's fused ones, each captured as a CUDA "
            "graph, timed on the first update",
        )
    if device_type == "cpu" and has_conv:
        # A convolutional update compiled wins its compile time back within a few updates (docs/performance.md).
        return [
            "eager",
            "inductor",
        ], "auto: a convolutional model's loop on CPU, eager and inductor timed on the first update"
    # An MLP's update is faster compiled too, but its compile takes most of a short run to win back.
    if device_type == "cuda":
        return ["eager"], "auto: eager in the loop on CUDA (the device step is where inductor is timed)"
    return ["eager"], (
        "auto: eager on CPU for a model without convolutions (compiling it costs more start-up than its "
        "steps win back in a short run; learner.compile=inductor asks for it)"
    )


def choose_precision(
    config: Config, device_type: str, world_size: int, has_conv: bool, cpu_bf16: str | None, wide: bool = False
) -> tuple[list[str], str]:
    """The precisions to try (``PRECISIONS``) for ``learner.amp``; ``cpu_bf16``: the CPU's bf16 instructions by
    name (``distrl.common.hardware.cpu_bf16``), None without; ``wide``: the model has wide linear layers
    (``distrl.common.hardware.has_wide_layers``)."""
    amp = config.learner.amp
    if amp != "auto":
        return [{"off": "fp32"}.get(amp, amp)], f"learner.amp={amp}"
    if device_type != "cpu":
        return ["fp32"], "auto: fp32 on a GPU (learner.amp=bf16 asks for bf16 there)"
    if world_size > 1:
        return ["fp32"], "auto: DDP ranks would each time their own and could choose differently"
    if cpu_bf16 is None:
        return [
            "fp32"
        ], "auto: this CPU has no bf16 instructions (AMX, AVX512-BF16), so bf16 would be emulated (10x slower)"
    if not has_conv and not wide:
        # bf16 gains nothing on small products and loses on an LSTM's (docs/performance.md, the learner).
        return ["fp32"], (
            "auto: fp32 for a model without convolutions or wide layers (its products are too small for bf16 to pay)"
        )
    return ["fp32", "bf16"], f"auto: this CPU has {cpu_bf16}; fp32 and bf16 timed on the first update"
