"""The plain loop over an update's epochs and minibatches (CleanRL's): forward, loss, backward, global-norm clipping, a
non-finite guard and fused Adam, one minibatch at a time, with the KL early stop read on the host.

The device step (``step.py``) runs the same epochs with the host out of the loop; ``trial.py`` picks among the
ways a learner can run them and holds the first update of each to this loop's.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from distrl.algo.base import EpochPlan
from distrl.data.samples import TrainingSamples
from distrl.learner.distributed import average


def first_minibatch(samples: TrainingSamples, num_mb: int) -> dict[str, torch.Tensor]:
    """The samples' first ``1 / num_mb`` in order: a minibatch for warm-ups and timing that draws nothing from the
    update's generator."""
    size = len(samples) // num_mb
    return {k: v[:size] for k, v in samples.tensors.items()}


def seconds_per_call(fn, repeats: int, device: torch.device) -> float:
    """The fastest of ``repeats`` timed calls of ``fn`` (after the device has finished what was queued)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


class LoopEpochs:
    kind = "loop"

    def __init__(
        self,
        loss,
        loss_fn,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler,
        plan: EpochPlan,
        device: torch.device,
        world_size: int,
    ):
        """``loss``: the ``MinibatchLoss`` (its precision; the targets' forward); ``loss_fn``: what a step calls, its
        ``terms`` or those compiled."""
        self.loss, self.loss_fn, self.model, self.optimizer, self.scaler = loss, loss_fn, model, optimizer, scaler
        self.plan, self.device, self.world_size = plan, device, world_size

    def fits(self, num_units: int, num_minibatches: int) -> bool:
        return True  # minibatches of two sizes are two graphs to a compiled loss, but it runs them

    def _forward_backward(self, minibatch: dict[str, torch.Tensor]) -> None:
        self.loss_fn(minibatch)["loss"].backward()
        for p in self.model.parameters():
            p.grad = None

    def prepare(self, samples: TrainingSamples, num_mb: int) -> None:
        """Compile now (a compiled loss compiles on its first call), leaving the weights and Adam's state as they
        are."""
        if self.loss_fn != self.loss.terms:  # a bound method is a new object at each access: compared by ==
            self._forward_backward(first_minibatch(samples, num_mb))

    def step_seconds(self, samples: TrainingSamples, num_mb: int, repeats: int) -> float:
        """A step's forward, loss and backward on one minibatch, timed (the optimiser's step, which every way of
        running takes alike, left out so that the weights stay)."""
        minibatch = first_minibatch(samples, num_mb)
        return seconds_per_call(lambda: self._forward_backward(minibatch), repeats, self.device)

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
