"""How a learner runs its updates, settled on the first one: each way timed, the fastest checked against the loop.

A learner may have more than one way to run an update's epochs (``step_rules.py``): the device step or the plain
loop, eager kernels or inductor's, fp32 or bf16. ``TrialEpochs`` holds them as ``Way``s. On the first update:

1. each way is prepared on the update's own shapes (inductor compiles, the device step captures its graph on
   CUDA), leaving the weights as they were, and, where there are several, timed over a few of its steps. Where
   precisions compete, their eager ways are timed first and only the fastest precision's compiled ways are prepared
   (an inductor compile is the trial's cost: on a 16-core Xeon with AMX the CNN's fp32 and bf16 compiles made a
   77 s first update);
2. the fastest (the first way, eager fp32, unless another is ``MARGIN`` faster: timing noise) is run on the update
   and checked against the plain fp32 loop on the same minibatches (``step_check.py``); one that fails, or raised,
   gives its place to the next fastest;
3. the way that passed runs every later update, its first update kept; with none, the loop's update is kept and the
   loop runs on.

A learner with one way that is the loop itself (fp32 or fp16, eager or as ``learner.compile`` names) has nothing to
try: its updates are the loop's from the start. So are DDP ranks' (they take their first way untried), whose checks
and timings could part them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from distrl.common.errors import describe_error
from distrl.compile.tolerance import ERROR_MULTIPLE
from distrl.data.samples import TrainingSamples
from distrl.learner.epochs import LoopEpochs
from distrl.learner.step import DeviceStep
from distrl.learner.step_check import (
    BF16_MULTIPLE,
    EPS,
    StepCheck,
    StepCheckFailed,
    UpdateState,
    compare_updates,
    nudge_one_ulp,
)

log = logging.getLogger("distrl.learner")

MARGIN = 0.95  # another way is kept over the first only if its step takes at most this share of the first's
TIMED_STEPS = 3  # the fastest of this many steps is a way's time


@dataclass
class Way:
    """One way to run an update: the step's kind, its kernels and precision, and what the trial found."""

    kernels: str  # step_rules.KERNELS
    precision: str  # step_rules.PRECISIONS
    runner: LoopEpochs | DeviceStep
    loop: LoopEpochs  # the loop with this way's loss, for a batch the device step cannot split evenly
    step_s: float | None = None  # the fastest timed step
    prepare_s: float | None = None  # compiling, capturing
    problem: str | None = None  # why it was not kept, once tried
    passed_over: str | None = None  # why it was not prepared: its precision lost on the eager kernels

    @property
    def name(self) -> str:
        step = "device step" if self.runner.kind == "device" else "loop"
        return f"{step}, {self.kernels} kernels, {self.precision}"

    def report(self) -> dict:
        return {
            "way": self.name,
            "step_ms": None if self.step_s is None else round(self.step_s * 1e3, 3),
            "prepare_s": None if self.prepare_s is None else round(self.prepare_s, 2),
            "problem": self.problem,
            **({"passed_over": self.passed_over} if self.passed_over else {}),
        }


