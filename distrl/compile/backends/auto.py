"""``auto``: build every backend that is available here, in each form it takes on this CPU (``forms.py``: bf16 where
the CPU has the instructions, channels-last for convolutions), check each against eager on the real batch, time them,
and keep the fastest (eager included, so it never fails)."""

from __future__ import annotations

import logging

from distrl.common.errors import describe_error
from distrl.compile.backends import BACKENDS, load_backend
from distrl.compile.backends.base import Built, Form
from distrl.compile.forms import Candidate, build_candidate, forms_for, keep_fastest, prepare_forms

log = logging.getLogger("distrl.compile")


def _candidates() -> list[str]:
    return [name for name, spec in BACKENDS.items() if not spec.chooses and name != "eager"]


class AutoBackend:
    name = "auto"

    def available(self) -> tuple[bool, str]:
        return True, "chooses among: " + ", ".join(["eager", *_candidates()])

    def prepare(self, module, example, mode, precision: str = "fp32", memory_format: str = "contiguous") -> dict:
        artifacts: dict = {}
        for name in _candidates():
            if load_backend(name).available()[0]:
                try:
                    artifacts.update(
                        prepare_forms(name, forms_for(precision, memory_format, name, module)[0], module, example, mode)
                    )
                except Exception as exc:  # that candidate compiles in each worker instead
                    log.warning("auto: %s could not prepare shared artifacts (%s)", name, describe_error(exc, 200))
        return artifacts

    def build(
        self, module, example, mode, options, artifacts, precision: str = "fp32", memory_format: str = "contiguous"
    ) -> Built:
        candidates = [build_candidate("eager", Form(), module, example, mode, {}, artifacts)]
        candidates += [
            build_candidate("eager", form, module, example, mode, {}, artifacts)
            for form in forms_for(precision, memory_format, "eager", module)[0]
            if form != Form()
        ]
        notes = []
        for name in _candidates():
            ok, reason = load_backend(name).available()
            if not ok:
                notes.append(f"{name}: {reason}")
                continue
            own_options = options.get(name) if isinstance(options.get(name), dict) else {}
            for form in forms_for(precision, memory_format, name, module)[0]:
                candidates.append(build_candidate(name, form, module, example, mode, own_options, artifacts))
        notes += [f"{c.label}: {c.problem}" for c in candidates if c.problem]
        best: Candidate = keep_fastest(candidates, example)
        timings = {c.label: c.us for c in candidates if c.us is not None}
        log.info("auto chose %s (%s)", best.label, ", ".join(f"{k} {v:.0f} us" for k, v in timings.items()))
        return Built(best.policy, timings, "; ".join(notes), best.form)


BACKEND = AutoBackend()
