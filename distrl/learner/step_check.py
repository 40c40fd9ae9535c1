"""A learner's first update run another way (the device step, inductor's kernels, bf16), checked against the plain
fp32 loop on the same minibatches.

The device step (``step.py``) does what the loop does with every decision moved onto the device,
and on CUDA captures it as a graph: a capture rule broken, a buffer read at the wrong time or a
guard that no longer fires would train silently wrong; inductor's kernels sum in other orders, and a compile can
be wrong; bf16 rounds every product. So the first update a learner runs another way is run three times from the
same state (weights, optimiser state, the minibatch generator): by the loop, by the loop again from weights one
ulp away (float32's; bf16's for a bf16 way), and the other way. The loop's sensitivity to that rounding (how far
one ulp in moves the update's results) sets the tolerance, as the compiled worker policies are checked
(``distrl/compile/check.py``): the other way's losses, gradient norms, statistics and updated weights (for bf16,
the weights' changes) must be within ``ERROR_MULTIPLE`` times that spread of the loop's, plus a floor of a few
ulps. A capture or compile that raises or a result outside the bound falls back to the loop (or, with
``learner.step_strict``, is an error); either way the loop's update is the one kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from distrl.compile.check import reduction_length
from distrl.compile.tolerance import EPS32, ERROR_MULTIPLE, FLOOR_ULPS

COUNTS = ("gradient_steps", "skipped_steps", "kl_early_stop")  # equal, unless one ulp moves them too
# Shares of the samples (of a minibatch, averaged over the update's steps): resolved no finer than one sample, which a
# rounding moves across the clip's edge as easily as a nudge leaves it where it was
FRACTIONS = ("clip_frac",)


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
        state = [
            {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in optimizer.state[p].items()}
            if p in optimizer.state
            else None
            for p in params
        ]
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
                    if (
                        isinstance(value, torch.Tensor)
                        and isinstance(current.get(key), torch.Tensor)
                        and current[key].shape == value.shape
                    ):
                        current[key].copy_(value)
                    else:
                        current[key] = value.clone() if isinstance(value, torch.Tensor) else value
        generator.set_state(self.generator)


# A bf16 way's changes may be this many times the spread a one-bf16-ulp nudge of the fp32 loop's weights makes. That
# nudge is a full bf16 ulp on every weight, about twice bf16's own rounding of each, so a correct bf16 update sits
# well inside one spread (Pendulum's MLP: 0.35 of it at the closest), while an update half the size it should be is
# 16 spreads off: float32's ERROR_MULTIPLE would let that pass.
BF16_MULTIPLE = 4.0
EPS = {"fp32": EPS32, "bf16": float(torch.finfo(torch.bfloat16).eps), "fp16": float(torch.finfo(torch.float16).eps)}


def nudge_one_ulp(model: nn.Module, seed: int = 0, eps: float = EPS32) -> None:
    """Move every weight one ulp (``eps``: float32's, or a narrower type's) up or down (random signs): the loop's
    sensitivity to rounding of that size."""
    rng = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            signs = torch.randint(0, 2, p.shape, generator=rng).to(p.device, p.dtype) * 2 - 1
            p.mul_(1 + eps * signs)


@dataclass(frozen=True)
class StepCheck:
    ok: bool
    reason: str  # one line: what failed, or what came closest to its bound

    def as_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason}


def compare_updates(
    loop: tuple[dict, UpdateState],
    nudged: tuple[dict, UpdateState],
    device: tuple[dict, UpdateState],
    model: nn.Module,
    eps: float = EPS32,
    origins: tuple[UpdateState, UpdateState] | None = None,
    multiple: float = ERROR_MULTIPLE,
    samples_per_step: int | None = None,
) -> StepCheck:
    """Is another way's update the loop's, within the loop's own rounding? Each of ``loop``, ``nudged`` (the loop
    from weights one ulp of ``eps`` away) and ``device`` (the way checked): (stats, state after).

    ``origins``: the states ``loop`` and ``nudged`` started from. Given, the weights' changes are compared instead of
    the weights: a bf16 ulp of nudge is itself far larger than any float32 update's rounding. ``multiple``: how many
    spreads a value may be off (``ERROR_MULTIPLE``; ``BF16_MULTIPLE`` for bf16). ``samples_per_step``: the samples a
    gradient step's statistics are means over; a share of them (``FRACTIONS``) is then never held to less than
    ``multiple`` samples' worth (one sample flipped is a spread of one sample, however the nudge fell)."""
    (loop_stats, loop_state), (nudged_stats, nudged_state), (device_stats, device_state) = loop, nudged, device
    for key in COUNTS:
        if device_stats[key] != loop_stats[key] and nudged_stats[key] == loop_stats[key]:
            return StepCheck(False, f"{key} {device_stats[key]} where the loop's is {loop_stats[key]}")
    floor = FLOOR_ULPS * math.sqrt(reduction_length(model)) * EPS32  # float32's arithmetic, whatever the nudge
    # A narrow way's products round their inputs, activations and gradients too, which nudging the weights leaves
    # out: its values may also be one of its ulps of their own size off (an update half the size it should be is
    # hundreds of them off)
    own_ulp = eps if origins is not None else 0.0
    worst = (0.0, "")  # the largest share of its tolerance any value used

    def within(
        name: str,
        got: torch.Tensor,
        want: torch.Tensor,
        spread_of: torch.Tensor,
        least: float = 1e-30,
        resolution: float = 0.0,
    ) -> str | None:
        """``least``: the smallest magnitude the floor scales with (1 for the statistics: means of O(1) terms, like
        the policy loss of normalised advantages, that cancel to near 0 and keep their terms' rounding)."""
        nonlocal worst
        got, want, spread_of = (
            torch.as_tensor(x, dtype=torch.float64).cpu().reshape(-1) for x in (got, want, spread_of)
        )
        finite = torch.isfinite(want)  # a step skipped as non-finite is NaN on both paths: that is a match
        if not torch.equal(finite, torch.isfinite(got)):
            return f"{name} is not finite where the loop's is, or the other way round"
        got, want, spread_of = got[finite], want[finite], spread_of[finite].nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        difference = float((got - want).abs().max()) if got.numel() else 0.0
        spread = max(float((spread_of - want).abs().max()) if got.numel() else 0.0, resolution)
        size = float(want.abs().max()) if want.numel() else 0.0
        tolerance = multiple * spread + floor * max(size, least) + own_ulp * size
        if not math.isfinite(difference) or difference > tolerance:
            return (
                f"{name} differs by {difference:.3g} "
                f"(tolerance {tolerance:.3g}: {multiple:g}x the {spread:.3g} one ulp moves it)"
            )
        share = difference / tolerance
        if share >= worst[0]:
            worst = (share, f"{name} {difference:.3g} of {tolerance:.3g}")
        return None

    counted = (samples_per_step or 0) * loop_stats["gradient_steps"]
    for key, value in loop_stats.items():
        if key in COUNTS or not isinstance(value, float):
            continue
        resolution = 1.0 / counted if key in FRACTIONS and counted else 0.0
        problem = within(key, device_stats[key], value, nudged_stats[key], least=1.0, resolution=resolution)
        if problem:
            return StepCheck(False, problem)
    names = [name for name, _ in model.named_parameters()]
    start, nudged_start = (origins[0].params, origins[1].params) if origins else ([0.0] * len(names),) * 2
    what = "the change of weight" if origins else "weight"
    for name, want, got, nudged_value, s0, s1 in zip(
        names, loop_state.params, device_state.params, nudged_state.params, start, nudged_start
    ):
        problem = within(f"{what} {name}", got - s0, want - s0, nudged_value - s1)
        if problem:
            return StepCheck(False, problem)
    return StepCheck(True, f"matched the loop; closest to its bound: {worst[1]}")