class TrialEpochs:
    """A learner's epochs: its ways, tried on the first update (when there is anything to try), then the one kept."""

    def __init__(self, reference: LoopEpochs, ways: list[Way], step_reason: str, strict: bool, try_first: bool):
        """``reference``: the plain eager fp32 loop; ``ways``: the first one eager fp32 where it is a way;
        ``try_first``: False for DDP ranks, which take the first way untried."""
        self.reference, self.ways, self.strict = reference, ways, strict
        self.way = ways[0]
        self.reason = step_reason
        plain = len(ways) == 1 and ways[0].runner.kind == "loop" and ways[0].precision != "bf16"
        self.pending = try_first and not plain  # the first update tries the ways
        self.check: StepCheck | None = None
        self.warned_uneven = False

    kind = property(lambda self: self.way.runner.kind)
    loss = property(lambda self: self.way.runner.loss)  # the kept way's (its precision), for the targets' forward
    step = property(lambda self: self.way.runner if isinstance(self.way.runner, DeviceStep) else None)
    checking = property(lambda self: self.pending)  # whether the next update is the first, tried and checked

    def describe(self) -> dict:
        """The kernels and precision running (or, before the first update, those to try), and the trial's report."""
        if self.pending:
            kernels = " or ".join(dict.fromkeys(w.kernels for w in self.ways))
            precision = " or ".join(dict.fromkeys(w.precision for w in self.ways))
        else:
            kernels, precision = self.way.kernels, self.way.precision
        tried = [
            w.report()
            for w in self.ways
            if w.step_s is not None or w.problem or w.prepare_s is not None or w.passed_over
        ]
        return {"kernels": kernels, "precision": precision, "trial": tried or None}

    def run(self, samples: TrainingSamples, num_mb: int, generator: torch.Generator) -> dict:
        if self.pending:
            self.pending = False
            return self._first(samples, num_mb, generator)
        runner = self.way.runner
        if not runner.fits(len(samples), num_mb):
            if not self.warned_uneven:  # a batch short of a timed-out worker's part: minibatches of two sizes
                self.warned_uneven = True
                log.warning(
                    f"{len(samples)} samples do not split into {num_mb} equal minibatches: this update runs "
                    "the plain loop (said once)"
                )
            return self.way.loop.run(samples, num_mb, generator)
        return runner.run(samples, num_mb, generator)

    # --- the first update ---------------------------------------------------------------------
    def _first(self, samples: TrainingSamples, num_mb: int, generator: torch.Generator) -> dict:
        model, optimizer = self.reference.model, self.reference.optimizer
        start = UpdateState.capture(model, optimizer, generator)
        self._prepare_and_time(samples, num_mb)
        start.restore(model, optimizer, generator)
        for way in self.ways:  # a graph captured above holds Adam state the restore may have replaced
            if isinstance(way.runner, DeviceStep):
                way.runner.release()
        ready = [w for w in self.ways if w.problem is None and w.passed_over is None]
        ready.sort(key=self._ranked_time)
        loop = (self.reference.run(samples, num_mb, generator), UpdateState.capture(model, optimizer, generator))
        nudged: dict[str, tuple] = {}  # by precision: the loop from one ulp away, and where it started
        for way in ready:
            if way.runner is self.reference:  # the loop itself: nothing to check
                return self._keep(way, loop, None, model, optimizer, generator, why="it is the plain loop")
            eps = EPS[way.precision]
            if way.precision not in nudged:
                start.restore(model, optimizer, generator)
                nudge_one_ulp(model, eps=eps)
                origin = UpdateState.capture(model, optimizer, generator)
                nudged[way.precision] = (
                    self.reference.run(samples, num_mb, generator),
                    UpdateState.capture(model, optimizer, generator),
                    origin,
                )
            stats, state, origin = nudged[way.precision]
            start.restore(model, optimizer, generator)
            try:
                got = way.runner.run(samples, num_mb, generator)
                after = (got, UpdateState.capture(model, optimizer, generator))
                narrow = way.precision != "fp32"
                check = compare_updates(
                    loop,
                    (stats, state),
                    after,
                    model,
                    eps,
                    (start, origin) if narrow else None,
                    BF16_MULTIPLE if narrow else ERROR_MULTIPLE,
                    samples.num_samples // num_mb,
                )
            except Exception as exc:  # a capture that fails, an op the graph cannot hold, a compile error
                check = StepCheck(False, f"it raised {describe_error(exc)}")
            if check.ok:
                return self._keep(way, after, check, model, optimizer, generator)
            way.problem = f"its first update did not match the loop's: {check.reason}"
            if isinstance(way.runner, DeviceStep):
                way.runner.release()
            if self.strict:
                raise StepCheckFailed(f"the {way.name}: {way.problem} (learner.step_strict=true)")
            self.check = check
        # None passed: the loop's update stands, and the loop runs from now on.
        loop[1].restore(model, optimizer, generator)
        failed = "; ".join(f"the {w.name}: {w.problem}" for w in self.ways if w.problem)
        self.way = Way("eager", "fp32", self.reference, self.reference)
        self.reason = f"{failed}; the loop runs instead"
        return loop[0]

    def _prepare_and_time(self, samples: TrainingSamples, num_mb: int) -> None:
        eager = [w for w in self.ways if w.kernels == "eager"]
        if len({w.precision for w in eager}) < 2 or len(eager) == len(self.ways):  # nothing compiled to spare
            self._prepare(self.ways, samples, num_mb)
            self._time(self.ways, samples, num_mb)
            return
        # The precision first, on eager kernels (no compile), then its compiled ways beside its eager one
        self._prepare(eager, samples, num_mb)
        self._time(eager, samples, num_mb)
        timed = {w.precision: w for w in eager if w.step_s is not None}
        if len(timed) > 1:  # (a precision whose eager way failed to prepare keeps its compiled ways in the running)
            best = min(timed.values(), key=self._ranked_time)
            for way in self.ways:
                if way.kernels != "eager" and way.precision != best.precision and way.precision in timed:
                    way.passed_over = (
                        f"not prepared: {best.precision}'s eager step ({best.step_s * 1e3:.3g} ms) beat "
                        f"{way.precision}'s ({timed[way.precision].step_s * 1e3:.3g} ms)"
                    )
        else:
            best = eager[0]
        rest = [w for w in self.ways if w.kernels != "eager" and w.passed_over is None]
        self._prepare(rest, samples, num_mb)
        self._time([best, *rest], samples, num_mb)

    def _ranked_time(self, way: Way) -> float:
        """A way's step time as the trial ranks it: any but the first (eager fp32) must be ``MARGIN`` faster to pass."""
        return (way.step_s or 0.0) * (1.0 if way is self.ways[0] else 1.0 / MARGIN)

    def _prepare(self, ways: list[Way], samples: TrainingSamples, num_mb: int) -> None:
        for way in ways:
            started = time.perf_counter()
            try:
                way.runner.prepare(samples, num_mb)
                way.prepare_s = time.perf_counter() - started
            except Exception as exc:  # a compile or capture that fails: this way is out
                way.problem = f"preparing it raised {describe_error(exc)}"
                if self.strict:
                    raise StepCheckFailed(f"the {way.name}: {way.problem} (learner.step_strict=true)") from exc

    def _time(self, ways: list[Way], samples: TrainingSamples, num_mb: int) -> None:
        ready = [w for w in ways if w.problem is None]
        if len(ready) < 2:
            return
        # Interleaved, the fastest of each kept: the machine's speed drifts (workers sampling on the learner's cores),
        # and timing one way after another would hand the drift to whichever came last.
        for _ in range(TIMED_STEPS):
            for way in ready:
                seconds = way.runner.step_seconds(samples, num_mb, 1)
                way.step_s = seconds if way.step_s is None else min(way.step_s, seconds)

    def _keep(
        self,
        way: Way,
        result: tuple[dict, UpdateState],
        check: StepCheck | None,
        model,
        optimizer,
        generator,
        why: str = "",
    ) -> dict:
        """``way`` runs from now on; ``result``: its first update (stats, state after), which stands."""
        result[1].restore(model, optimizer, generator)
        self.way, self.check = way, check or StepCheck(True, why)
        timed = [w for w in self.ways if w.step_s is not None]
        if len(timed) > 1:
            others = ", ".join(f"{w.kernels} {w.precision} {w.step_s * 1e3:.3g} ms" for w in timed)
            self.reason += f"; kept {way.kernels} {way.precision}, the fastest step that matched the loop ({others})"
        return result[0]
