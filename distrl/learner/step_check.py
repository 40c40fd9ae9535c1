"""The device step's first update, checked against the plain loop on the same minibatches.

The device step (``step.py``) does what the loop does with every decision moved onto the device,
and on CUDA captures it as a graph: a capture rule broken, a buffer read at the wrong time or a
guard that no longer fires would train silently wrong. So the first update a learner runs with it
is run three times from the same state (weights, optimiser state, the minibatch generator): by the
loop, by the loop again from weights one float32 ulp away, and by the device step. The loop's own
rounding (how far one ulp in moves the update's results) sets the tolerance, as the compiled worker
policies are checked (``distrl/compile/check.py``): the device step's losses, gradient norms,
statistics and updated weights must be within ``ERROR_MULTIPLE`` times that spread of the loop's,
plus a floor of a few ulps. A capture that raises or a result outside the bound falls back to the
loop (or, with ``learner.step_strict``, is an error); either way the loop's update is the one kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from distrl.compile.check import EPS32, ERROR_MULTIPLE, FLOOR_ULPS, reduction_length

COUNTS = ("gradient_steps", "skipped_steps", "kl_early_stop")  # equal, unless one ulp moves them too


class StepCheckFailed(RuntimeError):
    """``learner.step_strict``: the device step's first update did not match the loop's."""


@dataclass
class UpdateState:
    """What an update changes: the weights, the optimiser's state and the minibatch generator (copies)."""

    params: list[torch.Tensor]
    optimizer: list[dict | None]  # per parameter, in the model's order
    generator: torch.Tensor

    @classmethod
    def capture(cls, model: nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> UpdateState:
        params = list(model.parameters())
        state = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in optimizer.state[p].items()}
                 if p in optimizer.state else None for p in params]  # fmt: skip
        return cls([p.detach().clone() for p in params], state, generator.get_state())

    def restore(self, model: nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> None:
        """Put this state back, in place where a tensor exists (a captured CUDA graph holds their addresses)."""
        with torch.no_grad():
            for p, saved, state in zip(model.parameters(), self.params, self.optimizer):
                p.copy_(saved)
                p.grad = None
                if state is None:
                    optimizer.state.pop(p, None)
                    continue
                current = optimizer.state[p]
                for key, value in state.items():
                    if isinstance(value, torch.Tensor) and isinstance(current.get(key), torch.Tensor) \
                            and current[key].shape == value.shape:  # fmt: skip
                        current[key].copy_(value)
                    else:
                        current[key] = value.clone() if isinstance(value, torch.Tensor) else value
        generator.set_state(self.generator)


def nudge_one_ulp(model: nn.Module, seed: int = 0) -> None:
    """Move every weight one float32 ulp up or down (random signs): the loop's sensitivity to its own rounding."""
    rng = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            signs = torch.randint(0, 2, p.shape, generator=rng).to(p.device, p.dtype) * 2 - 1
            p.mul_(1 + EPS32 * signs)


@dataclass(frozen=True)
class StepCheck:
    ok: bool
    reason: str  # one line: what failed, or what came closest to its bound

    def as_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason}


def compare_updates(loop: tuple[dict, UpdateState], nudged: tuple[dict, UpdateState], device: tuple[dict, UpdateState],
                    model: nn.Module) -> StepCheck:  # fmt: skip
    """Is the device step's update the loop's, within the loop's own rounding? Each argument: (stats, state after)."""
    (loop_stats, loop_state), (nudged_stats, nudged_state), (device_stats, device_state) = loop, nudged, device
    for key in COUNTS:
        if device_stats[key] != loop_stats[key] and nudged_stats[key] == loop_stats[key]:
            return StepCheck(False, f"{key} {device_stats[key]} where the loop's is {loop_stats[key]}")
    floor = FLOOR_ULPS * math.sqrt(reduction_length(model)) * EPS32
    worst = (0.0, "")  # the largest share of its tolerance any value used

    def within(name: str, got: torch.Tensor, want: torch.Tensor, spread_of: torch.Tensor) -> str | None:
        nonlocal worst
        got, want, spread_of = (torch.as_tensor(x, dtype=torch.float64).cpu().reshape(-1) for x in (got, want, spread_of))
        finite = torch.isfinite(want)  # a step skipped as non-finite is NaN on both paths: that is a match
        if not torch.equal(finite, torch.isfinite(got)):
            return f"{name} is not finite where the loop's is, or the other way round"
        got, want, spread_of = got[finite], want[finite], spread_of[finite].nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        difference = float((got - want).abs().max()) if got.numel() else 0.0
        spread = float((spread_of - want).abs().max()) if got.numel() else 0.0
        tolerance = ERROR_MULTIPLE * spread + floor * max(float(want.abs().max()) if want.numel() else 0.0, 1e-30)
        if not math.isfinite(difference) or difference > tolerance:
            return f"{name} differs by {difference:.3g} (tolerance {tolerance:.3g}: {ERROR_MULTIPLE:g}x the {spread:.3g} one ulp moves it)"
        share = difference / tolerance
        if share >= worst[0]:
            worst = (share, f"{name} {difference:.3g} of {tolerance:.3g}")
        return None

    for key, value in loop_stats.items():
        if key in COUNTS or not isinstance(value, float):
            continue
        problem = within(key, device_stats[key], value, nudged_stats[key])
        if problem:
            return StepCheck(False, problem)
    names = [name for name, _ in model.named_parameters()]
    for name, want, got, nudged_value in zip(names, loop_state.params, device_state.params, nudged_state.params):
        problem = within(f"weight {name}", got, want, nudged_value)
        if problem:
            return StepCheck(False, problem)
    return StepCheck(True, f"matched the loop; closest to its bound: {worst[1]}")
