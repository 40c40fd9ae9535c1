"""``auto``: build every other backend that is available here, check each against eager on the
real batch, time them, and keep the fastest (eager included, so it never fails)."""

from __future__ import annotations

import logging
import time

import numpy as np

from distrl.common.errors import describe_error
from distrl.compile.backends import BACKENDS, load_backend
from distrl.compile.backends.base import Built
from distrl.compile.check import check_against_eager
from distrl.compile.policy import EagerPolicy, InferencePolicy

log = logging.getLogger("distrl.compile")


def _candidates() -> list[str]:
    return [name for name, spec in BACKENDS.items() if not spec.chooses and name != "eager"]


def time_policy(policy: InferencePolicy, example: tuple[np.ndarray, ...], seconds: float = 0.3) -> float:
    """Mean microseconds per call, after a short warm-up."""
    for _ in range(3):
        policy(*example)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        policy(*example)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6


class AutoBackend:
    name = "auto"

    def available(self) -> tuple[bool, str]:
        return True, "chooses among: " + ", ".join(["eager", *_candidates()])

    def prepare(self, module, example, mode) -> dict:
        artifacts: dict = {}
        for name in _candidates():
            backend = load_backend(name)
            if backend.available()[0]:
                try:
                    artifacts.update(backend.prepare(module, example, mode))
                except Exception as exc:  # that candidate compiles in each worker instead
                    log.warning("auto: %s could not prepare shared artifacts (%s)", name, describe_error(exc, 200))
        return artifacts

    def build(self, module, example, mode, options, artifacts) -> Built:
        eager = EagerPolicy(module)
        timings = {"eager": time_policy(eager, example)}
        best: InferencePolicy = eager
        notes = []
        for name in _candidates():
            backend = load_backend(name)
            ok, reason = backend.available()
            if not ok:
                notes.append(f"{name}: {reason}")
                continue
            own_options = options.get(name) if isinstance(options.get(name), dict) else {}
            try:
                policy = backend.build(module, example, mode, own_options, artifacts).policy
                problem = check_against_eager(policy, module, example)
            except Exception as exc:  # a candidate that fails to build is passed over
                problem = describe_error(exc, 200)
            if problem:
                notes.append(f"{name}: {problem}")
                continue
            timings[name] = time_policy(policy, example)
            if timings[name] < timings[best.backend]:
                best = policy
        log.info("auto chose %s (%s)", best.backend, ", ".join(f"{k} {v:.0f} us" for k, v in timings.items()))
        return Built(best, timings, "; ".join(notes))


BACKEND = AutoBackend()
