"""The PPO update's minibatch steps without the host in the loop: the device step.

The plain loop (``epochs.LoopEpochs``) launches every kernel of a step from Python and, with
the plan's ``target_kl``, reads the KL on the host after each minibatch. On a GPU such a step is bound by its
launches, which one captured CUDA graph removes (docs/performance.md has ``benchmarks/learner/learner_step.py``'s
figures). The device step is one function over static buffers: forward, loss,
backward, global-norm clipping, the non-finite guard and fused Adam, with every decision that the loop takes on the
host taken on the device:

- a non-finite loss or gradient sets Adam's ``found_inf`` (the fused kernel then skips the
  step, step count included), as the loop does;
- ``target_kl`` (``ppo.target_kl``): a device flag, set once a step's KL passes the target, turns every later
  step of the update into a skipped one that is not counted; the host reads it once per epoch
  (not per minibatch) and stops drawing epochs, so both paths draw the same permutations;
- the statistics are summed on the device and read once per update.

On CUDA the function is captured once as a CUDA graph (after a warm-up on a side stream, with
the optimizer's update masked) and replayed per minibatch, the minibatch gathered into the
static buffers on the device. On CPU the same function runs uncaptured (``learner.step: device``;
``auto`` keeps the loop there, measured as fast), and the tests hold it to the plain loop. What it cannot take
(recurrent models, DDP ranks, fp16's gradient
scaler, a compile mode that captures its own CUDA graphs) is refused by the config and left to the loop by ``auto``.
A loss compiled by inductor runs inside it like the eager one: fused kernels, captured all the same.
"""

from __future__ import annotations

import torch
from torch import nn

from distrl.algo.base import EpochPlan
from distrl.data.samples import gather_rows
from distrl.learner.epochs import first_minibatch, seconds_per_call


