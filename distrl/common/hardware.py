"""What the precision and memory-layout rules ask of this CPU and of a model, for learners and worker policies alike."""

from __future__ import annotations

import torch


def cpu_bf16() -> str | None:
    """This CPU's bf16 matrix instructions by name ("AMX", "AVX512-BF16"), or None: without them oneDNN emulates bf16,
    many times slower than fp32 (docs/performance.md, the learner)."""
    probes = (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported"))
    for name, probe in probes:
        check = getattr(torch.cpu, probe, None)  # private, but what ATen's own dispatch reads
        if check is not None and check():
            return name
    return None


def has_convolutions(model: torch.nn.Module) -> bool:
    """Whether ``model`` has a 2-D convolution: what the layout, kernel and precision rules ask of a model."""
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules())


# A linear layer with at least this many weights: products wide enough for bf16's matrix kernels to pay on a CPU that
# has them (MinAtar's 400 x 256 layers do; the 64 x 64 control MLPs lose; docs/performance.md, the learner)
WIDE_LAYER_WEIGHTS = 256 * 256


def has_wide_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` has a linear layer of ``WIDE_LAYER_WEIGHTS`` or more and no recurrent core (whose small
    per-step products bf16 slows): what the learner's precision rule asks of a model without convolutions."""
    if any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
        return False
    return any(isinstance(m, torch.nn.Linear) and m.weight.numel() >= WIDE_LAYER_WEIGHTS for m in model.modules())
