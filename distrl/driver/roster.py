"""Roster: the workers the driver hears answering, followed from each ``SampleReport``'s membership events.

The sampler's membership (``rollout/membership.py``) decides who is down, back, lost or evicted; the roster says each
change once, in the run's words, counts the losses (``workers_lost``) and says when too few workers have answered for
too long (``rollout.min_workers`` for ``rollout.min_workers_wait_s``: the run stops with a final checkpoint).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from distrl.common.log import get_logger
from distrl.data.messages import SampleReport

log = get_logger("driver")


class Roster:
    def __init__(self, rollout, counters, started, where: Callable[[int], str], placed: Callable[[int], bool]):
        """``rollout``: the run's ``rollout`` config; ``counters``: the run's (``workers_lost`` counted here);
        ``started``: the workers answering at the start; ``where(index)``: its node, for a line; ``placed(index)``:
        record where a worker that answers runs now, True when it is new to the run (a range's worker that joined)."""
        self.rollout, self.counters, self.where, self.placed = rollout, counters, where, placed
        self.answering: set[int] = set(started)
        self.lost_for_good: set[int] = set()
        self.below_min_since: float | None = None

    def follow(self, report: SampleReport) -> str | None:
        """Say once when a worker stops answering, is evicted, comes back, joins or is lost for good; the stop reason
        when fewer than the range's min have answered for longer than ``rollout.min_workers_wait_s``."""
        stopped = list(report.workers_down)  # evictions are among them: what is left stopped answering
        for index in report.workers_evicted:
            stopped.remove(index)
        for index in stopped:
            self._out(index)
            log.warning(
                f"worker-{index} on {self.where(index)} stopped answering (its process or node is gone); the "
                f"run goes on with {len(self.answering)} workers, and takes it back once Ray restarts it"
            )
        for index in report.workers_evicted:  # the eviction itself was said when made (driver/actors.py)
            self._out(index)
            log.warning(
                f"worker-{index} is out (evicted for the learners); the run goes on with "
                f"{len(self.answering)} workers, and takes its replacement once a node has room"
            )
        for index in report.workers_back:
            joined = self.placed(index)
            self.answering.add(index)
            log.info(
                f"worker-{index} {'joined' if joined else 'is back'} on {self.where(index)} "
                f"({len(self.answering)} workers)"
            )
        for index in report.workers_lost:
            if index in self.lost_for_good:
                continue
            self.lost_for_good.add(index)
            if index in self.answering:  # not counted yet: it had not stopped answering before
                self.counters.workers_lost += 1
            self.answering.discard(index)
            log.warning(
                f"worker-{index} on {self.where(index)} is lost for good (Ray will not restart it); the run "
                f"goes on with {len(self.answering)} workers"
            )
        return self._too_few()

    def _out(self, index: int) -> None:
        self.answering.discard(index)
        self.counters.workers_lost += 1

    def _too_few(self) -> str | None:
        rollout = self.rollout
        if len(self.answering) >= rollout.min_workers:
            self.below_min_since = None
            return None
        now = time.monotonic()
        self.below_min_since = self.below_min_since or now
        # (every worker lost for good: the sampler ends the run with WorkerFailure, naming the last one)
        if now - self.below_min_since > rollout.min_workers_wait_s:
            log.error(
                f"only {len(self.answering)} of the {rollout.min_workers} rollout workers the run needs answer, "
                f"for {now - self.below_min_since:.0f} s (rollout.min_workers_wait_s={rollout.min_workers_wait_s:g}); "
                "stopping with a final checkpoint"
            )
            return "too_few_workers"
        return None
