"""How an update's epochs run over its minibatches: the plain loop, or the device step with its first-update check.

``build_epochs`` picks one by the step a learner runs (``step_rules.choose_step``); the learner calls ``run`` and
reads ``kind``/``reason``/``check`` for its report, and knows nothing else of either.

- ``LoopEpochs``: CleanRL's loop: forward, loss, backward, global-norm clipping, a non-finite guard and fused Adam,
  one minibatch at a time, with the KL early stop read on the host.
- ``DeviceEpochs``: the device step (``step.py``). Its first update is held to the loop's on the same minibatches
  (``step_check.py``); one that does not match leaves the loop in its place (or stops the run with
  ``learner.step_strict``). A batch that does not split into equal minibatches (one short of a timed-out worker's
  part) runs the loop once.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from distrl.algo.base import EpochPlan
from distrl.common.errors import describe_error
from distrl.data.samples import TrainingSamples
from distrl.learner.distributed import average
from distrl.learner.step import DeviceStep
from distrl.learner.step_check import StepCheck, StepCheckFailed, UpdateState, compare_updates, nudge_one_ulp

log = logging.getLogger("distrl.learner")


class LoopEpochs:
    kind = "loop"

    def __init__(self, loss_fn, model: nn.Module, optimizer: torch.optim.Optimizer, scaler, plan: EpochPlan,
                 device: torch.device, world_size: int, reason: str = ""):  # fmt: skip
        self.loss_fn, self.model, self.optimizer, self.scaler = loss_fn, model, optimizer, scaler
        self.plan, self.device, self.world_size = plan, device, world_size
        self.reason = reason
        self.check: StepCheck | None = None
        self.checking = False

    def run(self, samples: TrainingSamples, num_mb: int, generator: torch.Generator) -> dict:
        """The plan's epochs over the samples in minibatches, KL early stop."""
        cfg = self.plan
        # Statistics and the skip count stay on the device until the update ends: reading one per minibatch
        # would make the host wait for the accelerator at every step.
        totals: dict[str, torch.Tensor] = {}
        skipped = torch.zeros((), device=self.device)
        count = 0
        early_stop = False
        params = list(self.model.parameters())
        for _epoch in range(cfg.epochs):
            for minibatch in samples.minibatches(num_mb, generator):
                parts = self.loss_fn(minibatch)
                self.optimizer.zero_grad(set_to_none=True)
                self.scaler.scale(parts["loss"]).backward()
                self.scaler.unscale_(self.optimizer)
                grad_norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                # NaN/inf guard (gradients are already averaged across ranks, so every rank agrees): the fused
                # Adam skips its step, step count included, where found_inf is 1; fp16's scaler sets its own.
                bad = (~(torch.isfinite(grad_norm) & torch.isfinite(parts["loss"]))).float()
                if not self.scaler.is_enabled():
                    self.optimizer.found_inf = bad
                self.scaler.step(self.optimizer)
                self.scaler.update()
                skipped += bad
                parts["grad_norm"] = grad_norm
                for key, value in parts.items():
                    value = value.detach().float()
                    totals[key] = totals[key] + value if key in totals else value.clone()
                count += 1
                if cfg.target_kl is not None:
                    kl = average(parts["approx_kl"].detach().clone(), self.world_size)
                    if kl > cfg.target_kl:
                        early_stop = True
                        break
            if early_stop:
                break
        if hasattr(self.optimizer, "found_inf"):
            del self.optimizer.found_inf
        skipped_steps = int(skipped)
        keys = list(totals)
        means = (torch.stack([totals[k] for k in keys]) / max(1, count)).tolist() if keys else []
        stats = dict(zip(keys, means))
        stats.pop("loss", None)
        stats["gradient_steps"] = count
        stats["skipped_steps"] = skipped_steps  # of this update's gradient steps (non-finite loss or gradients)
        stats["kl_early_stop"] = early_stop
        return stats


class DeviceEpochs:
    """The device step, checked against the loop on its first update; the loop after a failed check."""

    def __init__(self, loop: LoopEpochs, step: DeviceStep, strict: bool, reason: str):
        self.loop, self.step, self.strict = loop, step, strict
        self.kind, self.reason = "device", reason
        self.check: StepCheck | None = None  # the first update's, once it ran
        self.warned_uneven = False

    @property
    def checking(self) -> bool:
        """Whether the next update is the first one, held to the loop's."""
        return self.step is not None and self.check is None

    def run(self, samples: TrainingSamples, num_mb: int, generator: torch.Generator) -> dict:
        if self.step is None:  # the check failed: the loop from then on
            return self.loop.run(samples, num_mb, generator)
        if not self.step.fits(len(samples), num_mb):
            if not self.warned_uneven:  # a batch short of a timed-out worker's part: minibatches of two sizes
                self.warned_uneven = True
                log.warning(f"{len(samples)} samples do not split into {num_mb} equal minibatches: this update runs "
                            "the plain loop (said once)")  # fmt: skip
            return self.loop.run(samples, num_mb, generator)
        if self.check is None:
            return self._checked(samples, num_mb, generator)
        return self.step.run(samples, num_mb, self.loop.plan.epochs, generator)

    def _checked(self, samples: TrainingSamples, num_mb: int, generator: torch.Generator) -> dict:
        """The device step's first update, held to the loop's on the same minibatches (``step_check.py``)."""
        model, optimizer = self.loop.model, self.loop.optimizer
        start = UpdateState.capture(model, optimizer, generator)
        loop = (self.loop.run(samples, num_mb, generator), UpdateState.capture(model, optimizer, generator))
        start.restore(model, optimizer, generator)
        nudge_one_ulp(model)
        nudged = (self.loop.run(samples, num_mb, generator), UpdateState.capture(model, optimizer, generator))
        start.restore(model, optimizer, generator)
        try:
            stats = self.step.run(samples, num_mb, self.loop.plan.epochs, generator)
            device = (stats, UpdateState.capture(model, optimizer, generator))
            self.check = compare_updates(loop, nudged, device, model)
        except Exception as exc:  # a capture that fails, an op the graph cannot hold
            self.check = StepCheck(False, f"it raised {describe_error(exc)}")
        if self.check.ok:
            return stats
        problem = f"the device step's first update did not match the loop's: {self.check.reason}"
        if self.strict:
            raise StepCheckFailed(f"{problem} (learner.step_strict=true)")
        loop[1].restore(model, optimizer, generator)  # the loop's update is the one kept
        self.step = None
        self.kind, self.reason = "loop", f"{problem}; the loop runs instead"
        return loop[0]