class DeviceStep:
    """The minibatch step as one function over static buffers; captured as a CUDA graph when ``capture``.

    ``loss_fn(minibatch)``: the forward and the algorithm's loss (``MinibatchLoss.terms``, ``update.py``), a dict with
    ``loss`` (and ``approx_kl`` with a ``target_kl``); ``optimizer``: fused Adam over ``model``'s
    parameters (capturable, with a tensor lr, when captured); ``plan``: the algorithm's ``EpochPlan``.
    ``run`` replaces the loop of ``epochs.LoopEpochs``.
    """

    kind = "device"

    def __init__(
        self,
        loss,
        loss_fn,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        plan: EpochPlan,
        device: torch.device,
        capture: bool,
    ):
        """``loss``: the ``MinibatchLoss``; ``loss_fn``: what the step calls, its ``terms`` or those compiled by
        inductor
        (a mode without CUDA graphs of its own: the capture here takes inductor's kernels like any others)."""
        self.loss, self.loss_fn = loss, loss_fn
        self.optimizer = optimizer
        self.plan = plan
        self.capture = capture
        self.params = list(model.parameters())
        self.device = device
        zero = lambda: torch.zeros((), device=self.device)  # noqa: E731
        self.found_inf, self.stopped, self.count, self.skipped = zero(), zero(), zero(), zero()
        self.totals: dict[str, torch.Tensor] = {}
        self.static: dict[str, torch.Tensor] | None = None
        self.graph: torch.cuda.CUDAGraph | None = None

    def _body(self) -> None:
        """One minibatch step on ``self.static``; every decision on the device."""
        plan = self.plan
        parts = self.loss_fn(self.static)
        parts["loss"].backward()
        grad_norm = nn.utils.clip_grad_norm_(self.params, plan.max_grad_norm)
        bad = ~(torch.isfinite(grad_norm) & torch.isfinite(parts["loss"]))
        parts["grad_norm"] = grad_norm
        for key in parts:
            if key not in self.totals:
                self.totals[key] = torch.zeros((), device=self.device)
        if plan.target_kl is None:  # every step counts; `stopped` is only set while warming up for the capture
            self.found_inf.copy_(torch.maximum(bad.float(), self.stopped))
            self.optimizer.step()
            torch._foreach_zero_([p.grad for p in self.params if p.grad is not None])
            torch._foreach_add_(list(self.totals.values()), [parts[k].detach().float() for k in self.totals])
            self.count.add_(1.0)
            self.skipped.add_(bad.float())
            return
        active = self.stopped == 0
        self.found_inf.copy_((bad | ~active).float())
        self.optimizer.step()
        torch._foreach_zero_([p.grad for p in self.params if p.grad is not None])
        for key, total in self.totals.items():
            total.add_(torch.where(active, parts[key].detach().float(), 0.0))
        self.count.add_(active.float())
        self.skipped.add_((bad & active).float())
        passed = active & (parts["approx_kl"].detach() > plan.target_kl)
        self.stopped.copy_(torch.where(passed, 1.0, self.stopped))

    def _own_found_inf(self) -> None:
        """Adam skips a step by this step's ``found_inf`` (the mask of a warm-up or a timing, the non-finite guard):
        the optimiser is shared with the loop, which removes its own, and with the trial's other ways, which set theirs
        (a capture made while another way's was set stepped Adam in its masked warm-up: seen on CUDA)."""
        self.optimizer.found_inf = self.found_inf

    def _reset(self) -> None:
        for tensor in (self.stopped, self.count, self.skipped, *self.totals.values()):
            tensor.zero_()

    def _build(self, tensors: dict[str, torch.Tensor], size: int) -> None:
        """Static buffers for minibatches of ``size`` units; on CUDA, warm up and capture the graph."""
        self.static = {k: v[:size].clone() for k, v in tensors.items()}
        self.graph = None
        if not self.capture:
            return
        self._own_found_inf()  # the graph keeps the address Adam reads it from
        self.stopped.fill_(1.0)  # warm-up and capture must not move the weights: every step masked
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # builds the gradients, Adam's state and the allocator's pool before capture
                self._body()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._body()
        self._reset()

    def _needs_build(self, tensors: dict[str, torch.Tensor], size: int) -> bool:
        return self.capture and (
            self.static is None
            or next(iter(self.static.values())).shape[0] != size
            or any(self.static[k].shape[1:] != v.shape[1:] for k, v in tensors.items())
        )

    def prepare(self, samples, num_mb: int) -> None:
        """Compile and capture now, on the samples' shapes, leaving the weights and Adam's state as they are (every
        step of the warm-up masked, as the capture's own)."""
        tensors, size = samples.tensors, len(samples) // num_mb
        if self.capture:
            if self._needs_build(tensors, size):
                self._build(tensors, size)
            return
        self.static = first_minibatch(samples, num_mb)
        self._own_found_inf()
        self.stopped.fill_(1.0)
        self._body()  # a compiled loss compiles here
        self._reset()

    def step_seconds(self, samples, num_mb: int, repeats: int) -> float:
        """One minibatch step (the graph's replay on CUDA), timed with the optimiser's update masked."""
        if self.static is None:
            self.prepare(samples, num_mb)
        self._own_found_inf()
        self.stopped.fill_(1.0)
        seconds = seconds_per_call(self.graph.replay if self.graph is not None else self._body, repeats, self.device)
        self._reset()
        return seconds

    def release(self) -> None:
        """Drop the captured graph and its buffers: rebuilt on the next run (after the optimiser's state it holds the
        addresses of was replaced, or to free the memory of a step not kept)."""
        self.graph, self.static = None, None

    def fits(self, num_units: int, num_minibatches: int) -> bool:
        """Whether this update's minibatches all have one size (a short batch, after a worker timed out, may not)."""
        return num_units % num_minibatches == 0

    def run(self, samples, num_minibatches: int, generator: torch.Generator) -> dict:
        """The plan's epochs over ``samples`` (``TrainingSamples``) in ``num_minibatches`` equal minibatches."""
        epochs = self.plan.epochs
        self._own_found_inf()
        grads = [p.grad for p in self.params if p.grad is not None]
        if (
            grads and not self.capture
        ):  # a loop run in between leaves its gradients: the first backward must not add to them
            torch._foreach_zero_(grads)
        tensors = samples.tensors
        units = len(samples)
        size = units // num_minibatches
        if self._needs_build(tensors, size):
            self._build(tensors, size)
        self._reset()
        target_kl = self.plan.target_kl
        early_stop = False
        for _epoch in range(epochs):
            # The permutation the loop draws (same generator, same call), gathered on the device.
            perm = torch.randperm(units, generator=generator).to(self.device, non_blocking=True)
            if self.graph is None:  # uncaptured: one gather per tensor and epoch, then views (as the loop does)
                shuffled = gather_rows(tensors, perm)
                for i in range(num_minibatches):
                    self.static = {k: v[i * size : (i + 1) * size] for k, v in shuffled.items()}
                    self._body()
            else:  # the graph reads fixed buffers: each minibatch gathered into them on the device
                for i in range(num_minibatches):
                    index = perm[i * size : (i + 1) * size]
                    for key, value in tensors.items():
                        torch.index_select(value, 0, index, out=self.static[key])
                    self.graph.replay()
            if target_kl is not None and bool(self.stopped):  # one read per epoch, only with target_kl
                early_stop = True
                break
        keys = list(self.totals)
        values = torch.stack([self.totals[k] for k in keys] + [self.count, self.skipped]).tolist()  # the one read
        count, skipped = int(values[-2]), int(values[-1])
        stats = {k: v / max(1, count) for k, v in zip(keys, values[:-2])}
        stats.pop("loss", None)
        stats["gradient_steps"] = count
        stats["kl_early_stop"] = early_stop
        stats["skipped_steps"] = skipped
        return stats
