"""Where a learner runs: its device, its CPU threads and cores, and its mixed precision.

``learner.device: auto`` is CUDA only when the learner was given a GPU; ``learner.reserve_cores`` claims cores of its
machine for the learner while it updates (``distrl/common/affinity.py``); ``learner.amp``'s fp16 needs a gradient scaler
against
underflow (bf16 and fp32 do not).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os

import torch

from distrl.common import affinity
from distrl.common.hardware import has_convolutions
from distrl.common.ray_actor import in_ray_actor
from distrl.config.schema import Config
from distrl.data.batch import Batch

log = logging.getLogger("distrl.learner")

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # by precision (step_rules.py)


def resolve_device(requested: str, assigned_gpus: list | None, num_gpus: float, cuda_available: bool) -> torch.device:
    """The learner's device for ``learner.device``.

    ``auto`` is CUDA only when the learner was given a GPU: by Ray (``assigned_gpus``, its accelerator
    ids, when it runs as an actor: Ray does not hide GPUs from an actor that asked for none) or, run
    in-process (``assigned_gpus`` None), by the config (``learner.num_gpus_per_learner`` > 0).
    """
    if requested != "auto":
        return torch.device(requested)
    given = bool(assigned_gpus) if assigned_gpus is not None else num_gpus > 0
    return torch.device("cuda" if given and cuda_available else "cpu")


def _ray_assigned_gpus() -> list | None:
    """The GPU ids Ray gave this actor; None outside a Ray actor."""
    if not in_ray_actor():
        return None
    import ray

    return list(ray.get_runtime_context().get_accelerator_ids().get("GPU", []))


def choose_threads(
    config: Config, device_type: str, world_size: int, machine_cores: int, has_conv: bool
) -> tuple[int, str]:
    """Torch's CPU threads for a learner (``learner.num_threads``), and why.

    ``auto`` adds the workers' CPUs to the learner's own where they would idle while it updates: in a sync run the
    workers wait for its weights through the whole update, in an overlap run through most of a CPU learner's
    convolutional update (Breakout on 2 cores: 1.2 s of sampling against 4.5 s of update, and 2 threads took the
    run from 226 to 253 env steps/s, ``docs/performance.md``). It keeps its own where they sample through the update
    (async), where the GPU does the work, where learners share machines, where ``reserve_cores`` pins it, or for a
    model without convolutions (MinAtar's MLPs on 2 cores ran slower with two threads: ``docs/configs.md``)."""
    cfg = config.learner
    own = max(1, int(cfg.num_cpus_per_learner))
    if cfg.num_threads != "auto":
        return cfg.num_threads, f"learner.num_threads={cfg.num_threads}"
    keeps = (
        ("the GPU does the work", device_type != "cpu"),
        ("learners share their machines", world_size > 1),
        ("learner.reserve_cores pins it", cfg.reserve_cores),
        ("async workers sample through its updates", config.rollout.pipeline == "async"),
        ("the model has no convolutions: a second thread gains less than it costs the workers", not has_conv),
    )
    for why, applies in keeps:
        if applies:
            return own, f"auto: its {own} CPU(s); {why}"
    workers = math.ceil(config.rollout.num_cpus_per_worker * config.rollout.max_workers)
    threads = min(machine_cores, own + workers)
    if threads <= own:
        return own, f"auto: its {own} CPU(s); its machine has no more cores"
    return threads, (
        f"auto: its {own} CPU(s) and the workers' {workers} (up to its machine's {machine_cores} cores), "
        f"idle while it updates ({config.rollout.pipeline})"
    )


class LearnerHardware:
    def __init__(self, config: Config, rank: int, world_size: int = 1):
        cfg = config.learner
        self.device = resolve_device(
            cfg.device, _ray_assigned_gpus(), cfg.num_gpus_per_learner, torch.cuda.is_available()
        )
        self.config, self.world_size = config, world_size
        self.use_threads(has_conv=False)  # until the model is built (``Learner`` calls it again)
        # Under Ray, this process runs on cores of its machine that the workers leave to it while it updates.
        reserved = math.ceil(cfg.num_cpus_per_learner) if cfg.reserve_cores and in_ray_actor() else 0
        self.cores = affinity.LearnerCores(reserved)  # 0: claims nothing
        if reserved and not self.cores.cores:
            log.warning(
                f"learner.reserve_cores: rank {rank} found fewer than {reserved + 1} unclaimed cores on its "
                "machine (one is left for the workers); it shares them with the workers"
            )
        # fp16 needs loss scaling against gradient underflow; bf16 and fp32 do not.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.amp == "fp16")

    def use_threads(self, has_conv: bool) -> None:
        """Set torch's CPU threads for this learner's model (``choose_threads``)."""
        self.threads, self.threads_reason = choose_threads(
            self.config, self.device.type, self.world_size, len(os.sched_getaffinity(0)), has_conv
        )
        torch.set_num_threads(self.threads)

    def to_tensors(self, batch: Batch) -> dict[str, torch.Tensor]:
        """A batch's arrays on the device (through pinned memory to a GPU)."""
        pin = self.device.type == "cuda"
        out = {}
        for key, value in batch.arrays().items():
            tensor = torch.from_numpy(value)
            if pin:
                tensor = tensor.pin_memory()
            out[key] = tensor.to(self.device, non_blocking=pin)
        return out


def autocast(device_type: str, precision: str):
    """The forward's autocast context for ``precision`` ("fp32": none)."""
    dtype = AUTOCAST_DTYPES[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device_type, dtype=dtype)


class _Fp32Linear(torch.nn.Linear):
    """A linear layer that computes in fp32 under any autocast."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return torch.nn.functional.linear(x.float(), self.weight, self.bias)


def heads_outside_autocast(model: torch.nn.Module) -> None:
    """Run ``model``'s policy and value heads in fp32 under a bf16 or fp16 autocast, as mixed precision keeps a
    network's last layers: a value rounded to bf16 is off by 0.4 % of itself, which the value loss squares. The heads
    are a sliver of the work; what autocast speeds up is the layers before them. Their class changes, their weights
    and state dict do not (a copy of the model computes the same)."""
    for name in ("policy_head", "value_head"):
        head = getattr(model, name, None)
        if type(head) is torch.nn.Linear:
            head.__class__ = _Fp32Linear


def choose_memory_format(setting: str, model: torch.nn.Module, device: torch.device) -> tuple[torch.memory_format, str]:
    """The learner model's memory format for ``learner.memory_format``, and why.

    ``auto`` lays a model with convolutions out channels-last on a CPU learner: oneDNN's convolutions work in NHWC,
    so in NCHW each one converts its input, output and gradients (docs/performance.md, the learner, has the step's
    time both ways). On CUDA it stays contiguous until measured there."""
    if setting == "channels_last":
        return torch.channels_last, "learner.memory_format=channels_last"
    if setting == "contiguous":
        return torch.contiguous_format, "learner.memory_format=contiguous"
    if not has_convolutions(model):
        return torch.contiguous_format, "auto: the model has no convolutions"
    if device.type != "cpu":
        return torch.contiguous_format, f"auto: not measured on {device.type} yet"
    return torch.channels_last, "auto: convolutions on a CPU learner, where NHWC is oneDNN's own layout"
